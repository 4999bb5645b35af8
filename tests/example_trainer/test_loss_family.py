"""The GRPO family of losses, TIS and distillation against values computed by hand on one small batch.

The batch: two sequences (2 and 3 trained tokens), advantages +1 and -1, token importance ratios chosen
so that every clipping case occurs. The expected numbers are worked out in the comments.
"""

from __future__ import annotations

import math

import pytest
import torch

from example_trainer.grpo import loss as loss_mod
from example_trainer.grpo.advantages import group_advantages, overlong_penalty
from example_trainer.grpo.loss import LossSettings, StepTotals, policy_loss

MASK = torch.tensor([[True, True, False], [True, True, True]])
LOGP = torch.tensor([[-1.0, -0.5, 0.0], [-2.0, -1.0, -0.2]])
RATIO = torch.tensor([[1.5, 0.9, 1.0], [0.7, 1.1, 1.3]])
ADV = torch.tensor([[1.0], [-1.0]])
TOTALS = StepTotals(sequences=2, tokens=5, longest=3, completion_budget=4)


@pytest.fixture(autouse=True)
def _reset_warnings():
    loss_mod._WARNED.clear()
    yield
    loss_mod._WARNED.clear()


def _run(settings: LossSettings, totals: StepTotals = TOTALS, lam=None, **kw):
    logp = LOGP.clone().requires_grad_(True)
    rollout = LOGP - torch.log(RATIO) if lam is None else lam
    out = policy_loss(logp, MASK, ADV, rollout, settings, totals, **kw)
    out.loss.backward()
    return out, logp.grad


# Per-token clipped objective -min(r A, clip(r) A) with the range [0.8, 1.2]:
#   sequence 0 (A = +1): r 1.5 -> -1.2, r 0.9 -> -0.9
#   sequence 1 (A = -1): r 0.7 -> 0.8, r 1.1 -> 1.1, r 1.3 -> 1.3
@pytest.mark.parametrize(
    ("settings", "expected"),
    [
        # per-sequence token means -1.05 and 3.2 / 3, then their mean
        (LossSettings("grpo"), (-1.05 + 3.2 / 3) / 2),
        # token sums -2.1 and 3.2 over N * C = 2 * 4
        (LossSettings("dr_grpo"), (-2.1 + 3.2) / 8),
        # clip-higher [0.8, 1.28]: -1.28 - 0.9 + 0.8 + 1.1 + 1.3 over T = 5 tokens
        (LossSettings("dapo", clip_eps_high=0.28), (-1.28 - 0.9 + 0.8 + 1.1 + 1.3) / 5),
        # sequence ratios sqrt(1.5 * 0.9) = 1.1619 (inside the range) and (0.7 * 1.1 * 1.3)^(1/3) = 1.00033
        (LossSettings("gspo"), (-math.sqrt(1.35) + 1.001 ** (1 / 3)) / 2),
        # -sg(clip(r)) A l: 1.2 * -1 * -1 ... = 1.2 + 0.45 - 1.6 - 1.1 - 0.24 over 5 tokens
        (LossSettings("cispo"), (1.2 + 0.45 - 1.6 - 1.1 - 0.24) / 5),
    ],
    ids=["grpo", "dr_grpo", "dapo", "gspo", "cispo"],
)
def test_each_loss_matches_its_hand_computed_value(settings, expected):
    out, _ = _run(settings)
    assert out.loss.item() == pytest.approx(expected, rel=1e-5)


def test_gradients_follow_each_papers_form():
    # grpo: d/dl of -r A / |o_b| / N for tokens inside the range; clipped tokens have none
    _, grad = _run(LossSettings("grpo"))
    assert grad[0, 0] == 0  # r 1.5 > 1.2 with A > 0: clipped
    assert grad[0, 1].item() == pytest.approx(-0.9 / 2 / 2)
    assert grad[1, 0] == 0  # r 0.7 < 0.8 with A < 0: clipped
    assert grad[1, 2].item() == pytest.approx(1.3 / 3 / 2)  # r 1.3 > 1.2 with A < 0: kept (standard PPO)
    # dapo's higher clip keeps 1.5 clipped but 1.25 would pass: the range is asymmetric
    _, grad = _run(LossSettings("dapo", clip_eps_high=0.6))
    assert grad[0, 0].item() == pytest.approx(-1.5 / 5)
    # cispo: every token has a gradient, -clip(r) A / T, clipped ones included
    _, grad = _run(LossSettings("cispo"))
    expected = torch.tensor([[-1.2, -0.9, 0.0], [0.8, 1.1, 1.2]]) / 5
    torch.testing.assert_close(grad, expected)
    # gspo: one ratio per sequence, its gradient spread evenly over the sequence's tokens
    _, grad = _run(LossSettings("gspo"))
    assert grad[0, 0].item() == pytest.approx(grad[0, 1].item())
    assert grad[0, 0].item() == pytest.approx(-math.sqrt(1.35) / 2 / 2)


