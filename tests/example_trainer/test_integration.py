"""Real optimizer steps of the tiny model on batches from a real ``run-api`` process; resume after kill -9."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
import requests
import torch

from atroposlib.testing.api_process import free_port
from example_trainer.grpo.checkpointing import read_trainer_state
from example_trainer.grpo.config import TrainingConfig
from example_trainer.grpo.loop import train
from example_trainer.grpo.reporting import read_metrics
from tests.helpers.trainer import post_groups as _post_groups

REPO = Path(__file__).resolve().parents[2]


def _config(tiny_model_dir, api_url, save_path, **kw) -> TrainingConfig:
    base = dict(
        model_name=str(tiny_model_dir), atropos_url=api_url, save_path=str(save_path), device="cpu",
        optimizer="adamw", lr=1e-3, batch_size=2, gradient_accumulation_steps=2, seq_len=256,
        use_vllm=False, checkpoint_interval=2, training_steps=3, log_dir=str(save_path / "logs"),
    )  # fmt: skip
    base.update(kw)
    return TrainingConfig(**base)


def test_few_real_steps_against_the_api(api, tiny_model_dir, tmp_path):
    save = tmp_path / "ck"
    cfg = _config(tiny_model_dir, api.url, save, use_wandb=True, wandb_project="atropos-test")
    evals = []

    def eval_hook(step, model_dir):
        evals.append((step, model_dir))
        return {"accuracy": 0.25 * (step + 1)}

    _post_groups(api.url, 2, seed=0)  # one batch ready; the rest arrives while the trainer polls

    def late_producer():
        time.sleep(2.0)
        _post_groups(api.url, 4, seed=10)

    producer = threading.Thread(target=late_producer)
    producer.start()
    try:
        result = train(cfg, eval_hook=eval_hook)
    finally:
        producer.join()

    assert result.step == 3 and not result.stopped_early
    assert result.final_checkpoint == save / "final_model"
    assert sorted(
        p.name for p in save.iterdir() if p.is_dir() and not p.name.startswith(("logs", "wandb"))
    ) == [
        "final_model",
        "step_2",
    ]
    assert read_trainer_state(save / "final_model").step == 3
    assert [e[0] for e in evals] == [0, 3] and evals[0][1] is None and evals[1][1] == save / "final_model"
    # the API and the trainer agree on the step, and every batch was acknowledged
    status = requests.get(f"{api.url}/status").json()
    assert status["current_step"] == 3
    assert requests.post(f"{api.url}/batch/replay").json()["batches"] == 0
    # metrics for every step, the plot written
    metrics = read_metrics(save / "metrics.jsonl")
    assert sorted(s for s in metrics if "train/loss" in metrics[s]) == [1, 2, 3]
    assert metrics[3]["eval/accuracy"] == 1.0 and metrics[0]["eval/accuracy"] == 0.25
    assert all(metrics[s]["train/tokens_per_s"] > 0 for s in (1, 2, 3))
    assert {metrics[s]["train/batch_id"] for s in (1, 2, 3)} == {1, 2, 3}
    assert list((save / "wandb").glob("offline-run-*")), "wandb should log offline without a key"
    png = result.plot_path
    assert png == save / "training_curves.png" and png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    # the final checkpoint is a normal model directory that moved away from the initial weights
    from transformers import AutoModelForCausalLM

    trained = AutoModelForCausalLM.from_pretrained(save / "final_model")
    initial = AutoModelForCausalLM.from_pretrained(tiny_model_dir)
    assert any(not torch.equal(a, b) for a, b in zip(trained.parameters(), initial.parameters(), strict=True))


def _trainer_cmd(tiny_model_dir, api_url, save, steps, extra=()):
    return [
        sys.executable, "-m", "example_trainer.grpo", "--model", str(tiny_model_dir),
        "--atropos-url", api_url, "--save-path", str(save), "--no-vllm", "--device", "cpu",
        "--optimizer", "adamw", "--lr", "1e-3", "--batch-size", "2", "--gradient-accumulation-steps", "2",
        "--training-steps", str(steps), "--checkpoint-interval", "2", "--seq-len", "256", "--resume",
        "--log-dir", str(save / "logs"), *extra,
    ]  # fmt: skip


def _wait_for(predicate, proc, timeout, what):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return
        if proc.poll() is not None:
            raise AssertionError(f"trainer exited with {proc.returncode} before {what}")
        time.sleep(0.2)
    raise AssertionError(f"timed out waiting for {what}")


def _metric_lines(path: Path) -> list[dict]:
    try:
        return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
    except (OSError, ValueError):
        return []


def test_resume_after_kill_9_continues_at_the_same_step(api, tiny_model_dir, tmp_path):
    save = tmp_path / "ck"
    env = {**os.environ, "PYTHONPATH": str(REPO), "WANDB_MODE": "offline"}
    log1 = open(tmp_path / "trainer1.log", "wb")  # noqa: SIM115
    _post_groups(api.url, 6, seed=0)  # three batches now; the trainer then waits for more
    proc = subprocess.Popen(
        _trainer_cmd(tiny_model_dir, api.url, save, 6), stdout=log1, stderr=subprocess.STDOUT, env=env,
        cwd=tmp_path, start_new_session=True,
    )  # fmt: skip
    try:
        metrics_file = save / "metrics.jsonl"
        _wait_for(lambda: any(r.get("step") == 3 for r in _metric_lines(metrics_file)), proc, 240, "step 3")
        assert (save / "step_2").is_dir()
    finally:
        os.kill(proc.pid, signal.SIGKILL)  # a crash: no cleanup, no checkpoint of step 3
        proc.wait(30)
        log1.close()
    first_run = {r["step"]: r for r in _metric_lines(metrics_file) if "train/loss" in r}
    assert sorted(first_run) == [1, 2, 3]
    assert not (save / "step_3").exists() and not (save / "final_model").exists()

    # restart with the same command: resumes from step_2, the unacknowledged batch of step 3 is replayed
    log2 = open(tmp_path / "trainer2.log", "wb")  # noqa: SIM115
    proc2 = subprocess.Popen(
        _trainer_cmd(tiny_model_dir, api.url, save, 6), stdout=log2, stderr=subprocess.STDOUT, env=env,
        cwd=tmp_path, start_new_session=True,
    )  # fmt: skip
    try:
        _wait_for(
            lambda: sum(1 for r in _metric_lines(metrics_file) if r.get("step") == 3) == 2,
            proc2,
            240,
            "step 3 again",
        )
        _post_groups(api.url, 6, seed=100)  # three more batches for steps 4-6
        proc2.wait(240)
    finally:
        if proc2.poll() is None:
            os.kill(proc2.pid, signal.SIGKILL)
            proc2.wait(30)
        log2.close()
    output = (tmp_path / "trainer2.log").read_text()
    assert proc2.returncode == 0, output[-3000:]
    assert "resuming at step 2" in output
    assert "finished at step 6/6" in output

    records = [r for r in _metric_lines(metrics_file) if "train/loss" in r]
    assert [r["step"] for r in records] == [1, 2, 3, 3, 4, 5, 6]
    # step 3 trained the same batch before and after the crash, and no batch twice in the final lineage
    assert records[2]["train/batch_id"] == records[3]["train/batch_id"]
    final_ids = [r["train/batch_id"] for r in records[:2] + records[3:]]
    assert sorted(final_ids) == [1, 2, 3, 4, 5, 6]
    # the trainer's and the API's step counters agree; nothing is left unacknowledged
    assert read_trainer_state(save / "final_model").step == 6
    assert requests.get(f"{api.url}/status").json()["current_step"] == 6
    assert requests.post(f"{api.url}/batch/replay").json()["batches"] == 0


def test_cli_unreachable_api_is_a_one_line_error(tiny_model_dir, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    url = f"http://127.0.0.1:{free_port()}"
    proc = subprocess.run(
        [sys.executable, "-m", "example_trainer.grpo", "--model", str(tiny_model_dir), "--atropos-url", url,
         "--no-vllm", "--api-timeout", "1", "--optimizer", "adamw", "--save-path", str(tmp_path / "ck")],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120,
    )  # fmt: skip
    assert proc.returncode == 1
    errors = [line for line in proc.stderr.splitlines() if line.startswith("atropos-grpo: error:")]
    assert len(errors) == 1 and "not reachable" in errors[0] and url in errors[0]
    assert "Traceback" not in proc.stderr


@pytest.mark.parametrize("mode", ["lora_only", "lora_restart"])
def test_lora_modes_train_and_save_adapters_without_vllm(api, tiny_model_dir, tmp_path, mode):
    save = tmp_path / "ck"
    _post_groups(api.url, 6, seed=0)
    cfg = _config(tiny_model_dir, api.url, save, weight_bridge_mode=mode, lora_r=4, training_steps=3)
    result = train(cfg)
    assert result.step == 3
    assert (save / "adapter_step_2" / "adapter_model.safetensors").is_file()
    assert (save / "final_adapter" / "adapter_config.json").is_file()
    assert (save / "tokenizer" / "tokenizer.json").is_file()


def test_sigterm_finishes_the_step_saves_and_exits_cleanly(api, tiny_model_dir, tmp_path):
    save = tmp_path / "ck"
    env = {**os.environ, "PYTHONPATH": str(REPO), "WANDB_MODE": "offline"}
    _post_groups(api.url, 4, seed=0)  # two batches, then the trainer waits for data that never comes
    cmd = _trainer_cmd(tiny_model_dir, api.url, save, 5, extra=("--checkpoint-interval", "0"))
    with open(tmp_path / "trainer.log", "wb") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env, cwd=tmp_path)
        try:
            _wait_for(
                lambda: any(r.get("step") == 2 for r in _metric_lines(save / "metrics.jsonl")),
                proc,
                240,
                "step 2",
            )
            os.kill(proc.pid, signal.SIGTERM)
            proc.wait(120)
        finally:
            if proc.poll() is None:
                os.kill(proc.pid, signal.SIGKILL)
                proc.wait(30)
    output = (tmp_path / "trainer.log").read_text()
    assert proc.returncode == 0, output[-3000:]
    assert "stopped at step 2/5" in output
    assert read_trainer_state(save / "step_2").step == 2
    assert requests.post(f"{api.url}/batch/replay").json()["batches"] == 0
