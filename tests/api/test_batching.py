"""The three batching functions of ``atroposlib.api.utils``, checked against the tables of the spec."""

from __future__ import annotations

import random

import pytest

from atroposlib.api.packing import drain_batches, minimum_allocations
from atroposlib.api.utils import (
    find_groups_summing_to_target,
    grab_batch_with_minimum_allocations,
    grab_exact_from_heterogeneous_queue,
)


def groups(sizes, env_ids=None):
    """One dict per group; the group's size is its number of token rows; ``id`` tracks identity."""
    env_ids = env_ids or [None] * len(sizes)
    return [
        {"id": i, "tokens": [[i]] * size, "env_id": env}
        for i, (size, env) in enumerate(zip(sizes, env_ids, strict=True))
    ]


def ids(items):
    return None if items is None else [item["id"] for item in items]


def per_env(batch):
    counts = {}
    for item in batch:
        counts[item["env_id"]] = counts.get(item["env_id"], 0) + len(item["tokens"])
    return counts


# ---------------------------------------------------------------- find_groups_summing_to_target


@pytest.mark.parametrize(
    ("sizes", "target", "expected"),
    [
        ([1, 2, 1], 4, [0, 1, 2]),
        ([2, 2, 4], 4, [0, 1]),
        ([3, 1, 4], 5, [1, 2]),  # greedy fails (3+1), the table finds 1+4
        ([2, 4], 3, []),
        ([], 4, []),
        ([4], 4, [0]),
        ([2, 2, 2, 2], 8, [0, 1, 2, 3]),
        ([16, 8, 8], 32, [0, 1, 2]),
        ([2, 2, 4, 2, 2], 4, [0, 1]),
        ([2, 4, 2, 1], 6, [0, 1]),
        ([1] * 16, 8, list(range(8))),
        # the backtrack prefers the latest items
        ([3, 2, 2, 2, 2], 4, [3, 4]),
        # no early stop at zero remaining: zero-size groups are swept in
        ([0, 3], 3, [0, 1]),
    ],
)
def test_find_groups_summing_to_target_table(sizes, target, expected):
    assert find_groups_summing_to_target(groups(sizes), target) == expected


def test_find_groups_mixed_sizes_sum_to_target():
    buffer = groups([1, 2, 1, 4, 2])
    picked = find_groups_summing_to_target(buffer, 8)
    assert picked
    assert sum(len(buffer[i]["tokens"]) for i in picked) == 8


def test_find_groups_random_results_are_valid_subsets():
    rng = random.Random(7)
    for _ in range(300):
        sizes = [rng.choice([1, 2, 3, 4, 8]) for _ in range(rng.randint(0, 10))]
        target = rng.randint(1, 16)
        picked = find_groups_summing_to_target(groups(sizes), target)
        assert picked == sorted(set(picked))
        if picked:
            assert sum(sizes[i] for i in picked) == target


# ---------------------------------------------------------------- grab_exact_from_heterogeneous_queue


@pytest.mark.parametrize(
    ("sizes", "batch_size", "batch", "remaining"),
    [
        ([2, 2, 4], 4, [0, 1], [2]),
        ([2, 4, 2], 4, [1], [0, 2]),
        ([4, 2, 4, 2], 8, [0, 2], [1, 3]),
        ([1, 4, 1, 1, 1], 8, [1, 0, 2, 3, 4], []),
        ([3, 3, 3, 3], 6, [0, 1], [2, 3]),
        ([4, 4, 4], 6, None, [0, 1, 2]),
        ([2, 2, 2, 2], 6, [0, 1, 2], [3]),
        ([8, 2, 2], 4, None, [0, 1, 2]),
        ([2, 2, 8], 4, None, [0, 1, 2]),
        ([2, 2], 0, None, [0, 1]),
        ([], 4, None, []),
        ([2, 2], 8, None, [0, 1]),  # not enough sequences
        ([3, 4, 3], 4, [1], [0, 2]),  # size 3 does not divide 4: stranded
    ],
)
def test_grab_exact_table(sizes, batch_size, batch, remaining):
    queue = groups(sizes)
    got, new_queue = grab_exact_from_heterogeneous_queue(queue, batch_size)
    assert ids(got) == batch
    assert ids(new_queue) == remaining
    if got is None:
        assert new_queue is queue


def test_grab_exact_orders_by_pack_completion():
    got, _ = grab_exact_from_heterogeneous_queue(groups([2, 8, 2, 2, 2]), 12)
    assert ids(got) == [1, 0, 2]


