"""The GRPO loss: formula, both clip signs (and the original's mirrored clip), masks, KL, fallbacks."""

from __future__ import annotations

import logging
import math

import pytest
import torch

from example_trainer.grpo import loss as loss_mod
from example_trainer.grpo.loss import compute_grpo_loss, token_logprobs

EPS = 0.2


@pytest.fixture(autouse=True)
def _reset_warnings():
    loss_mod._WARNED.clear()
    yield
    loss_mod._WARNED.clear()


def original_token_loss(ratio: torch.Tensor, adv: torch.Tensor, eps: float) -> torch.Tensor:
    """atroposlib 0.4.0's per-token objective: the clip is mirrored for negative advantages."""
    clipped = torch.clamp(ratio, 1 - eps, 1 + eps)
    return torch.where(
        adv >= 0, -torch.minimum(ratio * adv, clipped * adv), -torch.maximum(ratio * adv, clipped * adv)
    )


def _setup(b=2, k=4, v=7, seed=0):
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(b, k, v, generator=g)
    labels = torch.randint(0, v, (b, k), generator=g)
    return logits, labels


def _logprobs_for_ratio(logits, labels, ratio: float) -> torch.Tensor:
    """Rollout logprobs that make every token's importance ratio equal ``ratio``."""
    with torch.no_grad():
        return token_logprobs(logits, labels, None) - math.log(ratio)


def _grad(logits, labels, adv, lam, **kw):
    logits = logits.clone().requires_grad_(True)
    out = compute_grpo_loss(logits, labels, adv, None, lam, clip_eps=EPS, **kw)
    out.loss.backward()
    return out, logits.grad


