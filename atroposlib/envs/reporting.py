"""Metrics an environment collects between wandb logs, its evaluation report, and its checkpointed position.

:class:`EvalReporting` is a :class:`~atroposlib.envs.base.BaseEnv` layer placed before ``BaseEnv`` (or an
environment family built on it) in an environment's bases. It holds ``percent_correct_buffer`` (one 0/1 or fractional value per training reply, logged as
``train/percent_correct``) and ``eval_metrics`` (the last evaluation's ``(key, value)`` pairs, logged once
with the next ``wandb_log``); :meth:`EvalReporting.report_evaluation` prints an evaluation's summary line,
queues its metrics and writes them with ``evaluate_log``.

:class:`IterCheckpoint` (also before ``BaseEnv``) keeps the environment's ``iter`` (its position in the
training items, advanced by :meth:`IterCheckpoint.next_in_turn`) and writes it into every checkpoint, so
``load_checkpoint`` resumes there.

"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Optional, TypeVar

from atroposlib.envs.base import BaseEnv

T = TypeVar("T")


def summary_line(name: str, count: int, unit: str, metrics: Mapping[str, float]) -> str:
    """``"{name} evaluation on {count} {unit}: key=value ..."`` with each key's ``eval/`` prefix dropped
    and values to four decimals."""
    values = " ".join(f"{key.removeprefix('eval/')}={value:.4f}" for key, value in metrics.items())
    return f"{name} evaluation on {count} {unit}: {values}"


def mean(values: Sequence[float]) -> float:
    """The arithmetic mean of a non-empty sequence."""
    return sum(values) / len(values)


class IterCheckpoint(BaseEnv):
    """Checkpoints carry ``self.iter`` (see the module docstring), which starts at 0."""

    iter: int

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.iter = 0

    def next_in_turn(self, items: Sequence[T]) -> T:
        """``items[iter % len(items)]``, then ``iter`` advances: the items in order, starting over after the
        last."""
        item = items[self.iter % len(items)]
        self.iter += 1
        return item

    def save_checkpoint(self, step: int, data: Optional[dict[str, Any]] = None) -> None:
        """``data`` (default empty) plus ``{"iter": self.iter}``, saved by the environment's checkpointing."""
        data = dict(data or {})
        data["iter"] = self.iter
        super().save_checkpoint(step, data)


class EvalReporting(BaseEnv):
    """Training and evaluation metrics kept until the next ``wandb_log`` (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.percent_correct_buffer: list[float] = []
        self.eval_metrics: list[tuple[str, float]] = []

    if TYPE_CHECKING:

        def eval_items(self) -> Sequence[Any]:
            """The evaluation items (defined by the environment family or the environment)."""

    def limited_eval_items(self) -> list[Any]:
        """``self.eval_items()``, cut to ``config.eval_limit`` items when that is set."""
        items = list(self.eval_items())
        limit = getattr(self.config, "eval_limit", None)
        return items if limit is None else items[:limit]

    async def run_evaluation(
        self, answer: Callable[[Any, asyncio.Semaphore], Awaitable[T]], items: Iterable[Any]
    ) -> tuple[list[T], float, float]:
        """``answer(item, sem)`` for every item concurrently, at most ``config.max_eval_workers`` (at least
        one) at a time through ``sem``: ``(results in item order, start time, end time)`` (``time.time()``)."""
        start = time.time()
        sem = asyncio.Semaphore(max(1, self.config.max_eval_workers))
        results = await asyncio.gather(*(answer(item, sem) for item in items))
        return list(results), start, time.time()

    async def report_evaluation(
        self,
        metrics: dict[str, float],
        samples: Sequence[dict[str, Any]],
        start_time: float,
        end_time: float,
        generation_parameters: dict[str, Any],
        summary: Optional[str] = None,
    ) -> None:
        """Print ``summary`` (when given), queue ``metrics`` for the next ``wandb_log`` and write them and
        ``samples`` with ``evaluate_log``."""
        if summary is not None:
            print(summary, flush=True)
        self.eval_metrics.extend(metrics.items())
        await self.evaluate_log(
            metrics=metrics,
            samples=list(samples),
            start_time=start_time,
            end_time=end_time,
            generation_parameters=generation_parameters,
        )

    async def wandb_log(self, wandb_metrics: Optional[dict] = None) -> None:
        """Add ``train/percent_correct`` (mean of the buffer, when it holds values) and the queued evaluation
        metrics to ``wandb_metrics``, empty both, and log."""
        wandb_metrics = dict(wandb_metrics or {})
        if self.percent_correct_buffer:
            wandb_metrics["train/percent_correct"] = mean(self.percent_correct_buffer)
        self.percent_correct_buffer = []
        wandb_metrics.update(self.eval_metrics)
        self.eval_metrics = []
        await super().wandb_log(wandb_metrics)