def test_dr_grpo_without_a_budget_divides_by_the_longest_completion():
    out, _ = _run(LossSettings("dr_grpo"), StepTotals(sequences=2, tokens=5, longest=3))
    assert out.loss.item() == pytest.approx((-2.1 + 3.2) / 6, rel=1e-5)


def test_totals_make_micro_batches_add_up_to_the_step():
    """Two micro-batches of one sequence each sum to the two-sequence step, for every loss type."""
    for kind in ("grpo", "dr_grpo", "dapo", "gspo", "cispo"):
        settings = LossSettings(kind)
        whole = _run(settings)[0].loss.item()
        parts = 0.0
        for b in range(2):
            logp = LOGP[b : b + 1].clone().requires_grad_(True)
            lam = (LOGP - torch.log(RATIO))[b : b + 1]
            parts += policy_loss(logp, MASK[b : b + 1], ADV[b : b + 1], lam, settings, TOTALS).loss.item()
        assert parts == pytest.approx(whole, rel=1e-5), kind


def test_advantage_estimators():
    scores = [1.0, 0.0, 0.0, 1.0]
    assert group_advantages(scores, "grpo").tolist() == pytest.approx([1, -1, -1, 1])
    assert group_advantages(scores, "grpo", scale_by_std=False).tolist() == pytest.approx(
        [0.5, -0.5, -0.5, 0.5]
    )
    # leave-one-out: 1 - mean(0, 0, 1) = 2/3; 0 - mean(1, 0, 1) = -2/3
    assert group_advantages(scores, "rloo").tolist() == pytest.approx([2 / 3, -2 / 3, -2 / 3, 2 / 3])
    assert group_advantages(scores, "none").tolist() == scores
    assert group_advantages([0.7], "rloo").tolist() == [0.7]
    with pytest.raises(ValueError, match="unknown advantage"):
        group_advantages(scores, "ppo")


def test_overlong_penalty_ramps_down_in_the_buffer():
    assert [overlong_penalty(n, 8, 4) for n in (3, 4, 5, 6, 8, 9)] == [0, 0, -0.25, -0.5, -1, -1]
    assert overlong_penalty(9, 8, 0) == -1 and overlong_penalty(8, 8, 0) == 0


# --- truncated importance sampling ------------------------------------------------------------------------
def test_tis_weights_tokens_by_the_truncated_engine_trainer_ratio():
    """Inference logprobs perturbed so that pi_trainer / pi_inference is 3, 0.5 and 1: with cap 2 the
    on-policy objective -A l is weighted 2, 0.5 and 1, and the mismatch metric reports log 3 / log 0.5."""
    lam = LOGP.clone()
    lam[0, 0] -= math.log(3.0)  # the engine gave this token a third of the trainer's probability
    lam[1, 1] += math.log(2.0)  # and this one twice
    out, grad = _run(LossSettings("dapo", tis_cap=2.0), lam=lam)
    weights = torch.tensor([[2.0, 1.0, 0.0], [1.0, 0.5, 1.0]])
    # on-policy ratio 1: per-token loss -A w, token mean over T = 5
    assert out.loss.item() == pytest.approx((-(2 + 1) + (1 + 0.5 + 1)) / 5, rel=1e-5)
    torch.testing.assert_close(grad, -(ADV * weights * MASK) / 5)
    m = out.metrics
    assert m["mismatch_log_ratio_mean"] == pytest.approx((math.log(3) - math.log(2)) / 5, rel=1e-5)
    assert m["mismatch_log_ratio_max"] == pytest.approx(math.log(3), rel=1e-5)
    assert m["tis_truncated_fraction"] == pytest.approx(1 / 5)
    # without a cap the same perturbation enters the PPO ratio (r = 3 is clipped for A > 0)
    plain, grad = _run(LossSettings("dapo"), lam=lam)
    assert grad[0, 0] == 0 and "tis_truncated_fraction" not in plain.metrics


