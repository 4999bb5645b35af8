"""Index-level cores of the batching algorithms.

These work on group sizes (number of sequences per group) and return indices into the queue,
so the server can run them over its queue metadata without touching group data.
``atroposlib.api.utils`` wraps them with dict-based signatures. compat: the index semantics
(greedy-then-DP subset search, pack-to-the-largest-group, minimum allocations) are exactly those
of atroposlib 0.4.0, quirks included.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable, Mapping, Sequence


def subset_summing_to(sizes: Sequence[int], target: int) -> list[int]:
    """Indices of items whose sizes sum exactly to ``target``; ``[]`` when impossible.

    First a greedy FIFO pass (take every item that still fits, skip the others, stop as soon
    as the running sum hits the target). Failing that, a subset-sum table over the first ``i``
    items, backtracked from the last item down, which therefore prefers the latest items.
    The result is sorted ascending.
    """
    if not sizes:
        return []
    running = 0
    taken: list[int] = []
    for index, size in enumerate(sizes):
        if running + size <= target:
            taken.append(index)
            running += size
            if running == target:
                return taken
    if target < 0:
        return []
    count = len(sizes)
    # reachable[i][j]: can the first i items sum to j?
    reachable = [[False] * (target + 1) for _ in range(count + 1)]
    reachable[0][0] = True
    for i in range(1, count + 1):
        size = sizes[i - 1]
        previous = reachable[i - 1]
        row = reachable[i]
        for j in range(target + 1):
            row[j] = previous[j] or (j >= size and previous[j - size])
    if not reachable[count][target]:
        return []
    chosen: list[int] = []
    remaining = target
    for i in range(count, 0, -1):
        size = sizes[i - 1]
        if remaining >= size and reachable[i - 1][remaining - size]:
            chosen.append(i - 1)
            remaining -= size
    return sorted(chosen)


def exact_batch(sizes: Sequence[int], batch_size: int) -> list[int] | None:
    """Indices (in pick order) of one batch of exactly ``batch_size`` sequences, or ``None``.

    Items are grouped into "packs" whose sizes sum to the largest item size ``M``: an item of
    size ``s`` waits until ``M / s`` items of that size have arrived, and the pack is released
    in arrival order. Released items are walked in release order until the running sum equals
    ``batch_size``; overshooting, or running out, gives ``None``.
    """
    if not sizes:
        return None
    total = sum(sizes)
    largest = max(sizes)
    if total < batch_size:
        return None
    waiting: dict[int, list[int]] = {}
    released: list[int] = []
    for index, size in enumerate(sizes):
        bucket = waiting.setdefault(size, [])
        bucket.append(index)
        if len(bucket) * size == largest:
            released.extend(bucket)
            bucket.clear()
    if sum(sizes[i] for i in released) < batch_size:
        return None
    picked: list[int] = []
    running = 0
    for index in released:
        picked.append(index)
        running += sizes[index]
        if running == batch_size:
            break
        if running > batch_size:
            return None
    if running != batch_size:
        return None
    return picked


def minimum_allocations(env_configs: Iterable[Mapping]) -> dict[Hashable, float]:
    """``{registered_id: min_batch_allocation}`` for connected envs that set a minimum, in order."""
    mins: dict[Hashable, float] = {}
    for env in env_configs:
        if env.get("connected", False) and env.get("min_batch_allocation") is not None:
            mins[env["registered_id"]] = env["min_batch_allocation"]
    return mins


def batch_with_minimums(
    sizes: Sequence[int],
    env_ids: Sequence[Hashable | None],
    batch_size: int,
    mins: Mapping[Hashable, float],
) -> list[int] | None:
    """Indices of one batch honouring per-env minimum shares, or ``None``.

    ``mins`` comes from :func:`minimum_allocations`; when it is empty this is
    :func:`exact_batch`. Packs are formed per env (items without an env id are never taken);
    first every env with a minimum gets ``int(batch_size * share)`` sequences (scaled down when
    the minimums exceed the batch), then the batch is filled from the remaining packable items
    in queue order. The batch lists the minimum-pass picks first.
    """
    if not sizes:
        return None
    if not mins:
        return exact_batch(sizes, batch_size)
    largest = max(sizes)
    waiting_by_env: dict[Hashable, dict[int, list[int]]] = {}
    packable: dict[Hashable, list[int]] = {}
    for index, (size, env_id) in enumerate(zip(sizes, env_ids, strict=False)):
        if env_id is None:
            continue
        if env_id not in waiting_by_env:
            waiting_by_env[env_id] = {}
            packable[env_id] = []
        bucket = waiting_by_env[env_id].setdefault(size, [])
        bucket.append(index)
        if len(bucket) * size == largest:
            packable[env_id].extend(bucket)
            waiting_by_env[env_id][size] = []

    need: dict[Hashable, int] = {}
    total_need = 0
    for env_id, share in mins.items():
        wanted = int(batch_size * share)
        if wanted > 0:
            if env_id not in waiting_by_env or not packable.get(env_id):
                return None
            need[env_id] = wanted
            total_need += wanted
    if total_need > batch_size:
        scale = batch_size / total_need
        for env_id in need:
            smallest = min(sizes[i] for i in packable[env_id])
            need[env_id] = max(smallest, int(need[env_id] * scale))

    picked: list[int] = []
    picked_set: set[int] = set()
    taken_by_env = dict.fromkeys(packable, 0)
    total = 0
    for env_id, wanted in need.items():
        for index in packable[env_id]:
            if taken_by_env[env_id] >= wanted:
                break
            size = sizes[index]
            if total + size <= batch_size:
                picked.append(index)
                picked_set.add(index)
                taken_by_env[env_id] += size
                total += size

    if total < batch_size:
        packable_set = {index for indices in packable.values() for index in indices}
        for index in range(len(sizes)):
            if index in picked_set or index not in packable_set:
                continue
            size = sizes[index]
            if total + size <= batch_size:
                picked.append(index)
                picked_set.add(index)
                total += size
            if total == batch_size:
                break

    if total != batch_size:
        return None
    return picked


def drain_batches(
    sizes: Sequence[int],
    env_ids: Sequence[Hashable | None],
    batch_size: int,
    mins: Mapping[Hashable, float] | None,
) -> list[list[int]]:
    """Every batch that repeated grabbing forms, as index lists into the queue as given.

    Equivalent to calling the grabber on the queue, then on the remaining queue, and so on until
    it returns ``None`` (what ``GET /batch`` does). ``mins`` selects the minimum-allocation
    grabber when non-empty. A queue of equally sized groups that divide the batch size (the
    common case) is chunked directly instead of being rescanned once per batch.
    """
    remaining = list(range(len(sizes)))
    if not remaining or batch_size <= 0:
        return _drain_generic(remaining, sizes, env_ids, batch_size, mins)
    first = sizes[0]
    if not mins and first > 0 and batch_size % first == 0 and all(s == first for s in sizes):
        per_batch = batch_size // first
        full = len(remaining) // per_batch
        return [remaining[k * per_batch : (k + 1) * per_batch] for k in range(full)]
    return _drain_generic(remaining, sizes, env_ids, batch_size, mins)


def _drain_generic(
    remaining: list[int],
    sizes: Sequence[int],
    env_ids: Sequence[Hashable | None],
    batch_size: int,
    mins: Mapping[Hashable, float] | None,
) -> list[list[int]]:
    batches: list[list[int]] = []
    while remaining:
        current_sizes = [sizes[i] for i in remaining]
        if mins:
            local = batch_with_minimums(current_sizes, [env_ids[i] for i in remaining], batch_size, mins)
        else:
            local = exact_batch(current_sizes, batch_size)
        if local is None:
            break
        if not local:
            # An empty batch (only reachable with batch_size <= 0) would repeat forever.
            break
        batches.append([remaining[i] for i in local])
        chosen = set(local)
        remaining = [index for k, index in enumerate(remaining) if k not in chosen]
    return batches
