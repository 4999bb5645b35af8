"""Helpers for the tool tests: groups built like an environment's ``process`` output, API setup."""

from __future__ import annotations

import base64
import io
import json
from pathlib import Path
from typing import Any

import requests

FIXTURES = Path(__file__).resolve().parents[1] / "cli" / "fixtures"
GROUP_KEYS = (
    "tokens", "masks", "scores", "advantages", "ref_logprobs", "messages", "generation_params",
    "inference_logprobs", "overrides", "group_overrides", "images", "env_id", "distill_token_ids",
    "distill_logprobs",
)  # fmt: skip


def conversations() -> list[dict[str, Any]]:
    """The human-readable source of the test groups (prompt, completions, scores, env)."""
    return json.loads((FIXTURES / "conversations.json").read_text())


def _ids(encoded: Any) -> list[int]:
    # transformers 5 returns a BatchEncoding from apply_chat_template(tokenize=True), 4.x a list
    if hasattr(encoded, "keys") and "input_ids" in encoded:
        encoded = encoded["input_ids"]
    return list(encoded)


def make_group(
    tokenizer: Any,
    prompt: list[dict[str, Any]],
    completions: list[str],
    scores: list[float],
    *,
    env_id: int | None = None,
    images: Any = None,
) -> dict[str, Any]:
    """A scored group as ``process`` writes it: ChatML prompt untrained (-100), completions trained."""
    prompt_ids = _ids(tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True))
    group: dict[str, Any] = {k: None for k in GROUP_KEYS}
    group.update(tokens=[], masks=[], scores=list(scores), messages=[], env_id=env_id, images=images)
    for text in completions:
        completion_ids = tokenizer.encode(text + "<|im_end|>", add_special_tokens=False)
        group["tokens"].append(prompt_ids + completion_ids)
        group["masks"].append([-100] * len(prompt_ids) + completion_ids)
        group["messages"].append(prompt + [{"role": "assistant", "content": text}])
    return group


def fixture_groups(tokenizer: Any, env_ids: dict[str, int] | None = None) -> list[tuple[str, dict[str, Any]]]:
    """``[(env_name, group), ...]`` for every conversation of the fixture."""
    out = []
    for conv in conversations():
        env_id = (env_ids or {}).get(conv["env"])
        out.append(
            (
                conv["env"],
                make_group(tokenizer, conv["prompt"], conv["completions"], conv["scores"], env_id=env_id),
            )
        )
    return out


def write_jsonl(path: Path, groups: list[dict[str, Any]]) -> Path:
    """Write groups one per line, as ``process`` does (env_id dropped)."""
    with path.open("w") as fh:
        for g in groups:
            fh.write(json.dumps({k: v for k, v in g.items() if k != "env_id"}) + "\n")
    return path


def png_data(color: tuple[int, int, int] = (200, 30, 30), size: tuple[int, int] = (24, 16)) -> bytes:
    """A small solid-colour PNG."""
    from PIL import Image

    buf = io.BytesIO()
    Image.new("RGB", size, color).save(buf, format="PNG")
    return buf.getvalue()


def png_data_uri(**kwargs: Any) -> str:
    return "data:image/png;base64," + base64.b64encode(png_data(**kwargs)).decode()


class LiveRun:
    """Drives a real run-api like a trainer and envs would, and snapshots its state."""

    def __init__(self, api: Any) -> None:
        self.api = api
        self.url = api.url
        self.headers = api.headers()

    def get(self, path: str, **kw: Any) -> Any:
        r = requests.get(self.url + path, headers=self.headers, timeout=10, **kw)
        r.raise_for_status()
        return r.json()

    def post(self, path: str, body: Any) -> Any:
        r = requests.post(self.url + path, json=body, headers=self.headers, timeout=10)
        r.raise_for_status()
        return r.json()

    def register_trainer(
        self, batch_size: int = 64, wandb_group: str = "grp", wandb_project: str = "proj"
    ) -> None:
        self.post(
            "/register",
            {
                "wandb_group": wandb_group, "wandb_project": wandb_project, "batch_size": batch_size,
                "max_token_len": 2048, "checkpoint_dir": "ck", "save_checkpoint_interval": 10,
                "starting_step": 0, "num_steps": 100,
            },
        )  # fmt: skip
        self.get("/batch")  # the trainer's first poll starts the run (envs may register after it)

    def register_env(self, name: str, group_size: int) -> int:
        body = {"max_token_length": 2048, "desired_name": name, "weight": 1.0, "group_size": group_size}
        return self.post("/register-env", body)["env_id"]

    def snapshot(self) -> dict[str, Any]:
        """Everything a tool must leave unchanged: queue/step, registration, envs, wandb info."""
        return {
            "status": self.get("/status"),
            "info": self.get("/info"),
            "wandb": self.get("/wandb_info"),
            "envs": self.get("/inspect/envs"),
            "recent_seqs": [g["seq"] for g in self.get("/inspect/recent", params={"limit": 1000})["groups"]],
        }


