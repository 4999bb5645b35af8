"""The trajectory API's batching algorithms (compat: the names and signatures of atroposlib 0.4.0).

Every function takes groups as dicts; a group's size is ``len(group["tokens"])`` (its number of
sequences). The grabbers return ``(batch, new_queue)``: on success the batch (a list of groups)
and the queue without the chosen groups, in queue order; on failure ``(None, queue)``
with the queue unchanged. The index-level implementations live in
:mod:`atroposlib.api.packing`.
"""

from __future__ import annotations

from typing import Any

from atroposlib.api.packing import (
    batch_with_minimums,
    exact_batch,
    minimum_allocations,
    subset_summing_to,
)

__all__ = [
    "find_groups_summing_to_target",
    "grab_batch_with_minimum_allocations",
    "grab_exact_from_heterogeneous_queue",
]


def find_groups_summing_to_target(buffer: list[dict[str, Any]], target_size: int) -> list[int]:
    """Indices (ascending) of buffered groups whose sizes sum exactly to ``target_size``.

    A greedy FIFO pass is tried first; otherwise a subset-sum search whose backtracking prefers
    the latest groups (sizes ``[3, 2, 2, 2, 2]`` with target 4 give ``[3, 4]``). Returns ``[]``
    when no combination exists or the buffer is empty.
    """
    return subset_summing_to([len(group["tokens"]) for group in buffer], target_size)


def _split(queue: list[dict[str, Any]], picked: list[int] | None) -> tuple[list | None, list]:
    if picked is None:
        return None, queue
    chosen = set(picked)
    return [queue[i] for i in picked], [item for i, item in enumerate(queue) if i not in chosen]


def grab_exact_from_heterogeneous_queue(
    queue: list[dict[str, Any]], batch_size: int
) -> tuple[list[dict[str, Any]] | None, list[dict[str, Any]]]:
    """Take one batch of exactly ``batch_size`` sequences by packing groups to the largest size.

    Groups of size ``s`` are released in packs of ``max_size / s`` (in arrival order, so the
    batch is ordered by pack completion, e.g. sizes ``[2, 8, 2, 2, 2]`` release ``[1, 0, 2, 3,
    4]``); sizes that do not divide the largest size never pack. Returns ``(None, queue)`` when
    no exact batch can be formed.
    """
    return _split(queue, exact_batch([len(item["tokens"]) for item in queue], batch_size))


def grab_batch_with_minimum_allocations(
    queue: list[dict[str, Any]], batch_size: int, env_configs: list[dict[str, Any]]
) -> tuple[list[dict[str, Any]] | None, list[dict[str, Any]]]:
    """Take one batch that gives every connected env with ``min_batch_allocation`` its share.

    ``env_configs`` are env records (``registered_id``, ``connected``, ``min_batch_allocation``).
    Without any connected env that sets a minimum this is
    :func:`grab_exact_from_heterogeneous_queue`. Groups without an ``env_id`` are never taken on
    this path. Returns ``(None, queue)`` when a minimum cannot be met or the batch cannot be
    filled exactly.
    """
    if not queue:
        return None, queue
    mins = minimum_allocations(env_configs)
    sizes = [len(item.get("tokens", [])) for item in queue]
    env_ids = [item.get("env_id") for item in queue]
    return _split(queue, batch_with_minimums(sizes, env_ids, batch_size, mins))