def test_unperturbed_logprobs_leave_tis_without_effect():
    lam = LOGP.clone()
    with_tis, g1 = _run(LossSettings("grpo", tis_cap=2.0), lam=lam)
    without, g2 = _run(LossSettings("grpo"), lam=lam)
    assert with_tis.loss.item() == pytest.approx(without.loss.item())
    torch.testing.assert_close(g1, g2)
    assert with_tis.metrics["mismatch_log_ratio_max"] == 0


# --- distillation -----------------------------------------------------------------------------------------
TEACHER = torch.tensor([[-0.5, -0.5, float("nan")], [-2.0, float("nan"), -1.2]])  # NaN: not reported


def test_reverse_kl_distillation_on_the_students_tokens():
    """gamma * sum_t w_t (l - tau) with grpo's weights 1/(N |o_b|); the gradient is gamma w (l - tau)."""
    settings = LossSettings("grpo", rl_coef=0.0, distill_coef=0.5)
    out, grad = _run(settings, teacher_logprobs=TEACHER)
    # covered tokens: (0,0) gap -0.5, (0,1) gap 0, (1,0) gap 0, (1,2) gap 1.0
    value = 0.5 * (-0.5 / 2 / 2 + 1.0 / 3 / 2)
    assert out.loss.item() == pytest.approx(value, rel=1e-5)
    expected = torch.zeros(2, 3)
    expected[0, 0] = 0.5 * -0.5 / 4
    expected[1, 2] = 0.5 * 1.0 / 6
    torch.testing.assert_close(grad, expected)
    assert out.metrics["distill_kl"] == pytest.approx((-0.5 + 0 + 0 + 1.0) / 4)
    assert out.metrics["distill_coverage"] == pytest.approx(4 / 5)


def test_forward_topk_kl_distillation():
    """sum_j q_j (log q_j - s_j) with q the teacher's top-k renormalised, at the one position that has it."""
    teacher_topk = torch.full((2, 3, 2), float("nan"))
    teacher_topk[1, 0] = torch.tensor([math.log(0.3), math.log(0.1)])  # renormalised: 0.75, 0.25
    student = torch.zeros(2, 3, 2)
    student[1, 0] = torch.tensor([math.log(0.5), math.log(0.25)])
    settings = LossSettings("dapo", rl_coef=0.0, distill_coef=1.0, distill_kind="forward")
    logp = LOGP.clone().requires_grad_(True)
    student_leaf = student.clone().requires_grad_(True)
    out = policy_loss(
        logp, MASK, ADV, None, settings, TOTALS,
        teacher_topk_logprobs=teacher_topk, student_topk_logprobs=student_leaf,
    )  # fmt: skip
    kl = 0.75 * math.log(0.75 / 0.5) + 0.25 * math.log(0.25 / 0.25)
    assert out.loss.item() == pytest.approx(kl / 5, rel=1e-5)
    out.loss.backward()
    assert student_leaf.grad[1, 0].tolist() == pytest.approx([-0.75 / 5, -0.25 / 5])


def test_distillation_adds_to_the_rl_loss_and_is_absent_without_teacher_data():
    rl_only = _run(LossSettings("grpo"))[0].loss.item()
    no_teacher, _ = _run(LossSettings("grpo", distill_coef=0.5))
    assert no_teacher.loss.item() == pytest.approx(rl_only)
    assert "distill_kl" not in no_teacher.metrics
    both, _ = _run(LossSettings("grpo", distill_coef=0.5), teacher_logprobs=TEACHER)
    distill_only, _ = _run(LossSettings("grpo", rl_coef=0.0, distill_coef=0.5), teacher_logprobs=TEACHER)
    assert both.loss.item() == pytest.approx(rl_only + distill_only.loss.item(), rel=1e-5)
