"""The trainer's loop in ``shared_vllm`` and ``--refresh-mode broadcast``, against a real ``run-api`` and the hf
inference server it starts (one process each): after every synchronisation the server's logprobs for a fixed
prompt equal the trained model's, and broadcast writes checkpoints only at ``--checkpoint-interval``."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import pytest

from atroposlib.testing.api_process import free_port
from example_trainer.demo.heldout_eval import load_causal_lm
from example_trainer.grpo.config import TrainingConfig
from example_trainer.grpo.inference_sync import InferenceSync
from example_trainer.grpo.launcher import build_parser, main
from example_trainer.grpo.loop import train
from example_trainer.inference import served_logprobs
from example_trainer.inference.server_lifetime import ServerPidFile
from tests.helpers.trainer import post_groups

PROMPT = [5, 17, 29, 41, 53, 65, 77]
LAST_REPLY: list = []


def _config(tiny_model_dir, api_url, save_path, **kw) -> TrainingConfig:
    base = dict(
        model_name=str(tiny_model_dir), atropos_url=api_url, save_path=str(save_path), device="cpu",
        optimizer="adamw", lr=3e-3, batch_size=2, gradient_accumulation_steps=2, seq_len=256,
        inference_backend="hf", vllm_port=free_port(), vllm_restart_interval=1, training_steps=3,
        checkpoint_interval=0, log_dir=str(save_path / "logs"), vllm_startup_timeout=120,
    )  # fmt: skip
    base.update(kw)
    return TrainingConfig(**base)


def served_vs_model(step: int, model, urls: list[str]) -> dict[str, float]:
    """Largest difference between the server's logprobs of its greedy continuation and the model's."""
    diff, ids, served = served_logprobs.served_vs_model(urls[0], model, PROMPT, max_tokens=4)
    LAST_REPLY[:] = [ids, served]
    return {"max_abs_diff": diff, "first": served[0]}


@pytest.mark.parametrize("mode", ["shared_vllm", "broadcast", "broadcast_async"])
def test_every_synchronisation_serves_the_trained_weights(mode, api, tiny_model_dir, tmp_path):
    extra = {
        "shared_vllm": {"weight_bridge_mode": "shared_vllm"},
        "broadcast": {"refresh_mode": "broadcast"},
        "broadcast_async": {"refresh_mode": "broadcast", "weight_broadcast_async": True},
    }[mode]
    cfg = _config(tiny_model_dir, api.url, tmp_path / "ck", **extra)
    post_groups(api.url, 6, seed=0)
    result = train(cfg, sync_hook=served_vs_model)
    assert result.step == 3 and not result.stopped_early
    diffs = [r["sync/max_abs_diff"] for r in result.history]
    firsts = [r["sync/first"] for r in result.history]
    assert len(diffs) == 3 and max(diffs) < 1e-5
    assert len(set(firsts)) == 3  # each step changed what the server serves
    # Only the final checkpoint was written (--checkpoint-interval 0): no per-refresh step_N on disk.
    assert sorted(p.name for p in (tmp_path / "ck").iterdir() if p.is_dir() and p.name != "logs") == [
        "final_model"
    ]
    # ... and it holds the weights the server served last (in shared_vllm: views of the server's tensors).
    final, _ = load_causal_lm(tmp_path / "ck" / "final_model")
    ids, served = LAST_REPLY
    assert served_logprobs.model_logprobs(final, PROMPT, ids) == pytest.approx(served, abs=1e-5)


def test_a_background_broadcast_holds_each_optimizer_step_until_the_weights_are_sent(
    api, tiny_model_dir, tmp_path, monkeypatch
):
    """--weight-broadcast-async sends the parameters themselves: every optimizer step first waits for the
    hand-off in flight (none before the first); the end waits until the server serves the final weights."""
    waits: list[bool] = []
    original = InferenceSync.wait_until_sent

    def recorded(self):
        waits.append(self.broadcaster is not None)
        original(self)

    monkeypatch.setattr(InferenceSync, "wait_until_sent", recorded)
    cfg = _config(
        tiny_model_dir, api.url, tmp_path / "ck", refresh_mode="broadcast", weight_broadcast_async=True
    )
    post_groups(api.url, 6, seed=0)
    result = train(cfg)
    assert result.step == 3 and waits == [False, True, True]
    assert "train/refresh_s" in result.history[-1]


def test_a_broadcast_after_the_server_died_reaches_the_restarted_server(api, tiny_model_dir, tmp_path):
    cfg = _config(tiny_model_dir, api.url, tmp_path / "ck", refresh_mode="broadcast")
    killed: list[int] = []

    def kill_after_the_first_step(step, model, urls):
        checks = served_vs_model(step, model, urls)
        if (
            step == 1
        ):  # the server dies between two hand-offs; the next one must reach its restarted successor
            port = int(urls[0].rsplit(":", 1)[1])
            pid = int(ServerPidFile(Path(cfg.log_dir) / f"inference_{port}.pid").read()["server_pid"])
            os.killpg(pid, signal.SIGKILL)
            killed.append(pid)
        return checks

    post_groups(api.url, 6, seed=0)
    result = train(cfg, sync_hook=kill_after_the_first_step)
    assert killed and result.step == 3 and not result.stopped_early
    diffs = [r["sync/max_abs_diff"] for r in result.history]
    assert len(diffs) == 3 and max(diffs) < 1e-5  # steps 2 and 3 served by the restarted server


def test_the_launcher_runs_shared_vllm_only(capsys):
    assert build_parser().parse_args(["--model", "m"]).weight_bridge_mode == "shared_vllm"
    with pytest.raises(SystemExit) as exc:
        main(["--model", "m", "--weight-bridge-mode", "none"])
    assert exc.value.code == 2
    assert "runs shared_vllm" in capsys.readouterr().err