def run_tool(
    module: str,
    *args: Any,
    timeout: float = 120,
    env: dict[str, str] | None = None,
    subprocess_: bool = False,
) -> Any:
    """Run the tool ``atroposlib.cli.<module>`` with ``args``; asserts it never prints a traceback.

    By default its ``main()`` runs in this process (the same code path as the console script, without
    re-importing transformers for every call); ``subprocess_=True`` runs ``python -m`` instead.
    Returns an object with ``returncode``, ``stdout`` and ``stderr``.
    """
    import contextlib
    import importlib
    import io
    import os
    import subprocess
    import sys
    import types

    argv = [str(a) for a in args]
    if subprocess_:
        full_env = dict(os.environ)
        full_env.pop("ATROPOS_API_KEY", None)
        full_env.update(env or {})
        proc = subprocess.run(
            [sys.executable, "-m", f"atroposlib.cli.{module}", *argv],
            capture_output=True, text=True, timeout=timeout, env=full_env,
        )  # fmt: skip
    else:
        main = importlib.import_module(f"atroposlib.cli.{module}").main
        saved = dict(os.environ)
        os.environ.pop("ATROPOS_API_KEY", None)
        os.environ.update(env or {})
        out, err = io.StringIO(), io.StringIO()
        try:
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
                try:
                    code = main(argv)
                except SystemExit as exc:  # argparse errors
                    code = exc.code if isinstance(exc.code, int) else 1
        finally:
            os.environ.clear()
            os.environ.update(saved)
        proc = types.SimpleNamespace(returncode=code, stdout=out.getvalue(), stderr=err.getvalue())
    assert "Traceback" not in proc.stderr, proc.stderr
    return proc


def read_wandb_records(path: Path) -> list[Any]:
    """Decode a W&B ``.wandb`` transaction log (LevelDB-style log records of protobuf ``Record``s)."""
    import struct

    from wandb.proto import wandb_internal_pb2 as pb

    data = Path(path).read_bytes()
    assert data[:4] == b":W&B", "not a W&B transaction log"
    block, pos, chunks, buf = 32768, 7, [], b""
    while pos + 7 <= len(data):
        left = block - pos % block
        if left < 7:
            pos += left
            continue
        _crc, length, kind = struct.unpack("<IHB", data[pos : pos + 7])
        if length == 0 and kind == 0:
            pos += left
            continue
        chunk, pos = data[pos + 7 : pos + 7 + length], pos + 7 + length
        if kind == 1:
            chunks.append(chunk)
        elif kind == 2:
            buf = chunk
        elif kind == 3:
            buf += chunk
        elif kind == 4:
            chunks.append(buf + chunk)
    records = []
    for raw in chunks:
        record = pb.Record()
        record.ParseFromString(raw)
        records.append(record)
    return records


def free_port_url() -> str:
    """A loopback URL where nothing listens."""
    from atroposlib.testing.api_process import free_port

    return f"http://127.0.0.1:{free_port()}"


BROWSER_ARGS = [
    "--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
    "--no-first-run", "--disable-component-update", "--disable-sync", "--disable-quic",
]  # fmt: skip
CHROMIUM = "/usr/bin/chromium"


class ToolProcess:
    """A tool started as a subprocess (its own session), stopped by its pid."""

    def __init__(
        self, module: str, args: list[Any], log_path: Path, env: dict[str, str] | None = None
    ) -> None:
        import os
        import subprocess
        import sys

        full_env = dict(os.environ)
        full_env.pop("ATROPOS_API_KEY", None)
        full_env.update(env or {})
        self.log_path = log_path
        log = open(log_path, "ab")  # noqa: SIM115 - owned by the process
        self.proc = subprocess.Popen(
            [sys.executable, "-m", f"atroposlib.cli.{module}", *map(str, args)],
            stdout=log,
            stderr=subprocess.STDOUT,
            env=full_env,
            start_new_session=True,
        )
        log.close()

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_http(self, url: str, timeout: float = 90) -> None:
        from atroposlib.utils.processes import wait_until_ok

        wait_until_ok(
            self.proc, url, name=self.proc.args[2], timeout=timeout, interval=0.2, log_tail=self.log
        )

    def wait_output(self, needle: str, timeout: float = 60) -> str:
        import time

        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            text = self.log()
            if needle in text:
                return text
            if self.proc.poll() is not None:
                break
            time.sleep(0.1)
        raise AssertionError(f"{needle!r} not in output:\n{self.log()}")

    def stop(self, sig: int | None = None, timeout: float = 30) -> int:
        import signal

        from atroposlib.utils.processes import stop_process

        return stop_process(self.proc, timeout, sig=sig or signal.SIGTERM)


def assert_png(path: Path) -> tuple[int, int]:
    """Assert ``path`` is a valid, non-empty PNG; returns its size."""
    from PIL import Image

    data = Path(path).read_bytes()
    assert data[:8] == b"\x89PNG\r\n\x1a\n" and len(data) > 1000
    with Image.open(path) as img:
        img.verify()
    with Image.open(path) as img:
        assert img.width > 100 and img.height > 100
        return img.size
