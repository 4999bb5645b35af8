"""A trainer that dies after writing a checkpoint but before the API heard its acknowledgements does not train
those batches again when it resumes: the checkpoint names them and the resumed trainer acknowledges them
before it asks for the replay."""

from __future__ import annotations

import json

import pytest

from example_trainer.grpo.api_client import AtroposClient
from example_trainer.grpo.checkpointing import read_trainer_state
from example_trainer.grpo.config import TrainingConfig
from example_trainer.grpo.loop import train
from tests.helpers.trainer import post_groups


class Crash(BaseException):
    """The process dies here (as a kill -9 between two lines would)."""


def test_a_checkpointed_batch_whose_ack_was_lost_is_not_trained_again(
    api, tiny_model_dir, tmp_path, monkeypatch
):
    save = tmp_path / "ck"
    cfg = TrainingConfig(
        model_name=str(tiny_model_dir), atropos_url=api.url, save_path=str(save), device="cpu",
        optimizer="adamw", lr=1e-3, batch_size=2, gradient_accumulation_steps=1, seq_len=256,
        use_vllm=False, checkpoint_interval=1, training_steps=2, log_dir=str(save / "logs"),
    )  # fmt: skip
    post_groups(api.url, 3, seed=0)  # one two-sequence group per batch

    def crash(self, batch_id):
        raise Crash

    monkeypatch.setattr(AtroposClient, "ack", crash)
    with pytest.raises(Crash):
        train(cfg)  # step 1 trained and checkpointed; its ack never reaches the API
    monkeypatch.undo()
    (first_batch,) = read_trainer_state(save / "step_1").extra["trained_batches"]

    result = train(cfg.model_copy(update={"resume": "latest"}))
    assert result.step == 2
    records = [json.loads(line) for line in (save / "metrics.jsonl").read_text().splitlines()]
    batch_of = {r["step"]: r["train/batch_id"] for r in records if "train/batch_id" in r}
    assert batch_of[2] != first_batch  # step 2 trained a new batch, not step 1's again
