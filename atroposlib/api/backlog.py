"""``GET /status-env``: the backlog and inference weight one environment sees (pure functions)."""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from typing import Any

from atroposlib.api.records import MIN_ENV_WEIGHT, EnvRecord


def env_status(
    env_id: int,
    envs: Sequence[EnvRecord],
    queue: Iterable[tuple[int | None, int]],
    batch_size: int,
    step: int,
) -> tuple[dict[str, Any], int]:
    """The ``/status-env`` answer for ``envs[env_id]`` and the env's group size afterwards.

    ``queue`` yields ``(env_id, sequences)`` of each queued group. The env's group size grows to
    the largest group it has queued (the caller stores it). A total weight of zero (no connected
    env with a positive weight) gives the minimum weight instead of a division by zero.

    - ``queue_size``: the env's own queued sequences plus what other envs' queued data can
      contribute to batches once their minimum allocations are reserved, in groups of this env's size;
    - ``self_queue_size``: the env's own queued sequences in groups of its size;
    - ``unallocated_fraction``: the share of a batch not reserved by minimum allocations;
    - ``max_group_size``: the largest queued group (at least 1);
    - ``env_weight``: the env's share of ``max_context_len * weight`` over connected envs.
    """
    env = envs[env_id]
    connected = [e for e in envs if e.connected]
    total = sum(e.max_context_len * max(0.0, e.weight) for e in connected)
    share = env.max_context_len * env.weight / total if total > 0 else 0.0
    min_total = sum(e.min_batch_allocation for e in connected if e.min_batch_allocation is not None)
    max_group = 1
    own_sequences = 0
    group_size = env.group_size
    others: dict[int | None, int] = {}
    for owner, size in queue:
        max_group = max(max_group, size)
        if owner == env_id:
            group_size = max(group_size, size)
            own_sequences += size
        else:
            others[owner] = others.get(owner, 0) + size
    reserved = {
        e.registered_id: int(batch_size * e.min_batch_allocation)
        for e in connected
        if e.min_batch_allocation is not None
    }
    available = 0
    if max_group > 1:
        for other_env, sequences in others.items():
            packed = math.ceil(sequences / max_group) * max_group
            available += max(0, packed - reserved.get(other_env, 0))
    status = {
        "current_step": step,
        "queue_size": (own_sequences + available) // group_size,
        "unallocated_fraction": 1.0 - min(min_total, 1.0),
        "self_queue_size": own_sequences // group_size,
        "max_group_size": max_group,
        "env_weight": max(MIN_ENV_WEIGHT, share),
    }
    return status, group_size
