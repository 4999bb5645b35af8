"""Taxi on Gymnasium: env id across Gymnasium versions, map text, moves, delivery, masking, ``process``."""

from __future__ import annotations

from collections import deque

import gymnasium as gym
import pytest
from transformers import AutoTokenizer

from atroposlib.envs.base import APIServerConfig
from atroposlib.testing.scripted_server import launch_scripted_server
from environments.game_environments.taxi_env import (
    MOVES,
    TaxiEnv,
    TaxiEnvConfig,
    TaxiSession,
    describe_state,
    taxi_env_id,
)
from tests.helpers.multi_turn_runs import episode_responder, take_action


def test_the_env_id_exists_before_and_after_gymnasium_1_4():
    assert taxi_env_id(["Blackjack-v1", "Taxi-v3"]) == "Taxi-v3"  # Gymnasium < 1.4
    assert taxi_env_id(["Taxi-v3", "Taxi-v4"]) == "Taxi-v3"
    assert taxi_env_id(["Taxi-v4", "CartPole-v1"]) == "Taxi-v4"  # Gymnasium 1.4 retired Taxi-v3
    assert taxi_env_id(["Taxi-v4", "Taxi-v10"]) == "Taxi-v10"
    with pytest.raises(RuntimeError, match="no Taxi"):
        taxi_env_id(["CartPole-v1"])
    assert taxi_env_id() in gym.envs.registry  # the one installed here


def test_an_unknown_env_id_is_refused(tiny_model_dir):
    config = TaxiEnvConfig(tokenizer_name=str(tiny_model_dir), use_wandb=False, env_id="Taxi-v99")
    with pytest.raises(ValueError, match="Taxi-v99.*not registered"):
        TaxiEnv(config, APIServerConfig(base_url="http://127.0.0.1:9/v1", model_name="m", server_type="vllm"))


def test_the_state_is_shown_as_a_map_and_words():
    env = gym.make(taxi_env_id())
    env.reset(seed=0)
    text = describe_state(env.unwrapped.desc, list(env.unwrapped.locs), (2, 1, 4, 3))
    lines = text.splitlines()
    assert lines[0] == "+---------+" and lines[3] == "| :T: : : |"
    assert (
        "The taxi is at row 2, column 1. The passenger is in the taxi. Destination: Blue (B, row 4, column 3)."
        in text
    )
    text = describe_state(env.unwrapped.desc, list(env.unwrapped.locs), (0, 0, 1, 0))
    assert "|T: | : :G|" in text and "waiting at Green (G, row 0, column 4)" in text


def _shortest_moves(env_id: str, seed: int) -> list[str]:
    """An optimal move list for the seeded game, by breadth-first search over the game's own transitions."""
    env = gym.make(env_id)
    start, _ = env.reset(seed=seed)
    transitions = env.unwrapped.P
    names = {v: k for k, v in MOVES.items()}
    queue, seen = deque([(int(start), [])]), {int(start)}
    while queue:
        state, path = queue.popleft()
        for action, outcomes in transitions[state].items():
            _, nxt, _, done = outcomes[0]
            if done:
                return [*path, names[action]]
            if nxt not in seen:
                seen.add(nxt)
                queue.append((nxt, [*path, names[action]]))
    raise AssertionError("no solution")


async def test_delivering_the_passenger_wins():
    config = TaxiEnvConfig()
    moves = _shortest_moves(taxi_env_id(), seed=7)
    session = TaxiSession(config, taxi_env_id(), seed=7)
    rewards = []
    for turn, move in enumerate(moves):
        feedback = await session.step(take_action(move), turn)
        rewards.append(feedback.reward)
    assert feedback.done and session.won and session.metrics()["picked_up"] == 1.0
    assert rewards[-1] == 20.0 and sum(rewards) == 20 - (len(moves) - 1)
    assert "Passenger delivered" in feedback.messages[0]["content"]


async def test_illegal_pickup_and_invalid_moves():
    session = TaxiSession(TaxiEnvConfig(), taxi_env_id(), seed=3)
    feedback = await session.step(take_action("dropoff"), 0)
    assert (feedback.done, feedback.reward) == (False, -10.0) and "Reward: -10." in feedback.messages[0][
        "content"
    ]
    feedback = await session.step(take_action("fly"), 1)
    assert feedback.done and feedback.reward == -10.0 and "not a move" in session.invalid_action
    session = TaxiSession(TaxiEnvConfig(action_format="tag"), taxi_env_id(), seed=3)
    assert (await session.step("<action>North</action>", 0)).reward == -1.0  # case-insensitive
    assert (await session.step(take_action("north"), 1)).done  # a tool call in tag mode is no move


async def test_a_game_that_ends_early_and_one_at_the_turn_limit(tiny_model_dir):
    moves = _shortest_moves(taxi_env_id(), seed=11)
    respond = episode_responder([[take_action(m) for m in moves], [take_action("west")]])
    with launch_scripted_server(respond=respond, tokenizer=tiny_model_dir) as server:
        config = TaxiEnvConfig(
            tokenizer_name=str(tiny_model_dir),
            use_wandb=False,
            max_turns=len(moves) + 3,
            max_tokens_per_turn=64,
            max_token_length=16384,
        )
        env = TaxiEnv(config, APIServerConfig(base_url=server.base_url, model_name="m", server_type="vllm"))
        won_session, won = await env.play({"seed": 11})
        _, limited = await env.play({"seed": 11})
    assert won.end_reason == "done" and won_session.won and len(won.turns) == len(moves)
    assert env.score(won_session, won) == 20 - (len(moves) - 1)
    assert limited.end_reason == "turn_limit" and len(limited.turns) == len(moves) + 3
    assert limited.turn_rewards == [-1.0] * (len(moves) + 3)
    env.config.gamma = 0.5
    assert env.score(won_session, won) == pytest.approx(won.discounted_return(0.5))
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    trained = tokenizer.decode([m for m in limited.masks if m != -100], skip_special_tokens=False)
    assert trained == "".join(r + "<|im_end|>" for r in limited.replies) and "+---------+" not in trained


def test_process_writes_groups_with_differing_returns(scripted, tiny_model_dir):
    respond = episode_responder([["I will wait here."], [take_action("north")]])
    args = ["--env.group_size", "4", "--env.total_steps", "2", "--env.max_turns", "3",
            "--env.max_tokens_per_turn", "64"]  # fmt: skip
    groups = scripted.process(TaxiEnv, args, respond)
    assert len(groups) == 2
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    for group in groups:
        assert sorted(group["scores"]) == [-10.0, -10.0, -3.0, -3.0]
        for masks, messages in zip(group["masks"], group["messages"], strict=True):
            replies = [m["content"] for m in messages if m["role"] == "assistant"]
            trained = tokenizer.decode([m for m in masks if m != -100], skip_special_tokens=False)
            assert trained == "".join(r + "<|im_end|>" for r in replies)