def test_grab_exact_random_groups_of_eight():
    """Like the original's randomized test (fewer cases): any batch has exactly the batch size."""
    rng = random.Random(1234)
    for _ in range(1500):
        batch_size = 64 * rng.randint(1, 20)
        queue = groups([8] * rng.randint(1, 100))
        batch, rest = grab_exact_from_heterogeneous_queue(queue, batch_size)
        total = 8 * len(queue)
        if total >= batch_size:
            assert sum(len(g["tokens"]) for g in batch) == batch_size
            assert ids(batch) == list(range(batch_size // 8))
            assert len(rest) == len(queue) - len(batch)
        else:
            assert batch is None and rest is queue


# ---------------------------------------------------------------- grab_batch_with_minimum_allocations


def env_configs(*mins, connected=None):
    connected = connected or [True] * len(mins)
    return [
        {"registered_id": i, "connected": c, "min_batch_allocation": m}
        for i, (m, c) in enumerate(zip(mins, connected, strict=True))
    ]


def test_min_alloc_spec_example_takes_min_env_first():
    queue = groups([2] * 6, [1, 1, 1, 0, 0, 1])
    batch, rest = grab_batch_with_minimum_allocations(queue, 4, env_configs(0.5, None))
    assert ids(batch) == [3, 0]
    assert ids(rest) == [1, 2, 4, 5]


def test_min_alloc_env_that_cannot_pack_blocks_the_batch():
    queue = groups([4, 2, 2], [1, 0, 1])
    batch, rest = grab_batch_with_minimum_allocations(queue, 4, env_configs(0.5, None))
    assert batch is None and rest is queue


def test_min_alloc_scales_a_share_above_one():
    queue = groups([1] * 8, [0] * 8)
    batch, _ = grab_batch_with_minimum_allocations(queue, 4, env_configs(1.5))
    assert ids(batch) == [0, 1, 2, 3]


def test_min_alloc_basic_shares_are_met():
    queue = groups([2, 2, 2, 2], [0, 1, 0, 1])
    batch, rest = grab_batch_with_minimum_allocations(queue, 8, env_configs(0.25, 0.5))
    counts = per_env(batch)
    assert sum(counts.values()) == 8 and counts[1] >= 4 and counts[0] >= 2
    assert rest == []


def test_min_alloc_without_minimums_is_the_exact_grabber():
    queue = groups([1, 1, 1, 1], [0, 1, 0, 1])
    configs = [{"registered_id": 0, "connected": True}, {"registered_id": 1, "connected": True}]
    batch, rest = grab_batch_with_minimum_allocations(queue, 4, configs)
    expected, expected_rest = grab_exact_from_heterogeneous_queue(queue, 4)
    assert ids(batch) == ids(expected) and ids(rest) == ids(expected_rest)


def test_min_alloc_conflicting_minimums_scale_down():
    queue = groups([2, 2], [0, 1])
    batch, _ = grab_batch_with_minimum_allocations(queue, 4, env_configs(0.7, 0.6))
    assert ids(batch) == [0, 1]


@pytest.mark.parametrize(
    ("sizes", "envs", "mins", "batch_size"),
    [
        ([2, 2], [0, 0], (0.3, 0.5), 4),  # env 1 has a minimum but nothing queued
        ([1, 1, 1, 4], [0, 0, 0, 1], (0.25, None), 4),  # env 0 has 3 of 4 needed size-1 items
        ([2, 2, 2, 8], [0, 0, 0, 1], (0.25, None), 8),  # env 0 cannot pack to 8
        ([1], [0], (0.5,), 4),  # not enough sequences
    ],
)
def test_min_alloc_returns_none(sizes, envs, mins, batch_size):
    queue = groups(sizes, envs)
    batch, rest = grab_batch_with_minimum_allocations(queue, batch_size, env_configs(*mins))
    assert batch is None and rest is queue


def test_min_alloc_disconnected_env_is_ignored():
    queue = groups([1, 1], [0, 1])
    configs = env_configs(0.25, 0.75, connected=[True, False])
    batch, _ = grab_batch_with_minimum_allocations(queue, 2, configs)
    assert ids(batch) == [0, 1]


def test_min_alloc_zero_share_needs_nothing():
    queue = groups([1, 1], [0, 1])
    batch, _ = grab_batch_with_minimum_allocations(queue, 2, env_configs(0.0, 0.5))
    assert ids(batch) == [1, 0]


def test_min_alloc_truncated_need_of_zero_ignores_empty_env():
    queue = groups([1, 1], [0, 0])
    batch, _ = grab_batch_with_minimum_allocations(queue, 2, env_configs(0.5, None, 0.3))
    assert ids(batch) == [0, 1]


def test_min_alloc_empty_queue():
    batch, rest = grab_batch_with_minimum_allocations([], 4, env_configs(0.5))
    assert batch is None and rest == []


def test_min_alloc_exact_half_and_half():
    queue = groups([2, 2, 2, 2], [0, 0, 1, 1])
    batch, _ = grab_batch_with_minimum_allocations(queue, 8, env_configs(0.5, 0.5))
    assert per_env(batch) == {0: 4, 1: 4}


def test_min_alloc_many_packs_from_one_env():
    queue = groups([1] * 16 + [4, 4], [0] * 16 + [1, 1])
    batch, _ = grab_batch_with_minimum_allocations(queue, 16, env_configs(0.75, None))
    counts = per_env(batch)
    assert counts[0] >= 12 and sum(counts.values()) == 16


def test_min_alloc_mixed_null_and_set_minimums():
    queue = groups([2] * 8, [0, 0, 0, 0, 1, 1, 2, 2])
    batch, _ = grab_batch_with_minimum_allocations(queue, 16, env_configs(0.4, 0.2, None))
    counts = per_env(batch)
    assert counts[0] >= 6 and counts[1] >= 3 and sum(counts.values()) == 16


def test_min_alloc_items_without_env_id_are_never_taken():
    queue = groups([2, 2, 2], [None, 0, 0])
    batch, rest = grab_batch_with_minimum_allocations(queue, 4, env_configs(0.5))
    assert ids(batch) == [1, 2] and ids(rest) == [0]


def test_min_alloc_dominating_env():
    queue = groups([1] * 100, [1] * 100)
    batch, _ = grab_batch_with_minimum_allocations(queue, 10, env_configs(0.5, 0.3))
    assert batch is None
    batch, _ = grab_batch_with_minimum_allocations(queue, 10, env_configs(None, 0.3))
    assert per_env(batch) == {1: 10}


def test_min_alloc_random_consistent_group_sizes():
    rng = random.Random(99)
    for _ in range(60):
        batch_size = 64 * rng.randint(1, 4)
        n_envs = rng.randint(2, 4)
        sizes, envs = [], []
        env_size = {e: 2 ** rng.randint(0, 3) for e in range(n_envs)}
        for e in range(n_envs):
            for _ in range(rng.randint(5, 20)):
                sizes.append(env_size[e])
                envs.append(e)
        shares, left = [], 0.9
        for e in range(n_envs):
            share = left if e == n_envs - 1 else rng.uniform(0.1, min(0.4, left))
            shares.append(share)
            left -= share
        batch, _ = grab_batch_with_minimum_allocations(groups(sizes, envs), batch_size, env_configs(*shares))
        if batch is not None:
            assert sum(len(g["tokens"]) for g in batch) == batch_size
            for g in batch:
                assert len(g["tokens"]) == env_size[g["env_id"]]


# ---------------------------------------------------------------- drain-all formation


def repeated(queue, batch_size, configs):
    """Reference: call the public grabber until it returns None (what GET /batch does)."""
    out = []
    has_min = configs is not None
    while True:
        if has_min:
            batch, queue = grab_batch_with_minimum_allocations(queue, batch_size, configs)
        else:
            batch, queue = grab_exact_from_heterogeneous_queue(queue, batch_size)
        if batch is None:
            return out
        out.append(ids(batch))


def test_drain_matches_repeated_grabbing():
    rng = random.Random(5)
    for case in range(400):
        n = rng.randint(0, 40)
        if case % 3 == 0:
            sizes = [rng.choice([4, 8])] * n  # the chunking fast path
        else:
            sizes = [rng.choice([1, 2, 3, 4, 8]) for _ in range(n)]
        envs = [rng.choice([0, 1, 2, None]) for _ in range(n)]
        batch_size = rng.choice([4, 8, 16, 32, 6])
        configs = None
        if case % 2:
            configs = env_configs(*[rng.choice([None, 0.25, 0.5]) for _ in range(3)])
        queue = groups(sizes, envs)
        mins = minimum_allocations(configs) if configs is not None else None
        got = drain_batches(sizes, envs, batch_size, mins)
        assert got == repeated(queue, batch_size, configs), (sizes, envs, batch_size, configs)


def test_drain_spec_example_six_pairs():
    assert drain_batches([2] * 6, [None] * 6, 4, None) == [[0, 1], [2, 3], [4, 5]]
