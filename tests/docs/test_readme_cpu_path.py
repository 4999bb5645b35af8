"""README's "CPU-only path" runs as written: its commands are read from README.md and executed in order.

Each command runs in bash from a temporary directory (``environments/`` linked in), with the README's ports
replaced by free ones. Commands ending in ``&`` start as processes of their own and are stopped by their pid at
the end (the README's closing ``kill`` line is for an interactive shell and is not run); ``NAME=$(...)`` lines
set ``NAME`` for the commands after them.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import pytest
import requests

REPO = Path(__file__).resolve().parents[2]
SECTION = "## CPU-only path"
README_PORTS = (9001, 8000, 7860)  # inference server, trajectory API, viewer


@dataclass
class Command:
    text: str
    background: bool


def section_commands(readme: str) -> list[Command]:
    """The commands of the first bash block of the CPU-only section, continuation lines joined and
    comments dropped."""
    start = readme.index(SECTION)
    end = readme.find("\n## ", start + 1)
    section = readme[start : end if end != -1 else len(readme)]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, "the CPU-only section has no ```bash block"
    commands: list[Command] = []
    pending = ""
    for line in block.group(1).splitlines():
        if not pending and line.lstrip().startswith("#"):
            continue
        line = re.sub(r"\s+#\s.*$", "", line)  # trailing comment
        if line.endswith("\\"):
            pending += line[:-1].rstrip() + " "
            continue
        text = (pending + line.strip()).strip()
        pending = ""
        if not text:
            continue
        background = text.endswith("&")
        commands.append(Command(text.rstrip("&").strip(), background))
    return commands


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_http(url: str, proc: subprocess.Popen, log: Path, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            pytest.fail(f"{url}: the process exited with {proc.returncode}:\n{log.read_text()[-3000:]}")
        try:
            if requests.get(url, timeout=5).status_code == 200:
                return
        except requests.RequestException:
            pass
        time.sleep(1)
    pytest.fail(f"{url} did not answer within {timeout} s:\n{log.read_text()[-3000:]}")


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.kill(proc.pid, signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(10)


def read_jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def test_section_parses_into_every_command():
    commands = section_commands((REPO / "README.md").read_text())
    assert commands[0].text.startswith("MODEL=$(python -m atroposlib.testing.tiny_model")
    used = " ".join(c.text for c in commands)
    for needed in (
        "atroposlib.testing.scripted_server",
        "arithmetic_server.py process",
        "run-api",
        "arithmetic_server.py serve",
        "view-run",
        "atropos-sft-gen",
    ):
        assert needed in used, needed
    assert [c.text.split()[0] for c in commands if c.background] == [
        "python",
        "run-api",
        "python",
        "view-run",
    ]


@pytest.mark.slow
def test_readme_cpu_path_runs_as_written(tmp_path):
    commands = section_commands((REPO / "README.md").read_text())
    ports = {old: free_port() for old in README_PORTS}
    (tmp_path / "environments").symlink_to(REPO / "environments")
    env = dict(os.environ)
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"  # console scripts
    env.update(WANDB_MODE="offline", TOKENIZERS_PARALLELISM="false")
    background: list[tuple[str, subprocess.Popen, Path]] = []
    outputs: dict[str, str] = {}
    try:
        for number, command in enumerate(commands):
            text = command.text
            for old, new in ports.items():
                text = re.sub(rf"\b{old}\b", str(new), text)
            text = re.sub(r"(^|\$\()python\b", rf"\g<1>{shlex.quote(sys.executable)}", text)
            if text.startswith("kill "):
                continue  # the processes are stopped below, by pid
            assignment = re.fullmatch(r"(\w+)=\$\((.*)\)", text)
            if command.background:
                log = tmp_path / f"background-{number}.log"
                with open(log, "wb") as out:
                    proc = subprocess.Popen(
                        ["bash", "-c", f"exec {text}"],
                        cwd=tmp_path,
                        env=env,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                background.append((text, proc, log))
                continue
            inner = assignment.group(2) if assignment else text
            result = subprocess.run(
                ["bash", "-c", inner],
                cwd=tmp_path,
                env=env,
                capture_output=True,
                text=True,
                timeout=300,
            )
            assert result.returncode == 0, f"{text}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
            outputs[text] = result.stdout + result.stderr
            if assignment:
                env[assignment.group(1)] = result.stdout.strip()

        model_dir = Path(env["MODEL"])
        assert (model_dir / "tokenizer.json").exists() and (model_dir / "config.json").exists()

        groups = read_jsonl(tmp_path / "runs/cpu/arithmetic.jsonl")
        assert len(groups) == 4
        for group in groups:
            assert set(group["scores"]) == {0.0, 1.0}  # half right, half wrong
            assert len(group["tokens"]) == len(group["masks"]) == len(group["scores"])
        assert (tmp_path / "runs/cpu/arithmetic.html").exists()

        records = read_jsonl(tmp_path / "runs/cpu/sft.jsonl")
        assert len(records) >= 8
        assert all(r["score"] > 0 for r in records)
        for record in records:
            question = re.search(r"What is (\d+)([+-])(\d+)\?", record["prefix"])
            a, op, b = int(question.group(1)), question.group(2), int(question.group(3))
            assert record["completion"].startswith(str(a + b if op == "+" else a - b))

        scripted, api, serve, viewer = background
        assert f"listening on http://127.0.0.1:{ports[9001]}/v1" in scripted[2].read_text()
        wait_for_http(f"http://127.0.0.1:{ports[7860]}/", viewer[1], viewer[2])
        envs = requests.get(f"http://127.0.0.1:{ports[8000]}/inspect/envs", timeout=10).json()
        assert "arithmetic" in json.dumps(envs)
        assert serve[1].poll() is None, serve[2].read_text()[-3000:]
    finally:
        for _, proc, _ in reversed(background):
            stop(proc)
    assert "stopped:" in serve[2].read_text()  # serve shut down cleanly on SIGTERM
