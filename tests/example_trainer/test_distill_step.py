"""Teacher logprobs and score shaping through ``prepare_batch`` and one optimizer step on the tiny model."""

from __future__ import annotations

import math

import pytest
import torch

from example_trainer.grpo.config import TrainingConfig
from example_trainer.grpo.data import IGNORE_INDEX, ScoreShaping, prepare_batch
from example_trainer.grpo.model import load_model_and_tokenizer, trainable_parameters
from example_trainer.grpo.step import create_optimizer, run_training_step
from tests.helpers.trainer import make_group


def _with_teacher(group: dict, k: int = 3) -> dict:
    """Teacher rows per position: the token itself at log(0.5), then two other ids."""
    group["distill_token_ids"] = [[[tok, tok + 1, tok + 2][:k] for tok in seq] for seq in group["tokens"]]
    group["distill_logprobs"] = [
        [[math.log(0.5), math.log(0.2), math.log(0.1)][:k] for _ in seq] for seq in group["tokens"]
    ]
    return group


def test_teacher_rows_are_shifted_like_the_labels():
    group = _with_teacher(make_group(n=2, lengths=[6, 8], seed=1))
    mb = prepare_batch([group], micro_batch_size=2).micro_batches[0]
    trained = mb.labels != IGNORE_INDEX
    assert mb.teacher_topk_ids.shape == (*mb.labels.shape, 3)
    # model position t predicts token t + 1: the teacher's first entry there is the label itself
    assert torch.equal(mb.teacher_topk_ids[..., 0][trained], mb.labels[trained])
    assert torch.allclose(mb.teacher_logprobs[trained], torch.tensor(math.log(0.5)))
    padded = torch.arange(mb.labels.shape[1]) >= 7  # row 1 has 8 tokens: 7 model positions
    assert torch.isnan(mb.teacher_topk_logprobs[1, padded]).all()


def test_a_group_without_teacher_fields_has_no_teacher_tensors_and_a_misaligned_row_is_ignored():
    plain = prepare_batch([make_group(n=2, seed=2)], micro_batch_size=2)
    assert not plain.has_teacher and plain.micro_batches[0].teacher_topk_ids is None
    group = _with_teacher(make_group(n=2, lengths=[6, 8], seed=3))
    group["distill_logprobs"][1] = group["distill_logprobs"][1][:-1]  # one position short
    mb = prepare_batch([group], micro_batch_size=2).micro_batches[0]
    assert torch.isnan(mb.teacher_logprobs[1]).all() and not torch.isnan(mb.teacher_logprobs[0]).all()


def test_score_shaping_estimators_and_overlong_penalty():
    # trained lengths 2, 5, 7, 8 with budget 8 and buffer 4: penalties 0, -0.25, -0.75, -1
    group = make_group(n=4, lengths=[5, 8, 10, 11], prompt_len=3, scores=[1.0, 1.0, 1.0, 1.0])
    shaping = ScoreShaping(advantage="none", overlong=(8, 4))
    adv = prepare_batch([group], 4, shaping=shaping).micro_batches[0].advantages[:, 0]
    assert adv.tolist() == pytest.approx([1.0, 0.75, 0.25, 0.0])
    rloo = prepare_batch([group | {"scores": [1.0, 0.0, 0.0, 0.0]}], 4, shaping=ScoreShaping("rloo"))
    assert rloo.micro_batches[0].advantages[:, 0].tolist() == pytest.approx([1.0, -1 / 3, -1 / 3, -1 / 3])


@pytest.fixture(scope="module")
def tiny_config(tiny_model_dir, tmp_path_factory):
    return TrainingConfig(
        model_name=str(tiny_model_dir), device="cpu", optimizer="adamw", lr=1e-3, micro_batch_size=4,
        save_path=str(tmp_path_factory.mktemp("ckpt")), max_grad_norm=1e9,
    )  # fmt: skip


def _step(config: TrainingConfig, groups: list[dict], share_prefixes: bool | None = None):
    torch.manual_seed(0)
    model, _ = load_model_and_tokenizer(config)
    opt = create_optimizer(trainable_parameters(model), config)
    metrics = run_training_step(
        model, opt, prepare_batch(groups, config.batch_size), config, 0, share_prefixes=share_prefixes
    )
    return metrics, [p.detach().clone() for p in model.parameters()]


