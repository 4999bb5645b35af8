"""Scoring a candidate ``ModelNew`` against a KernelBench reference inside the sandbox.

:class:`KernelRunner` sends the reference and the candidate to :mod:`kernel_harness` (run by
:class:`atroposlib.sandbox.Sandbox`) and reads its report, which counts only when it arrives under this
run's random nonce: the program's exit status or prints never do. A run stopped by a limit (wall-clock,
CPU, memory), a crash or a build that never finishes has no report and is "not compiled".
"""

from __future__ import annotations

import json
import secrets
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from atroposlib.sandbox import Sandbox, SandboxLimits

HARNESS_FILE = "kernel_harness.py"
_HARNESS_SOURCE = Path(__file__).with_name(HARNESS_FILE).read_text(encoding="utf-8")


@dataclass(frozen=True)
class KernelResult:
    """What the harness found: built (``compiled``), matched the reference (``correct``), the median
    reference and candidate times in ms (CUDA only, else None), and the first error (one line)."""

    compiled: bool
    correct: bool
    ref_ms: Optional[float] = None
    new_ms: Optional[float] = None
    error: Optional[str] = None

    @property
    def speedup(self) -> Optional[float]:
        """Reference time over candidate time, when both were measured."""
        if self.correct and self.ref_ms and self.new_ms:
            return self.ref_ms / self.new_ms
        return None


@dataclass(frozen=True)
class RunnerSettings:
    """How the harness compares: device, trials, tolerances, seed."""

    device: str = "cuda"
    correct_trials: int = 5
    perf_trials: int = 100
    measure_performance: bool = True
    atol: float = 1e-2
    rtol: float = 1e-2
    seed: int = 42


_CUDA_PROBE = "import torch\nprint('cuda' if torch.cuda.is_available() else 'none')\n"


class KernelRunner:
    """Runs :mod:`kernel_harness` in ``sandbox`` with ``limits`` and ``settings``."""

    def __init__(self, sandbox: Sandbox, limits: SandboxLimits, settings: RunnerSettings) -> None:
        self.sandbox = sandbox
        self.limits = limits
        self.settings = settings

    async def device_reachable(self) -> bool:
        """Whether a program in the sandbox sees the configured device (always true for ``cpu``)."""
        if not self.settings.device.startswith("cuda"):
            return True
        result = await self.sandbox.run_python(_CUDA_PROBE, limits=self.limits)
        return result.stdout.strip() == "cuda"

    def job(self, reference: str, candidate: str, nonce: str) -> dict[str, Any]:
        """The harness's stdin for one comparison."""
        s = self.settings
        return {
            "nonce": nonce,
            "reference": reference,
            "candidate": candidate,
            "device": s.device,
            "correct_trials": s.correct_trials,
            "perf_trials": s.perf_trials,
            "measure_performance": s.measure_performance,
            "atol": s.atol,
            "rtol": s.rtol,
            "seed": s.seed,
        }

    async def evaluate(self, reference: str, candidate: str) -> KernelResult:
        """Build and check ``candidate`` (source defining ``ModelNew``) against ``reference``."""
        nonce = secrets.token_hex(16)
        result = await self.sandbox.run(
            [self.sandbox.python, HARNESS_FILE],
            stdin=json.dumps(self.job(reference, candidate, nonce)),
            files={HARNESS_FILE: _HARNESS_SOURCE},
            limits=self.limits,
        )
        for line in result.stdout.splitlines():
            if line.startswith(nonce + " "):
                report = json.loads(line[len(nonce) + 1 :])
                return KernelResult(
                    compiled=bool(report["compiled"]),
                    correct=bool(report["correct"]),
                    ref_ms=report.get("ref_ms"),
                    new_ms=report.get("new_ms"),
                    error=report.get("error"),
                )
        tail = result.stderr.strip().splitlines()
        why = result.reason or "no report"
        return KernelResult(False, False, error=f"{why}: {tail[-1][:300] if tail else 'no output'}")
