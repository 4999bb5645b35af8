"""Blackjack on Gymnasium: hands, moves, invalid moves, turn limit, masking, ``process`` and ``evaluate``."""

from __future__ import annotations

import gymnasium as gym
import pytest
from transformers import AutoTokenizer

from atroposlib.envs.base import APIServerConfig
from atroposlib.testing.scripted_server import launch_scripted_server
from environments.game_environments.blackjack_env import (
    BlackjackEnv,
    BlackjackEnvConfig,
    BlackjackSession,
    describe_hand,
)
from tests.helpers.cli_runs import read_jsonl
from tests.helpers.multi_turn_runs import episode_responder, take_action


def _seed_where(predicate) -> int:
    """The first seed whose fresh hand, after one hit, satisfies ``predicate(terminated)``."""
    for seed in range(200):
        env = gym.make("Blackjack-v1", sab=True)
        env.reset(seed=seed)
        _, _, terminated, _, _ = env.step(1)
        if predicate(terminated):
            return seed
    raise AssertionError("no such seed")


def _env(tiny_model_dir, base_url="http://127.0.0.1:9/v1", **overrides) -> BlackjackEnv:
    values = {
        "tokenizer_name": str(tiny_model_dir),
        "use_wandb": False,
        "group_size": 4,
        "max_tokens_per_turn": 64,
        "max_token_length": 4096,
        **overrides,
    }
    server = APIServerConfig(base_url=base_url, model_name="m", server_type="vllm")
    return BlackjackEnv(BlackjackEnvConfig(**values), server, slurm=False, testing=False)


def test_the_hand_is_shown_as_text():
    assert describe_hand([1, 6], 10, 17, True).startswith(
        "Your cards: ace, 6. Your total: 17 (an ace counts as 11). The dealer shows: 10."
    )
    session = BlackjackSession(BlackjackEnvConfig(), seed=3)
    text = session.messages[1]["content"]
    total = sum(session.env.unwrapped.player)
    assert (
        "Your cards:" in text and "hit or stick" in text and "take_action" in session.messages[0]["content"]
    )
    assert str(total) in text or str(total + 10) in text


async def test_stick_ends_the_hand_with_the_games_reward():
    session = BlackjackSession(BlackjackEnvConfig(), seed=5)
    feedback = await session.step(take_action("stick"), 0)
    assert feedback.done and feedback.reward in (-1.0, 0.0, 1.0)
    assert session.won == (feedback.reward > 0) and session.moves == ["stick"]


async def test_a_bust_ends_the_hand_early():
    seed = _seed_where(lambda terminated: terminated)
    session = BlackjackSession(BlackjackEnvConfig(), seed=seed)
    feedback = await session.step(take_action("hit"), 0)
    assert feedback.done and feedback.reward == -1.0 and not session.won


@pytest.mark.parametrize(
    "reply", ["I fold.", take_action("fold"), '<tool_call>{"name": "take_action"', take_action("hit") * 2]
)
async def test_an_invalid_move_is_penalised_and_ends_the_episode(reply):
    session = BlackjackSession(BlackjackEnvConfig(invalid_action_penalty=-2.0), seed=1)
    feedback = await session.step(reply, 0)
    assert feedback.done and feedback.reward == -2.0 and session.invalid_action
    assert session.metrics()["invalid_action"] == 1.0


async def test_the_tag_format():
    session = BlackjackSession(BlackjackEnvConfig(action_format="tag"), seed=5)
    assert "<action>hit</action>" in session.messages[0]["content"]
    assert (await session.step("<action>stick</action>", 0)).done


