"""The demo's reward lines come from the environment's rollout stats (every rollout, dropped groups too)."""

from __future__ import annotations

import json

from example_trainer.demo.reporting import read_rollout_stats, reward_line, rollout_summary


def _stats(step, reward, dropped, scored=32):
    return {
        "step": step,
        "train/rollout_reward_mean": reward,
        "train/kept_reward_mean": reward + 0.1,
        "train/groups_dropped_equal_scores": dropped,
        "train/groups_scored": scored,
        "train/rollouts": scored * 8,
    }


def test_rollout_stats_are_read_from_the_env_log_incrementally(tmp_path):
    log = tmp_path / "environment.log"
    log.write_text(
        "2026-01-01 INFO atroposlib.envs.base: starting\n"
        f"2026-01-01 INFO atroposlib.envs.base: rollout stats {json.dumps(_stats(1, 0.25, 9))}\n"
        "2026-01-01 INFO atroposlib.envs.base: rollout stats {not json\n"
        f"2026-01-01 INFO atroposlib.envs.base: rollout stats {json.dumps(_stats(2, 0.5, 4))[:20]}"
    )
    offset, stats = read_rollout_stats(log, 0)
    assert [s["step"] for s in stats] == [1]  # the unfinished last line waits for its newline
    with open(log, "a") as fh:
        fh.write(json.dumps(_stats(2, 0.5, 4))[20:] + "\n")
    offset, more = read_rollout_stats(log, offset)
    assert [s["train/rollout_reward_mean"] for s in more] == [0.5]
    assert read_rollout_stats(log, offset) == (offset, [])
    assert read_rollout_stats(tmp_path / "missing.log", 0) == (0, [])


def test_reward_lines_name_all_rollouts_and_kept_groups():
    stats = [_stats(1, 0.256, 9), _stats(2, 0.4, 5)]
    line = reward_line(stats, [0.33, 0.45])
    assert (
        line
        == "GRPO (reward 0.40 over all rollouts, 5/32 groups dropped (all scores equal); trained batch 0.45)"
    )
    assert reward_line([], []) == "GRPO"
    summary = rollout_summary(stats, [0.33, 0.45])
    assert summary == (
        "training reward over all rollouts: 0.256 -> 0.400; 14 of 64 groups dropped (all scores equal); "
        "kept groups' reward: 0.330 -> 0.450"
    )
