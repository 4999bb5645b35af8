"""Worker-count and backpressure arithmetic of the serve loop (pure functions, no I/O).

Units: ``batch_size`` is in sequences (the trainer's batch); ``queue_size`` and ``self_queue_size`` are in
groups of this env's ``group_size`` (as ``GET /status-env`` reports them); ``max_group_size`` is the largest
group (in sequences) waiting in the API's queue.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, Optional

from atroposlib.envs.groups import EvalHandlingEnum


def resolve_max_num_workers(max_num_workers: int, max_num_workers_per_node: int, num_servers: int) -> int:
    """``max_num_workers`` when set (not -1), else ``max_num_workers_per_node`` per inference server (>= 1)."""
    if max_num_workers != -1:
        return max_num_workers
    return max_num_workers_per_node * max(1, num_servers)


def derived_batch_size(
    batch_size: int, status: Optional[Mapping[str, Any]], min_batch_allocation: Optional[float]
) -> int:
    """The share of each trainer batch (sequences) this env can expect to fill.

    ``batch_size`` itself while it is unknown (-1) or no status was received yet; otherwise
    ``int(batch_size * (unallocated_fraction + (min_batch_allocation or 0)))``.
    """
    if not status or batch_size == -1:
        return batch_size
    unallocated = float(status.get("unallocated_fraction", 1.0))
    return int(batch_size * (unallocated + (min_batch_allocation or 0.0)))


def min_allocation_reserve(
    min_batch_allocation: float,
    batch_size: int,
    max_batches_offpolicy: int,
    max_group_size: int,
    group_size: int,
) -> int:
    """Groups of this env needed in the queue to cover its guaranteed share of ``max_batches_offpolicy`` batches."""
    mgs = max(1, max_group_size)
    return math.ceil(min_batch_allocation * batch_size * max_batches_offpolicy / mgs) * (
        mgs // max(1, group_size)
    )


def offpolicy_window(max_batches_offpolicy: int, max_staleness: Optional[int]) -> int:
    """Batches that may be queued or being generated at once: ``max_batches_offpolicy``, tightened to
    ``max_staleness + 1`` when a staleness bound is set (a rollout started now then lands at most
    ``max_staleness`` batches after the one the trainer takes next); <= 0: no limit."""
    if max_staleness is None:
        return max_batches_offpolicy
    bound = max_staleness + 1
    return bound if max_batches_offpolicy <= 0 else min(max_batches_offpolicy, bound)


def should_pause(
    *,
    queue_size: int,
    self_queue_size: int,
    max_group_size: int,
    group_size: int,
    batch_size: int,
    max_batches_offpolicy: int,
    min_batch_allocation: Optional[float],
    derived_batch_size: int,
) -> bool:
    """True when no new work should start: the trainer's batch size is unknown, or enough off-policy data is
    queued (``queue_size*group_size >= max_batches_offpolicy*batch_size``, the limit being active when
    ``max_batches_offpolicy > 0``) and this env's guaranteed allocation, if any, is already covered."""
    if derived_batch_size == -1:
        return True
    if max_batches_offpolicy <= 0:
        return False
    if queue_size * group_size < max_batches_offpolicy * batch_size:
        return False
    if min_batch_allocation is None:
        return True
    reserve = min_allocation_reserve(
        min_batch_allocation, batch_size, max_batches_offpolicy, max_group_size, group_size
    )
    return reserve - self_queue_size <= 0


def train_worker_cap(
    *,
    max_num_workers: int,
    eval_running: bool,
    eval_handling: EvalHandlingEnum,
    eval_limit_ratio: float,
    max_batches_offpolicy: int,
    derived_batch_size: int,
    group_size: int,
    queue_size: int,
    batch_size: int,
    min_batch_allocation: Optional[float],
    self_queue_size: int,
    max_group_size: int,
) -> int:
    """How many training workers may run now (may be <= 0).

    * During an eval: ``STOP_TRAIN`` gives 0, ``LIMIT_TRAIN`` ``int(max_num_workers*eval_limit_ratio)``.
    * Off-policy room: at most ``max_batches_offpolicy*derived_batch_size//group_size - queue_size`` (only when
      ``max_batches_offpolicy > 0``).
    * With ``min_batch_allocation`` the cap is raised to what refills this env's guaranteed share.
    """
    if eval_running and eval_handling == EvalHandlingEnum.STOP_TRAIN:
        return 0
    cap = max_num_workers
    if eval_running and eval_handling == EvalHandlingEnum.LIMIT_TRAIN:
        cap = int(max_num_workers * eval_limit_ratio)
    if max_batches_offpolicy > 0:
        cap = min(cap, max_batches_offpolicy * derived_batch_size // max(1, group_size) - queue_size)
    if min_batch_allocation is not None and batch_size > 0:
        mgs = max(1, max_group_size)
        gs = max(1, group_size)
        needed_seqs = (
            math.ceil(min_batch_allocation * batch_size * max_batches_offpolicy / mgs) + mgs // gs
        ) * mgs - (mgs * self_queue_size // (mgs / gs))
        cap = max(cap, max(0, math.ceil(needed_seqs / gs)))
    return int(cap)


def should_stop(
    *, current_step: int, queue_size: int, group_size: int, batch_size: int, total_steps: int
) -> bool:
    """True once the trainer step plus the batches already queued exceed ``total_steps`` (< 0: never)."""
    if total_steps < 0:
        return False
    pending = queue_size * group_size // batch_size if batch_size > 0 else 0
    return current_step + pending > total_steps


def boundary_crossed(previous_step: int, current_step: int, interval: int) -> Optional[int]:
    """The last multiple of ``interval`` in ``(previous_step, current_step]``, or ``None``.

    Unlike a comparison of remainders this never misses a boundary when the step jumps by more than
    ``interval``. ``interval <= 0`` disables (``None``); a step going backwards crosses nothing.
    """
    if interval <= 0 or current_step <= previous_step:
        return None
    last = (current_step // interval) * interval
    return last if last > previous_step else None


def backoff_delay(failures: int, *, base: float = 0.5, cap: float = 30.0) -> float:
    """Exponential backoff in seconds for the ``failures``-th consecutive failure (1-based), capped."""
    return min(cap, base * (2 ** max(0, failures - 1)))


__all__ = [
    "backoff_delay",
    "boundary_crossed",
    "derived_batch_size",
    "min_allocation_reserve",
    "offpolicy_window",
    "resolve_max_num_workers",
    "should_pause",
    "should_stop",
    "train_worker_cap",
]
