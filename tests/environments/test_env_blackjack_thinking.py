"""Blackjack's thinking variant: exact values, per-turn alternatives and their scores, ``process`` (the hands
really played, only the replies trained) and ``evaluate``."""

from __future__ import annotations

import copy
import re

import gymnasium as gym
import pytest

from environments.game_environments.blackjack_env_thinking import BlackjackThinkingEnv, optimal_value
from tests.helpers.multi_turn_runs import take_action
from tests.helpers.single_turn_runs import check_group, offline_env

HIT, STICK = 1, 0


def _game(seed: int) -> gym.Env:
    env = gym.make("Blackjack-v1")
    env.reset(seed=seed)
    return env


def _step(env: gym.Env, move: int) -> tuple[gym.Env, float, bool]:
    env = copy.deepcopy(env)
    _, reward, terminated, truncated, _ = env.step(move)
    return env, float(reward), bool(terminated or truncated)


@pytest.mark.parametrize("seed", range(8))
def test_the_optimal_value_is_reached_by_playing_its_moves(seed):
    env = _game(seed)
    value = optimal_value(env)
    assert value >= _step(env, STICK)[1]  # never worse than sticking at once
    total, over = 0.0, False
    while not over:  # follow the move that keeps the value: the game then really returns it
        stick_env, stick_reward, _ = _step(env, STICK)
        hit_env, hit_reward, hit_over = _step(env, HIT)
        hit_value = hit_reward if hit_over else hit_reward + optimal_value(hit_env)
        env, reward, over = (
            (stick_env, stick_reward, True) if stick_reward >= hit_value else (hit_env, hit_reward, hit_over)
        )
        total += reward
    assert total == value


def _env(tiny_model_dir, **overrides) -> BlackjackThinkingEnv:
    return offline_env(BlackjackThinkingEnv, tiny_model_dir, **overrides)


def test_alternatives_are_scored_by_their_advantage(tiny_model_dir):
    env = _env(tiny_model_dir, tiebreak_token_factor=0.0)
    hand = env.new_hand(1)  # 20 against a 7: sticking wins
    value = optimal_value(hand.env)
    stick_reward = _step(hand.env, STICK)[1]
    replies = [
        "<think>\n20 is strong.</think>" + take_action("stick"),
        "<think>\nlet me take one more</think>" + take_action("hit"),
        "<think>\n</think>" + take_action("stick"),  # empty thinking
        "<think>\nhmm</think> I will stick.",  # no valid move: sticks, -0.2
        take_action("stick"),  # no thinking
        "<think>\nfold</think>" + take_action("fold"),  # not a move: sticks
    ]
    alternatives = env.value_alternatives(hand, replies)
    hit_env, hit_reward, hit_over = _step(hand.env, HIT)
    hit_next = 0.0 if hit_over else optimal_value(hit_env)
    expected = [
        stick_reward + 0.4 - value,
        hit_reward + 0.4 + hit_next - value,
        stick_reward + 0.0 - value,
        stick_reward + 0.0 - value,
        stick_reward + 0.0 - value,
        stick_reward + 0.0 - value,
    ]
    assert [a.score for a in alternatives] == pytest.approx(expected)
    assert [a.valid for a in alternatives] == [True, True, True, False, True, False]
    assert alternatives[0].score > alternatives[1].score  # the value prefers sticking on 20
    tiebreak = _env(tiny_model_dir)
    short, long = tiebreak.value_alternatives(
        hand, [replies[0], replies[0].replace("strong.", "strong. " * 40)]
    )
    assert short.score > long.score


def _player(prompt, index: int) -> str:
    """Choice 0 plays basic strategy (hit below 17, then stick) with thinking; choice 1 answers without a move."""
    totals = re.findall(r"Your total: (\d+)", str(prompt))
    if index % 2:
        return "Let me think.\n</think>\nI am not sure."
    move = "hit" if int(totals[-1]) < 17 else "stick"
    return f"My total is {totals[-1]}.\n</think>\n" + take_action(move)


def test_process_plays_hands_turn_by_turn(scripted, tiny_model_dir):
    out = scripted.tmp_path / "groups.jsonl"
    args = ["--env.group_size", "2", "--env.total_steps", "6", "--env.max_tokens", "64", "--env.seed", "2",
            "--env.data_path_to_save_groups", out]  # fmt: skip
    scripted.command(BlackjackThinkingEnv, "process", args, _player)
    from tests.helpers.cli_runs import read_jsonl

    groups = read_jsonl(out)
    assert len(groups) >= 6
    later_turns = 0
    for group in groups:
        check_group(group, 2)  # earlier turns, observations and the <think> prefill masked: the reply trained
        chat = group["messages"][0]
        assert chat[0]["role"] == "system" and "Your cards:" in chat[1]["content"]
        assert all(m["role"] in ("system", "user", "assistant") for m in chat)
        earlier = [m for m in chat[:-1] if m["role"] == "assistant"]
        if earlier:  # a later turn: the chosen move of the turn before, then the game's new position
            later_turns += 1
            assert "take_action" in earlier[-1]["content"] and "Your total:" in chat[-2]["content"]
        scores = dict(zip((m[-1]["content"] for m in group["messages"]), group["scores"], strict=True))
        valid = next(s for reply, s in scores.items() if "take_action" in reply)
        invalid = next(s for reply, s in scores.items() if "take_action" not in reply)
        assert valid != invalid
    assert later_turns >= 1  # seed 2 opens on 6 against a 10: basic strategy hits more than once


def test_evaluate_plays_held_out_hands(scripted):
    def stick(prompt, index):
        return "Standing.\n</think>\n" + take_action("stick")

    evaluation = scripted.evaluation(
        BlackjackThinkingEnv, ["--env.eval_episodes", "4", "--env.max_tokens", "64"], stick
    )
    returns = [_step(_game(1_000_000 + k), STICK)[1] for k in range(4)]
    metrics = evaluation.metrics
    assert metrics["eval/percent_correct"] == sum(r > 0 for r in returns) / 4
    assert metrics["eval/mean_score"] == pytest.approx(sum(returns) / 4)
    assert metrics["eval/invalid_action_rate"] == 0.0 and metrics["eval/mean_moves"] == 1.0
    assert [s["moves"] for s in evaluation.samples] == [["stick"]] * 4
