"""What the demo shows and keeps: phase timings, the trainer's metrics and the environment's rollout stats
read as they are appended, the progress and summary lines, and checkpoint pruning."""

from __future__ import annotations

import json
import shutil
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class Timings:
    """Seconds per phase, in the order they ran."""

    phases: dict[str, float] = field(default_factory=dict)

    @contextmanager
    def phase(self, name: str) -> Iterator[None]:
        start = time.perf_counter()
        try:
            yield
        finally:
            self.phases[name] = self.phases.get(name, 0.0) + time.perf_counter() - start


def format_final_line(before: float, after: float, steps: int, seconds: float) -> str:
    """``held-out accuracy: 0.31 -> 0.58 (40 steps, 412 s)``."""
    return f"held-out accuracy: {before:.2f} -> {after:.2f} ({steps} steps, {seconds:.0f} s)"


def append_accuracy(metrics_path: Path, points: Sequence[tuple[int, float]]) -> None:
    """Add held-out accuracy records (``eval/accuracy`` at a step) to the trainer's ``metrics.jsonl``."""
    with open(metrics_path, "a") as fh:
        for step, accuracy in points:
            fh.write(json.dumps({"step": step, "eval/accuracy": accuracy}) + "\n")


def read_complete_lines(path: Path, offset: int) -> tuple[int, list[str]]:
    """The complete lines appended to ``path`` since byte ``offset`` (a partly written last line waits for
    the next call) and the new offset; none when the file cannot be read (yet)."""
    try:
        with open(path, "rb") as fh:
            fh.seek(offset)
            data = fh.read()
    except OSError:
        return offset, []
    end = data.rfind(b"\n") + 1
    return offset + end, data[:end].decode("utf-8", "replace").splitlines()


def read_new_records(path: Path, offset: int) -> tuple[int, list[dict[str, Any]]]:
    """JSON lines appended to ``path`` since byte ``offset`` (complete lines only); new offset."""
    offset, lines = read_complete_lines(path, offset)
    records = []
    for line in lines:
        try:
            records.append(json.loads(line))
        except ValueError:
            continue
    return offset, records


def read_rollout_stats(path: Path, offset: int) -> tuple[int, list[dict[str, Any]]]:
    """The environment's ``rollout stats {json}`` log lines appended to ``path`` since byte ``offset``
    (complete lines only), as dicts; new offset."""
    from atroposlib.envs.serve.wandb_logging import ROLLOUT_STATS_PREFIX

    offset, lines = read_complete_lines(path, offset)
    stats = []
    for line in lines:
        _, sep, payload = line.partition(ROLLOUT_STATS_PREFIX)
        if not sep:
            continue
        try:
            record = json.loads(payload)
        except ValueError:
            continue
        if isinstance(record, dict) and "train/rollout_reward_mean" in record:
            stats.append(record)
    return offset, stats


def reward_line(rollout_stats: Sequence[dict[str, Any]], kept_rewards: Sequence[float]) -> str:
    """The GRPO progress description: the reward of the latest rollouts (all of them) and of the latest
    trained batch (kept groups only), with the groups dropped for equal scores."""
    parts = []
    if rollout_stats:
        last = rollout_stats[-1]
        parts.append(
            f"reward {last['train/rollout_reward_mean']:.2f} over all rollouts, "
            f"{int(last.get('train/groups_dropped_equal_scores', 0))}/{int(last.get('train/groups_scored', 0))} "
            "groups dropped (all scores equal)"
        )
    if kept_rewards:
        parts.append(f"trained batch {kept_rewards[-1]:.2f}")
    return f"GRPO ({'; '.join(parts)})" if parts else "GRPO"


def rollout_summary(rollout_stats: Sequence[dict[str, Any]], kept_rewards: Sequence[float]) -> str:
    """One line on the run's rewards: the first and last rollout reward over all rollouts generated, the
    groups dropped because all their scores were equal, and the kept groups' first and last reward."""
    first, last = rollout_stats[0], rollout_stats[-1]
    dropped = sum(int(r.get("train/groups_dropped_equal_scores", 0)) for r in rollout_stats)
    scored = sum(int(r.get("train/groups_scored", 0)) for r in rollout_stats)
    line = (
        f"training reward over all rollouts: {first['train/rollout_reward_mean']:.3f} -> "
        f"{last['train/rollout_reward_mean']:.3f}; {dropped} of {scored} groups dropped (all scores equal)"
    )
    if kept_rewards:
        line += f"; kept groups' reward: {kept_rewards[0]:.3f} -> {kept_rewards[-1]:.3f}"
    return line


def prune_checkpoints(ckpt_dir: Path, keep_after: int | None) -> None:
    """Delete ``step_N`` checkpoints with ``N <= keep_after`` (all of them when None)."""
    for path in ckpt_dir.glob("step_*"):
        suffix = path.name.removeprefix("step_")
        if suffix.isdigit() and (keep_after is None or int(suffix) <= keep_after):
            shutil.rmtree(path, ignore_errors=True)
