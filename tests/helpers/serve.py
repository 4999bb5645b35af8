"""Helpers for the serve tests: a minimal trainer client and env subprocesses (each stopped by its own pid)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import requests

REPO = Path(__file__).resolve().parents[2]
SAMPLE_ENV = REPO / "tests" / "helpers" / "sample_envs.py"


def wait_for(
    predicate: Callable[[], Any], timeout: float = 60.0, interval: float = 0.1, what: str = "condition"
):
    """Poll ``predicate`` until it returns something truthy (returned) or fail after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out waiting for {what}")


class Trainer:
    """The trainer side of the protocol: register, then pull batches (optionally in a background thread)."""

    def __init__(self, api, batch_size: int = 4, max_token_len: int = 512, num_steps: int = 1000):
        self.api = api
        self.batches: list[list[dict]] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        r = requests.post(
            f"{api.url}/register",
            json={
                "wandb_group": "g",
                "wandb_project": "p",
                "batch_size": batch_size,
                "max_token_len": max_token_len,
                "checkpoint_dir": "",
                "save_checkpoint_interval": -1,
                "starting_step": 0,
                "num_steps": num_steps,
            },
            headers=api.headers(),
            timeout=10,
        )
        r.raise_for_status()

    def pull(self) -> list[dict] | None:
        r = requests.get(f"{self.api.url}/batch", headers=self.api.headers(), timeout=10)
        r.raise_for_status()
        batch = r.json().get("batch")
        if batch:
            self.batches.append(batch)
        return batch

    def start(self, interval: float = 0.05) -> Trainer:
        def loop():
            while not self._stop.is_set():
                try:
                    if not self.pull():
                        time.sleep(interval)
                except requests.RequestException:
                    time.sleep(0.2)

        self._thread = threading.Thread(target=loop, daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10)

    @property
    def groups(self) -> list[dict]:
        return [g for batch in list(self.batches) for g in batch]

    def items(self) -> list[int]:
        """Item numbers of the received groups (from the prompt 'What is N+1?')."""
        return sorted(
            int(g["messages"][0][0]["content"].split("What is ")[1].split("+")[0]) for g in self.groups
        )

    def envs(self) -> list[dict]:
        return requests.get(f"{self.api.url}/inspect/envs", headers=self.api.headers(), timeout=10).json()[
            "envs"
        ]


class EnvProcess:
    """``sample_envs.py direct-serve`` in a subprocess with its log in ``log_path``."""

    def __init__(
        self, tmp_path: Path, config: dict[str, Any], servers: list[dict[str, Any]], name: str = "env"
    ):
        self.log_path = tmp_path / f"{name}.log"
        self._log = open(self.log_path, "wb")  # noqa: SIM115 - closed in wait()
        env = dict(os.environ, PYTHONUNBUFFERED="1")
        self.proc = subprocess.Popen(
            [sys.executable, str(SAMPLE_ENV), "direct-serve", json.dumps(config), json.dumps(servers)],
            stdout=self._log,
            stderr=subprocess.STDOUT,
            cwd=tmp_path,
            env=env,
            start_new_session=True,
        )

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_log(self, text: str, timeout: float = 60.0) -> None:
        wait_for(lambda: text in self.log() or self.proc.poll() is not None, timeout, what=repr(text))
        assert text in self.log(), f"{text!r} not in env log:\n{self.log()[-4000:]}"

    def signal(self, sig: int) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, sig)

    def wait(self, timeout: float = 60.0) -> int:
        try:
            return self.proc.wait(timeout)
        finally:
            self._log.close()

    def kill(self) -> None:
        if self.proc.poll() is None:
            os.kill(self.proc.pid, signal.SIGKILL)
            self.proc.wait(10)
        self._log.close()


def env_config(api, tiny_model_dir, tmp_path: Path, **overrides) -> dict[str, Any]:
    config = {
        "tokenizer_name": str(tiny_model_dir),
        "rollout_server_url": api.url,
        "use_wandb": False,
        "group_size": 2,
        "max_num_workers": 4,
        "total_steps": 1000,
        "unsent_groups_path": str(tmp_path / "unsent.jsonl"),
        "shutdown_timeout": 5.0,
    }
    config.update(overrides)
    return config


def scripted_servers(server) -> list[dict[str, Any]]:
    return [{"model_name": "scripted", "base_url": server.base_url, "api_key": "x", "health_check": False}]