def test_matches_the_documented_formula():
    logits, labels = _setup(b=3, k=5)
    labels[0, :2] = -100
    labels[2, :4] = -100
    adv = torch.tensor([[1.5], [-0.7], [0.3]], dtype=torch.float64)
    temps = torch.tensor([0.7, 1.0, 1.3]).view(3, 1, 1)
    g = torch.Generator().manual_seed(1)
    lam = -torch.rand(3, 5, generator=g) * 3
    out = compute_grpo_loss(logits, labels, adv, temps, lam, clip_eps=EPS, gradient_accumulation_steps=4)

    logp = torch.log_softmax(logits / temps, dim=-1).gather(-1, labels.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    mask = (labels != -100).float()
    r = torch.exp(logp - lam)
    a = adv.float()
    per_tok = -torch.minimum(r * a, torch.clamp(r, 1 - EPS, 1 + EPS) * a)
    expected = ((per_tok * mask).sum(1) / mask.sum(1)).mean() / 4
    assert out.loss.item() == pytest.approx(expected.item(), rel=1e-5)
    assert out.token_logprobs[mask.bool()].tolist() == pytest.approx(logp[mask.bool()].tolist(), rel=1e-5)


@pytest.mark.parametrize(("ratio", "has_grad"), [(1.5, False), (1.1, True), (0.5, True)])
def test_positive_advantage_is_clipped_above_only(ratio, has_grad):
    logits, labels = _setup()
    adv = torch.ones(2, 1)
    _, grad = _grad(logits, labels, adv, _logprobs_for_ratio(logits, labels, ratio))
    assert (grad.abs().sum() > 0) == has_grad


@pytest.mark.parametrize(("ratio", "has_grad"), [(1.5, True), (0.9, True), (0.5, False)])
def test_negative_advantage_uses_standard_ppo_clip(ratio, has_grad):
    """A < 0: the gradient survives r > 1+eps (the policy drifted toward a bad token) and vanishes for
    r < 1-eps (it is already pushed down enough)."""
    logits, labels = _setup()
    adv = -torch.ones(2, 1)
    _, grad = _grad(logits, labels, adv, _logprobs_for_ratio(logits, labels, ratio))
    assert (grad.abs().sum() > 0) == has_grad


def test_original_mirrored_clip_diverges_for_negative_advantage_above_the_range():
    logits, labels = _setup()
    ratio = 1.5  # > 1 + eps
    adv = -torch.ones(2, 1)
    lam = _logprobs_for_ratio(logits, labels, ratio)
    ours, ours_grad = _grad(logits, labels, adv, lam)

    # The original formula on the same inputs
    x = logits.clone().requires_grad_(True)
    logp = token_logprobs(x, labels, None)
    orig = original_token_loss(torch.exp(logp - lam), adv, EPS).mean()
    orig.backward()

    # values: ours = -A * r = 1.5 per token; original = -A * (1 + eps) = 1.2
    assert ours.loss.item() == pytest.approx(1.5, rel=1e-5)
    assert orig.item() == pytest.approx(1.2, rel=1e-5)
    # gradients: ours pushes the bad tokens down, the original ignores them
    assert ours_grad.abs().sum() > 0
    assert x.grad.abs().sum() == 0


@pytest.mark.parametrize(("sign", "ratio"), [(1.0, 1.5), (1.0, 0.5), (1.0, 1.05), (-1.0, 1.05), (0.0, 1.5)])
def test_original_and_standard_agree_elsewhere(sign, ratio):
    logits, labels = _setup()
    adv = torch.full((2, 1), sign)
    lam = _logprobs_for_ratio(logits, labels, ratio)
    ours = compute_grpo_loss(logits, labels, adv, None, lam, clip_eps=EPS)
    r = torch.exp(token_logprobs(logits, labels, None) - lam)
    orig = original_token_loss(r, adv, EPS).mean()
    assert ours.loss.item() == pytest.approx(orig.item(), abs=1e-6)


def test_original_and_standard_differ_for_negative_advantage_below_the_range():
    logits, labels = _setup()
    adv = -torch.ones(2, 1)
    lam = _logprobs_for_ratio(logits, labels, 0.5)
    ours = compute_grpo_loss(logits, labels, adv, None, lam, clip_eps=EPS)
    r = torch.exp(token_logprobs(logits, labels, None) - lam)
    orig = original_token_loss(r, adv, EPS).mean()
    assert ours.loss.item() == pytest.approx(0.8, rel=1e-5)  # -A * (1 - eps)
    assert orig.item() == pytest.approx(0.5, rel=1e-5)  # -A * r


def test_masked_positions_do_not_matter_and_sequences_are_token_averaged():
    logits, labels = _setup(b=2, k=4)
    labels[0, :3] = -100  # 1 trained token in sequence 0, 4 in sequence 1
    adv = torch.tensor([[1.0], [1.0]])
    base = compute_grpo_loss(logits, labels, adv, None, None)
    noisy = logits.clone()
    noisy[0, :3] += 100 * torch.randn(3, logits.shape[-1])
    assert compute_grpo_loss(noisy, labels, adv, None, None).loss.item() == pytest.approx(base.loss.item())
    # on-policy ratio: per-sequence loss is -A, the mean over sequences is -1 whatever the token counts
    assert base.loss.item() == pytest.approx(-1.0)
    # a sequence with no trained token contributes 0 and does not divide by zero
    labels[0, :] = -100
    out = compute_grpo_loss(logits, labels, adv, None, None)
    assert out.loss.item() == pytest.approx(-0.5)
    assert torch.isfinite(out.loss)


def test_accumulation_scaling():
    logits, labels = _setup()
    adv = torch.tensor([[1.0], [-2.0]])
    lam = _logprobs_for_ratio(logits, labels, 1.1)
    one = compute_grpo_loss(logits, labels, adv, None, lam).loss
    four = compute_grpo_loss(logits, labels, adv, None, lam, gradient_accumulation_steps=4).loss
    assert four.item() == pytest.approx(one.item() / 4)


def test_missing_inference_logprobs_falls_back_to_on_policy_with_one_warning(caplog):
    logits, labels = _setup()
    adv = torch.tensor([[0.5], [-1.0]])
    with caplog.at_level(logging.WARNING, logger="example_trainer.grpo.loss"):
        out, grad = _grad(logits, labels, adv, None)
        compute_grpo_loss(logits, labels, adv, None, None)
    assert sum("no inference_logprobs" in r.message for r in caplog.records) == 1
    assert out.metrics["mean_ratio"] == pytest.approx(1.0)
    # the gradient is the plain policy gradient of -A * mean(logp)
    x = logits.clone().requires_grad_(True)
    pg = (-(adv * token_logprobs(x, labels, None)).mean(dim=1)).mean()
    pg.backward()
    torch.testing.assert_close(grad, x.grad)


def test_nan_logprobs_fall_back_per_sequence():
    logits, labels = _setup()
    adv = torch.tensor([[1.0], [1.0]])
    lam = _logprobs_for_ratio(logits, labels, 1.5)
    lam[1] = float("nan")
    out = compute_grpo_loss(logits, labels, adv, None, lam, clip_eps=EPS)
    assert torch.isfinite(out.loss)
    # sequence 0 clipped at 1.2, sequence 1 on-policy ratio 1
    assert out.loss.item() == pytest.approx(-(1.2 + 1.0) / 2, rel=1e-5)


def test_token_level_advantages():
    logits, labels = _setup(b=1, k=4)
    adv = torch.tensor([[2.0, 0.0, 0.0, -2.0]])
    out = compute_grpo_loss(logits, labels, adv, None, None)
    assert out.loss.item() == pytest.approx(0.0, abs=1e-6)
    x = logits.clone().requires_grad_(True)
    compute_grpo_loss(x, labels, adv, None, None).loss.backward()
    assert x.grad[0, 1].abs().sum() == 0 and x.grad[0, 2].abs().sum() == 0
    assert x.grad[0, 0].abs().sum() > 0 and x.grad[0, 3].abs().sum() > 0


def test_temperature_scales_logits_and_non_positive_means_one():
    logits, labels = _setup()
    t = torch.tensor([0.5, 0.0]).view(2, 1, 1)
    lp = token_logprobs(logits, labels, t)
    ref0 = token_logprobs(logits[:1] / 0.5, labels[:1], None)
    ref1 = token_logprobs(logits[1:], labels[1:], None)
    torch.testing.assert_close(lp, torch.cat([ref0, ref1]))


def test_kl_penalty_k3():
    logits, labels = _setup()
    adv = torch.zeros(2, 1)
    logp = token_logprobs(logits, labels, None)
    # reference equal to the policy: KL 0, loss unchanged
    same = compute_grpo_loss(logits, labels, adv, None, None, kl_coef=0.5, ref_logprobs=logp)
    assert same.loss.item() == pytest.approx(0.0, abs=1e-7) and same.metrics["kl"] == pytest.approx(
        0.0, abs=1e-7
    )
    ref = logp - 0.3
    out = compute_grpo_loss(logits, labels, adv, None, None, kl_coef=0.5, ref_logprobs=ref)
    k3 = math.exp(-0.3) + 0.3 - 1
    assert out.metrics["kl"] == pytest.approx(k3, rel=1e-5)
    assert out.loss.item() == pytest.approx(0.5 * k3, rel=1e-5)
    # off by default: ref_logprobs are ignored
    assert compute_grpo_loss(logits, labels, adv, None, None, ref_logprobs=ref).loss.item() == pytest.approx(
        0.0
    )
    with pytest.raises(ValueError, match="ref_logprobs"):
        compute_grpo_loss(logits, labels, adv, None, None, kl_coef=0.1)


def test_metrics():
    logits, labels = _setup()
    adv = torch.tensor([[1.0], [-1.0]])
    lam = _logprobs_for_ratio(logits, labels, 1.5)
    m = compute_grpo_loss(logits, labels, adv, None, lam, clip_eps=EPS).metrics
    assert m["mean_ratio"] == pytest.approx(1.5, rel=1e-5)
    assert m["clipped_fraction"] == pytest.approx(1.0)
    assert m["logprob_diff_mean"] == pytest.approx(math.log(1.5), rel=1e-5)
    assert m["pos_count"] == 1 and m["neg_count"] == 1
