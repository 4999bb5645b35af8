"""Benchmarking a candidate optimizer against the baseline inside the sandbox, and its reward.

:class:`OptimizerRunner` sends the candidate and the task to :mod:`optimizer_harness` (run by
:class:`atroposlib.sandbox.Sandbox`) and reads its report, which counts only when it arrives under this
run's random nonce: the program's exit status or prints never do. A run stopped by a limit (wall-clock,
CPU, memory) or a crash has no report and did not run.
"""

from __future__ import annotations

import json
import math
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from atroposlib.sandbox import Sandbox, SandboxLimits

HARNESS_FILE = "optimizer_harness.py"
_HARNESS_SOURCE = Path(__file__).with_name(HARNESS_FILE).read_text(encoding="utf-8")


@dataclass(frozen=True)
class BenchmarkResult:
    """What the harness measured: whether the candidate ran to the end (``ran``), the held-out losses of
    the initial model, the baseline and the candidate, their accuracies (classification), and the error
    or the cheat that stopped it (one line)."""

    ran: bool
    initial_loss: Optional[float] = None
    baseline_loss: Optional[float] = None
    candidate_loss: Optional[float] = None
    baseline_accuracy: Optional[float] = None
    candidate_accuracy: Optional[float] = None
    error: Optional[str] = None
    cheat: Optional[str] = None

    @property
    def trained(self) -> bool:
        """Ran, and its held-out loss is finite and below the untrained model's."""
        c, i = self.candidate_loss, self.initial_loss
        return self.ran and c is not None and i is not None and math.isfinite(c) and c < i

    @property
    def progress(self) -> float:
        """The candidate's loss reduction as a share of the baseline's (1.0: as good as the baseline;
        0.0 unless :attr:`trained`)."""
        if not self.trained:
            return 0.0
        assert self.initial_loss is not None and self.candidate_loss is not None
        baseline_gain = self.initial_loss - (
            self.baseline_loss if self.baseline_loss is not None else math.inf
        )
        if not math.isfinite(baseline_gain) or baseline_gain <= 0:
            return math.inf  # the baseline did not train and the candidate did
        return (self.initial_loss - self.candidate_loss) / baseline_gain


def optimizer_reward(result: BenchmarkResult, compile_reward: float, progress_cap: float) -> float:
    """0 unless the candidate trained (see :attr:`BenchmarkResult.trained`); else ``compile_reward`` plus
    ``(1 - compile_reward) x`` its progress relative to the baseline, capped at ``progress_cap``: 1.0 when
    it matches the baseline, more when it beats it."""
    if not result.trained:
        return 0.0
    return compile_reward + (1.0 - compile_reward) * min(result.progress, progress_cap)


@dataclass(frozen=True)
class BenchmarkSettings:
    """The training run both optimizers get: epochs, minibatch size, data sizes, baseline (``adam`` or
    ``sgd``) and its learning rate."""

    epochs: int
    batch_size: int
    train_size: int
    test_size: int
    baseline: str
    baseline_lr: float


class OptimizerRunner:
    """Runs :mod:`optimizer_harness` in ``sandbox`` with ``limits`` and ``settings``."""

    def __init__(self, sandbox: Sandbox, limits: SandboxLimits, settings: BenchmarkSettings) -> None:
        self.sandbox = sandbox
        self.limits = limits
        self.settings = settings

    def job(self, code: str, class_name: str, architecture: str, seed: int, nonce: str) -> dict[str, Any]:
        """The harness's stdin for one benchmark."""
        s = self.settings
        return {
            "nonce": nonce,
            "code": code,
            "class_name": class_name,
            "architecture": architecture,
            "seed": seed,
            "epochs": s.epochs,
            "batch_size": s.batch_size,
            "train_size": s.train_size,
            "test_size": s.test_size,
            "baseline": s.baseline,
            "baseline_lr": s.baseline_lr,
        }

    async def benchmark(self, code: str, class_name: str, architecture: str, seed: int) -> BenchmarkResult:
        """Train the task's model with ``class_name`` of ``code`` and with the baseline; compare them."""
        nonce = secrets.token_hex(16)
        result = await self.sandbox.run(
            [self.sandbox.python, HARNESS_FILE],
            stdin=json.dumps(self.job(code, class_name, architecture, seed, nonce)),
            files={HARNESS_FILE: _HARNESS_SOURCE},
            limits=self.limits,
        )
        for line in result.stdout.splitlines():
            if line.startswith(nonce + " "):
                report = json.loads(line[len(nonce) + 1 :])
                return BenchmarkResult(**{k: report.get(k) for k in BenchmarkResult.__dataclass_fields__})
        tail = result.stderr.strip().splitlines()
        why = result.reason or "no report"
        return BenchmarkResult(False, error=f"{why}: {tail[-1][:300] if tail else 'no output'}")
