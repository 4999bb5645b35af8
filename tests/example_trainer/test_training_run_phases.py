"""The training loop's phases run in their documented order, against a real ``run-api`` and the tiny model,
and the inference servers are refreshed every ``refresh_interval`` steps and after the last."""

from __future__ import annotations

from pathlib import Path

from example_trainer.grpo.config import TrainingConfig
from example_trainer.grpo.inference_sync import InferenceSync
from example_trainer.grpo.loop import TrainingRun, train
from tests.helpers.trainer import post_groups

PHASES = (
    "setup", "start_inference", "next_batch", "train_step", "log_step", "due_after", "checkpoint", "acknowledge",
    "refresh_weights", "log_refresh", "evaluate", "finish",
)  # fmt: skip


def _record_phases(monkeypatch, calls: list[tuple[str, int]]) -> None:
    """Wrap every phase of TrainingRun so that each call is recorded with the steps done at that moment."""
    for name in PHASES:
        original = getattr(TrainingRun, name)

        def wrapper(self, *args, _name=name, _original=original, **kwargs):
            calls.append((_name, self.state.step))
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(TrainingRun, name, wrapper)


def _fake_inference(monkeypatch, refreshed: list[tuple[int, str]]) -> None:
    """An inference 'server' that only records what it is asked to serve."""
    monkeypatch.setattr(InferenceSync, "start", lambda self, model_path, adapter_dir=None: None)
    monkeypatch.setattr(InferenceSync, "check", lambda self: None)

    def refresh(self, checkpoint_dir: Path, step: int) -> float:
        assert (Path(checkpoint_dir) / "model.safetensors").is_file()  # a complete checkpoint
        refreshed.append((step, Path(checkpoint_dir).name))
        return 0.0

    monkeypatch.setattr(InferenceSync, "refresh", refresh)


def test_phases_run_in_order_and_weights_are_refreshed_at_the_interval(
    api, tiny_model_dir, tmp_path, monkeypatch
):
    save = tmp_path / "ck"
    config = TrainingConfig(
        model_name=str(tiny_model_dir), atropos_url=api.url, save_path=str(save), log_dir=str(save / "logs"),
        device="cpu", optimizer="adamw", lr=1e-3, micro_batch_size=2, gradient_accumulation_steps=1,
        seq_len=256, training_steps=5, refresh_interval=2, checkpoint_interval=0, refresh_mode="reload",
    )  # fmt: skip
    post_groups(api.url, 5, seed=0)  # one two-sequence group per batch
    calls: list[tuple[str, int]] = []
    refreshed: list[tuple[int, str]] = []
    evaluated: list[tuple[int, str | None]] = []
    _record_phases(monkeypatch, calls)
    _fake_inference(monkeypatch, refreshed)

    def eval_hook(step, model_dir):
        evaluated.append((step, None if model_dir is None else Path(model_dir).name))
        return {"accuracy": 0.5}

    result = train(config, eval_hook=eval_hook)

    assert result.step == 5 and not result.stopped_early
    # every two steps and after the last, from the checkpoint written for it
    assert refreshed == [(2, "step_2"), (4, "step_4"), (5, "final_model")]
    assert evaluated == [(0, None), (2, "step_2"), (4, "step_4"), (5, "final_model")]
    names = [name for name, _ in calls]
    assert names[:2] == ["setup", "start_inference"] and names[-1] == "finish"
    per_step = names[2:-1]
    for step in range(1, 6):
        due = step % 2 == 0 or step == 5
        expected = ["next_batch", "train_step", "log_step", "due_after", *(["checkpoint"] if due else [])]
        expected += ["acknowledge", "refresh_weights", "log_refresh", "evaluate"]
        assert per_step[: len(expected)] == expected, (step, per_step)
        # the step counter advances in train_step, between fetching the batch and the later phases
        assert [s for n, s in calls if n == "next_batch"][step - 1] == step - 1
        per_step = per_step[len(expected) :]
    assert per_step == []  # no batch is fetched once the last step is done
    assert [r["train/refresh_s"] for r in result.history if "train/refresh_s" in r] == [0.0, 0.0, 0.0]
    assert result.final_checkpoint == save / "final_model"


def test_the_schedule_of_a_step(tiny_model_dir, tmp_path):
    """``due_after``: refresh every interval and after the last step, a checkpoint for each refresh read
    from disk and every checkpoint interval; a broadcast refresh needs no checkpoint."""
    from example_trainer.grpo.distributed import DistContext

    base = dict(model_name=str(tiny_model_dir), device="cpu", save_path=str(tmp_path), training_steps=6)
    run = TrainingRun(
        TrainingConfig(**base, refresh_interval=3, checkpoint_interval=2), DistContext(device="cpu")
    )
    due = {step: run.due_after(step) for step in range(1, 7)}
    assert [s for s, d in due.items() if d.refresh] == [3, 6]
    assert [s for s, d in due.items() if d.checkpoint] == [2, 3, 4, 6]
    assert due[6].final and not due[5].final

    broadcast = TrainingConfig(**base, refresh_interval=3, checkpoint_interval=0, refresh_mode="broadcast")
    due = {step: TrainingRun(broadcast, DistContext(device="cpu")).due_after(step) for step in range(1, 7)}
    assert [s for s, d in due.items() if d.broadcast] == [3, 6]
    assert [s for s, d in due.items() if d.checkpoint] == [6]  # only the final one

    no_server = TrainingConfig(**base, refresh_interval=1, use_vllm=False)
    assert not any(
        TrainingRun(no_server, DistContext(device="cpu")).due_after(s).refresh for s in range(1, 7)
    )
