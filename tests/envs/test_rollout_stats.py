"""Rollout stats: the reward over every generated rollout, beside the reward of the groups kept."""

from __future__ import annotations

import json
import logging

import pytest

from tests.envs.test_base_env import group, make_env


async def test_rollout_reward_counts_dropped_equal_score_groups(tiny_model_dir, tmp_path, caplog):
    env = make_env(tiny_model_dir, tmp_path, group_size=4)
    caplog.set_level(logging.INFO, logger="atroposlib.envs.base")
    kept = group(n=4, scores=[1.0, 0.0, 0.0, 0.0])
    all_wrong = group(n=4, scores=[0.0, 0.0, 0.0, 0.0])
    all_right = group(n=4, scores=[1.0, 1.0, 1.0, 1.0])
    nan = group(n=4, scores=[1.0, float("nan"), 0.0, 0.0])
    sent = await env.handle_send_to_api([kept, all_wrong, all_right, nan], do_send_to_api=False)
    assert sent == 1
    stats = env.rollout_stats()
    # 12 finite rollouts (the NaN group is not counted), 5 of them right
    assert stats["train/rollout_reward_mean"] == pytest.approx(5 / 12)
    assert stats["train/kept_reward_mean"] == pytest.approx(0.25)
    assert stats["train/rollouts"] == 12
    assert stats["train/groups_scored"] == 3
    assert stats["train/groups_dropped_equal_scores"] == 2

    env.curr_step = 7
    await env.wandb_log({})
    lines = [r.getMessage() for r in caplog.records if r.getMessage().startswith("rollout stats ")]
    assert len(lines) == 1
    logged = json.loads(lines[0].removeprefix("rollout stats "))
    assert logged["step"] == 7
    assert logged["train/rollout_reward_mean"] == pytest.approx(5 / 12)
    assert logged["train/groups_dropped_equal_scores"] == 2
    # the buffers start over after a log
    assert env.rollout_stats() == {}


async def test_groups_dropped_before_sending_are_counted_directly(tiny_model_dir, tmp_path):
    env = make_env(tiny_model_dir, tmp_path)
    env.record_group_scores([0.0, 0.0], kept=False, equal_scores=True)
    env.record_group_scores([1.0, 0.0], kept=True)
    env.record_group_scores(["x", 1.0], kept=True)
    stats = env.rollout_stats()
    assert stats["train/rollout_reward_mean"] == pytest.approx(0.25)
    assert stats["train/kept_reward_mean"] == pytest.approx(0.5)
    assert stats["train/groups_dropped_equal_scores"] == 1 and stats["train/groups_scored"] == 2
    env.reset_rollout_stats()
    env.record_group_scores([0.0, 0.0], kept=False, equal_scores=True)
    assert "train/kept_reward_mean" not in env.rollout_stats()