async def test_episodes_train_only_the_replies_and_stop_at_the_turn_limit(tiny_model_dir):
    seed = _seed_where(lambda terminated: not terminated)
    respond = episode_responder([[take_action("hit")]])
    with launch_scripted_server(respond=respond, tokenizer=tiny_model_dir) as server:
        env = _env(tiny_model_dir, server.base_url, max_turns=1)
        session, episode = await env.play({"seed": seed})
        env.config.max_turns = 10
        _, full = await env.play({"seed": seed})
    assert episode.end_reason == "turn_limit" and len(episode.turns) == 1 and episode.turn_rewards == [0.0]
    assert full.end_reason == "done" and len(full.turns) >= 2 and full.turn_rewards[-1] == -1.0
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    trained = tokenizer.decode([m for m in full.masks if m != -100], skip_special_tokens=False)
    assert trained == "".join(reply + "<|im_end|>" for reply in full.replies)
    assert "Your cards" not in trained and "dealer" not in trained


def test_process_writes_token_exact_groups(scripted, tmp_path, tiny_model_dir):
    # Every other episode answers with a move blackjack does not have (penalty -5), the rest stick.
    respond = episode_responder([["I fold."], [take_action("stick")]])
    args = ["--env.group_size", "4", "--env.total_steps", "2", "--env.max_tokens_per_turn", "64",
            "--env.max_token_length", "4096", "--env.invalid_action_penalty", "-5"]  # fmt: skip
    requests = scripted.command(BlackjackEnv, "process", args, respond, server_type=None)
    # token-level route through ManagedServer (vllm is config_init's type)
    assert {r["path"] for r in requests} == {"/generate"}
    groups = read_jsonl(tmp_path / "data" / "blackjack.jsonl")
    assert len(groups) == 2
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    for group in groups:
        assert sorted(group["scores"])[:2] == [-5.0, -5.0] and all(
            s in (-1, 0, 1) for s in sorted(group["scores"])[2:]
        )
        for tokens, masks, logprobs, messages in zip(
            group["tokens"], group["masks"], group["inference_logprobs"], group["messages"], strict=True
        ):
            assert len(tokens) == len(masks) == len(logprobs)
            replies = [m["content"] for m in messages if m["role"] == "assistant"]
            trained = tokenizer.decode([m for m in masks if m != -100], skip_special_tokens=False)
            assert trained == "".join(r + "<|im_end|>" for r in replies)
            assert messages[1]["role"] == "user" and "Your cards" in messages[1]["content"]
    assert (tmp_path / "data" / "blackjack.html").exists()


def test_evaluate_reports_the_win_rate(scripted):
    evaluation = scripted.evaluation(
        BlackjackEnv,
        ["--env.eval_episodes", "6", "--env.max_tokens_per_turn", "64"],
        episode_responder([[take_action("stick")]]),
        server_type=None,
    )
    results, samples = evaluation.metrics, evaluation.samples
    assert len(samples) == 6 and all(s["turns"] == 1 and s["moves"] == ["stick"] for s in samples)
    assert {s["seed"] for s in samples} == set(range(1_000_000, 1_000_006))
    wins = sum(s["score"] > 0 for s in samples)
    assert results["eval/percent_correct"] == pytest.approx(wins / 6) == pytest.approx(results["eval/won"])
    assert results["eval/mean_score"] == pytest.approx(sum(s["score"] for s in samples) / 6)
    assert results["eval/invalid_action"] == 0.0


def test_env_name_picks_the_gymnasium_environment_and_max_episode_turns_the_turn_limit():
    if "BlackjackVariant-v0" not in gym.registry:
        gym.register("BlackjackVariant-v0", entry_point="gymnasium.envs.toy_text.blackjack:BlackjackEnv")
    session = BlackjackSession(BlackjackEnvConfig(env_name="BlackjackVariant-v0"), seed=3)
    assert session.env.spec.id == "BlackjackVariant-v0"
    assert BlackjackSession(BlackjackEnvConfig(), seed=3).env.spec.id == "Blackjack-v1"
    with pytest.raises(gym.error.Error):
        BlackjackSession(BlackjackEnvConfig(env_name="NoSuchGame-v0"), seed=3)
    assert BlackjackEnvConfig(max_episode_turns=3).max_turns == 3  # 0.4.0's name of the turn limit
