"""Worker-count and backpressure arithmetic of the serve loop (pure functions)."""

from __future__ import annotations

import pytest

from atroposlib.envs.groups import EvalHandlingEnum
from atroposlib.envs.serve.scheduling import (
    backoff_delay,
    boundary_crossed,
    derived_batch_size,
    min_allocation_reserve,
    resolve_max_num_workers,
    should_pause,
    should_stop,
    train_worker_cap,
)


def cap(**overrides):
    args = dict(
        max_num_workers=16,
        eval_running=False,
        eval_handling=EvalHandlingEnum.STOP_TRAIN,
        eval_limit_ratio=0.5,
        max_batches_offpolicy=3,
        derived_batch_size=32,
        group_size=4,
        queue_size=0,
        batch_size=32,
        min_batch_allocation=None,
        self_queue_size=0,
        max_group_size=4,
    )
    args.update(overrides)
    return train_worker_cap(**args)


def test_resolve_max_num_workers():
    assert resolve_max_num_workers(5, 8, 3) == 5
    assert resolve_max_num_workers(-1, 8, 3) == 24
    assert resolve_max_num_workers(-1, 8, 0) == 8


def test_derived_batch_size():
    assert derived_batch_size(-1, {"unallocated_fraction": 0.5}, None) == -1
    assert derived_batch_size(64, None, None) == 64
    assert derived_batch_size(64, {}, 0.25) == 64
    assert derived_batch_size(64, {"unallocated_fraction": 0.5}, 0.25) == 48
    assert derived_batch_size(64, {"queue_size": 0}, None) == 64


def test_cap_is_bounded_by_offpolicy_room():
    # 3 batches * 32 sequences / group_size 4 = 24 groups of room, 10 already queued
    assert cap(queue_size=10) == 14
    assert cap(queue_size=0) == 16
    assert cap(queue_size=30) == -6


def test_cap_during_eval():
    assert cap(eval_running=True, eval_handling=EvalHandlingEnum.STOP_TRAIN) == 0
    assert cap(eval_running=True, eval_handling=EvalHandlingEnum.LIMIT_TRAIN, eval_limit_ratio=0.25) == 4
    assert cap(eval_running=True, eval_handling=EvalHandlingEnum.NONE) == 16


def test_cap_without_offpolicy_limit():
    # max_batches_offpolicy <= 0 disables the limit instead of blocking every worker
    assert cap(max_batches_offpolicy=0, queue_size=1000) == 16


def test_min_batch_allocation_raises_cap():
    # the guaranteed share needs ceil(0.5*32*3/4)=12 groups, +1 group of slack -> 13*4 sequences = 13 workers
    assert cap(min_batch_allocation=0.5, queue_size=30, self_queue_size=0) == 13
    assert cap(min_batch_allocation=0.5, queue_size=30, self_queue_size=13) == 0


def test_min_allocation_reserve_and_pause():
    assert min_allocation_reserve(0.5, 32, 3, 4, 4) == 12
    common = dict(self_queue_size=0, max_group_size=4, group_size=4, batch_size=32, max_batches_offpolicy=3)
    assert should_pause(queue_size=24, min_batch_allocation=None, derived_batch_size=32, **common)
    assert not should_pause(queue_size=23, min_batch_allocation=None, derived_batch_size=32, **common)
    # queue full, but this env has not covered its reserved share yet
    assert not should_pause(queue_size=30, min_batch_allocation=0.5, derived_batch_size=32, **common)
    common["self_queue_size"] = 12
    assert should_pause(queue_size=30, min_batch_allocation=0.5, derived_batch_size=32, **common)
    # unknown batch size always pauses; a disabled limit never does
    assert should_pause(queue_size=0, min_batch_allocation=None, derived_batch_size=-1, **common)
    common["max_batches_offpolicy"] = 0
    assert not should_pause(queue_size=10**6, min_batch_allocation=None, derived_batch_size=32, **common)


def test_should_stop():
    assert not should_stop(current_step=5, queue_size=0, group_size=4, batch_size=8, total_steps=10)
    assert should_stop(current_step=11, queue_size=0, group_size=4, batch_size=8, total_steps=10)
    # 6 queued groups of 4 = 3 batches of 8 pending
    assert should_stop(current_step=8, queue_size=6, group_size=4, batch_size=8, total_steps=10)
    assert not should_stop(current_step=10**6, queue_size=0, group_size=4, batch_size=8, total_steps=-1)
    assert not should_stop(current_step=3, queue_size=100, group_size=4, batch_size=-1, total_steps=10)


@pytest.mark.parametrize(
    "prev,cur,interval,expected",
    [
        (0, 5, 10, None),
        (9, 10, 10, 10),
        (5, 25, 10, 20),  # jumped over two multiples: the last is reported
        (18, 22, 10, 20),
        (19, 21, 10, 20),
        (13, 17, 10, None),
        (12, 38, 25, 25),
        # the remainder comparison of the original misses this one (2 % 10 > 13 % 10 is False)
        (2, 13, 10, 10),
        (10, 10, 10, None),
        (20, 10, 10, None),
        (0, 100, 0, None),
        (0, 100, -1, None),
    ],
)
def test_boundary_crossed(prev, cur, interval, expected):
    assert boundary_crossed(prev, cur, interval) == expected


def test_backoff_delay():
    assert backoff_delay(1) == 0.5
    assert backoff_delay(2) == 1.0
    assert backoff_delay(4) == 4.0
    assert backoff_delay(50) == 30.0
    assert backoff_delay(3, base=1.0, cap=2.5) == 2.5
