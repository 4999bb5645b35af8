"""A trainer killed outright (``kill -9`` of its process group, as a crashed node would be) takes its inference
server with it, and the same command with ``--resume latest`` carries on from the last checkpoint: nobody has to
find and stop an orphaned server that keeps the port."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from atroposlib.testing.api_process import free_port
from atroposlib.utils.processes import read_tail, stop_process
from example_trainer.grpo.checkpointing import STATE_JSON
from example_trainer.inference.server_lifetime import ServerPidFile, process_start_time
from tests.helpers.trainer import post_groups

pytestmark = pytest.mark.slow


def _trainer_command(model: Path, api_url: str, save: Path, port: int) -> list[str]:
    return [
        sys.executable, "-m", "example_trainer.grpo",
        "--model", str(model), "--atropos-url", api_url, "--training-steps", "4",
        "--batch-size", "2", "--gradient-accumulation-steps", "1", "--optimizer", "adamw", "--lr", "1e-3",
        "--device", "cpu", "--seq-len", "256", "--save-path", str(save), "--checkpoint-interval", "1",
        "--vllm-restart-interval", "1", "--refresh-mode", "reload", "--inference-backend", "hf",
        "--vllm-port", str(port), "--max-model-len", "256", "--vllm-startup-timeout", "120",
        "--log-dir", str(save / "logs"), "--resume", "latest",
    ]  # fmt: skip


def _start(cmd: list[str], log: Path) -> subprocess.Popen:
    with open(log, "ab") as fh:
        return subprocess.Popen(cmd, stdout=fh, stderr=subprocess.STDOUT, start_new_session=True)


def _wait_for(condition, proc: subprocess.Popen, log: Path, timeout: float = 300.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert proc.poll() is None, f"the trainer exited with {proc.returncode}:\n{read_tail(log)}"
        assert time.monotonic() < deadline, f"timed out:\n{read_tail(log)}"
        time.sleep(0.2)


def test_kill_9_of_the_trainer_then_resume_proceeds(api, tiny_model_dir, tmp_path):
    save, port = tmp_path / "ck", free_port()
    (save / "logs").mkdir(parents=True)
    log = tmp_path / "trainer.log"
    cmd = _trainer_command(tiny_model_dir, api.url, save, port)
    pid_file = ServerPidFile(save / "logs" / f"inference_{port}.pid")
    post_groups(api.url, 2, seed=0)  # two steps' worth; the trainer then waits for more
    first = _start(cmd, log)
    try:
        _wait_for(lambda: (save / "step_2" / STATE_JSON).is_file(), first, log)
        record = pid_file.read()
        server, server_start = record["server_pid"], record["server_start"]
        assert process_start_time(server) == server_start
        os.killpg(first.pid, signal.SIGKILL)  # the trainer's group: the server runs in a session of its own
        first.wait(10)
        deadline = time.monotonic() + 60
        while process_start_time(server) == server_start and time.monotonic() < deadline:
            time.sleep(0.2)
        assert process_start_time(server) != server_start, "the inference server outlived its trainer"
    finally:
        stop_process(first, sig=signal.SIGKILL, process_group=True)

    post_groups(api.url, 2, seed=10)
    second = _start(cmd, log)
    try:
        assert second.wait(400) == 0, read_tail(log, 60)
    finally:
        stop_process(second, sig=signal.SIGKILL, process_group=True)
    text = log.read_text()
    assert "VllmStartError" not in text
    assert "(step 2)" in text  # resumed from the checkpoint of step 2
    assert (save / "final_model" / STATE_JSON).is_file()
    assert pid_file.read() is None  # the resumed trainer stopped its own server cleanly