def test_groups_without_teacher_fields_train_with_the_rl_loss_only(tiny_config):
    groups = [make_group(n=4, seed=5, scores=[1.0, 0.0, 0.5, 0.0])]
    rl_metrics, rl = _step(tiny_config, groups)
    distill_metrics, distilled = _step(tiny_config.model_copy(update={"distill_coef": 0.5}), groups)
    assert all(torch.equal(a, b) for a, b in zip(rl, distilled, strict=True))
    assert distill_metrics["loss"] == pytest.approx(rl_metrics["loss"])
    assert "distill_kl" not in distill_metrics
    # the same groups with teacher data: the distillation term changes the update
    taught = [_with_teacher(g) for g in groups]
    metrics, with_teacher = _step(tiny_config.model_copy(update={"distill_coef": 0.5}), taught)
    assert any(not torch.equal(a, b) for a, b in zip(rl, with_teacher, strict=True))
    assert metrics["distill_coverage"] == pytest.approx(1.0)


def _one_prompt(group: dict) -> dict:
    """The group's completions share the first sequence's prompt (3 tokens), as a GRPO group's do."""
    for seq, mask in zip(group["tokens"], group["masks"], strict=True):
        seq[:3] = group["tokens"][0][:3]
        mask[3:] = seq[3:]
    return group


@pytest.mark.parametrize("kind", ["reverse", "forward"])
def test_shared_prompts_and_row_by_row_give_the_same_distillation_step(tiny_config, kind):
    groups = [
        _with_teacher(_one_prompt(make_group(n=4, seed=7, scores=[1.0, 0.0, 0.5, 0.0]))),
        _one_prompt(make_group(n=4, seed=9, scores=[0.0, 1.0, 0.0, 0.0])),  # no teacher
    ]
    from example_trainer.grpo.step import shared_prefix_layout

    assert shared_prefix_layout(prepare_batch(groups, 8).micro_batches[0]) is not None
    config = tiny_config.model_copy(
        update={"distill_coef": 1.0, "distill_kind": kind, "loss_type": "dapo", "batch_size": 8}
    )
    shared_metrics, shared = _step(config, groups, share_prefixes=True)
    row_metrics, rows = _step(config, groups, share_prefixes=False)
    assert shared_metrics["loss"] == pytest.approx(row_metrics["loss"], rel=1e-4)
    for a, b in zip(shared, rows, strict=True):
        torch.testing.assert_close(a, b, rtol=1e-3, atol=1e-4)  # weights after one Adam step of lr 1e-3


def test_step_logs_the_engine_trainer_mismatch_and_truncates_with_tis(tiny_config):
    """Inference logprobs perturbed far from the trainer's: the step reports the log-ratio's mean and max
    (the max over micro-batches, not their mean) and, with --tis-cap, the truncated share of tokens."""
    groups = [make_group(n=4, seed=11 + i, scores=[1.0, 0.0, 0.5, 0.0]) for i in range(2)]
    for g in groups:  # the engine claims every token was almost certain: pi_trainer / pi_inference << 1
        g["inference_logprobs"] = [[-0.01] * len(t) for t in g["tokens"]]
    groups[1]["inference_logprobs"] = [[-30.0] * len(t) for t in groups[1]["tokens"]]  # and far too unlikely
    config = tiny_config.model_copy(update={"tis_cap": 2.0, "batch_size": 4})
    metrics, _ = _step(config, groups)
    # micro-batch 0: log ratios l + 0.01 < 0; micro-batch 1: l + 30 > 0, all truncated at the cap
    assert metrics["mismatch_log_ratio_max"] > 20
    assert metrics["tis_truncated_fraction"] == pytest.approx(0.5)
    plain, _ = _step(tiny_config.model_copy(update={"batch_size": 4}), groups)
    assert plain["mismatch_log_ratio_max"] == pytest.approx(metrics["mismatch_log_ratio_max"], rel=1e-4)
    assert "tis_truncated_fraction" not in plain
