"""Running the bash blocks of the docs as written.

:func:`block_commands` reads a ```bash block into commands (continuation lines joined, comments dropped);
:class:`BlockRun` runs them in order in a temporary directory: each in bash with the docs' ports replaced
by free ones and ``python`` by this interpreter, commands ending in ``&`` as processes of their own
(stopped by their pid when the run ends; the block's own ``kill`` lines are for an interactive shell and
are skipped), and ``NAME=$(...)`` lines setting ``NAME`` for the commands after them.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path

from atroposlib.utils.processes import stop_process

REPO = Path(__file__).resolve().parents[2]


@dataclass
class Command:
    text: str
    background: bool


def block_commands(markdown: str, heading: str) -> list[Command]:
    """The commands of the first ```bash block after ``heading`` (and before the next heading of its level)."""
    start = markdown.index(heading)
    level = heading.split(" ")[0]
    end = markdown.find(f"\n{level} ", start + 1)
    section = markdown[start : end if end != -1 else len(markdown)]
    block = re.search(r"```bash\n(.*?)```", section, re.S)
    assert block, f"{heading!r} has no ```bash block"
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
        if text:
            commands.append(Command(text.rstrip("&").strip(), text.endswith("&")))
    return commands


@dataclass
class Background:
    text: str
    proc: subprocess.Popen
    log: Path

    def output(self) -> str:
        return self.log.read_text(errors="replace")


@dataclass
class BlockRun:
    """Runs commands in ``cwd``; ``ports`` maps the docs' port numbers to the ones used instead."""

    cwd: Path
    ports: dict[int, int]
    env: dict[str, str] = field(default_factory=lambda: dict(os.environ))
    background: list[Background] = field(default_factory=list)
    outputs: dict[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        # Console scripts of this interpreter's environment first; no W&B account needed.
        self.env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{self.env.get('PATH', '')}"
        self.env.update(WANDB_MODE="offline", TOKENIZERS_PARALLELISM="false")

    def rewrite(self, text: str) -> str:
        for old, new in self.ports.items():
            text = re.sub(rf"\b{old}\b", str(new), text)
        return re.sub(r"(^|\$\()python\b", rf"\g<1>{shlex.quote(sys.executable)}", text)

    def run(self, commands: list[Command], timeout: float = 300) -> None:
        for number, command in enumerate(commands):
            text = self.rewrite(command.text)
            if text.startswith("kill "):
                continue
            if command.background:
                log = self.cwd / f"background-{number}.log"
                with open(log, "wb") as out:
                    proc = subprocess.Popen(
                        ["bash", "-c", f"exec {text}"],
                        cwd=self.cwd,
                        env=self.env,
                        stdout=out,
                        stderr=subprocess.STDOUT,
                        start_new_session=True,
                    )
                self.background.append(Background(text, proc, log))
                continue
            assignment = re.fullmatch(r"(\w+)=\$\((.*)\)", text)
            result = subprocess.run(
                ["bash", "-c", assignment.group(2) if assignment else text],
                cwd=self.cwd,
                env=self.env,
                capture_output=True,
                text=True,
                timeout=timeout,
            )
            assert result.returncode == 0, f"{text}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
            self.outputs[command.text] = result.stdout + result.stderr
            if assignment:
                self.env[assignment.group(1)] = result.stdout.strip()

    def stop(self) -> None:
        """Stop the background processes, newest first: SIGTERM to each pid, SIGKILL if it lingers."""
        for item in reversed(self.background):
            stop_process(item.proc, 30)
