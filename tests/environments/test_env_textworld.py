"""TextWorld: games generated offline and cached, commands, winning, invalid moves, masking, ``process``."""

from __future__ import annotations

import asyncio

import pytest
import textworld
from transformers import AutoTokenizer

from atroposlib.envs.base import APIServerConfig
from atroposlib.testing.scripted_server import launch_scripted_server
from environments.game_environments.textworld_env import (
    TextWorldEnv,
    TextWorldEnvConfig,
    clean_feedback,
)
from tests.helpers.multi_turn_runs import episode_responder, take_action


@pytest.fixture(scope="module")
def games_dir(tmp_path_factory):
    return tmp_path_factory.mktemp("textworld_games")


def _env(tiny_model_dir, games_dir, base_url="http://127.0.0.1:9/v1", **overrides) -> TextWorldEnv:
    values = {
        "tokenizer_name": str(tiny_model_dir),
        "use_wandb": False,
        "group_size": 2,
        "games_dir": str(games_dir),
        "max_tokens_per_turn": 64,
        **overrides,
    }
    server = APIServerConfig(base_url=base_url, model_name="m", server_type="vllm")
    return TextWorldEnv(TextWorldEnvConfig(**values), server)


def _walkthrough(game_file) -> list[str]:
    env = textworld.start(str(game_file), request_infos=textworld.EnvInfos(policy_commands=True))
    try:
        return list(env.reset().policy_commands)
    finally:
        env.close()


def test_clean_feedback_drops_the_prompt_line():
    assert clean_feedback("\nYou open the box.\n\n>    -= Room =-0/2") == "You open the box."
    assert clean_feedback("") == ""


async def test_games_are_generated_once_per_seed_and_cached(tiny_model_dir, games_dir):
    env = _env(tiny_model_dir, games_dir)
    built = []
    generate = env._generate
    env._generate = lambda path, seed: (built.append(seed), generate(path, seed))
    paths = await asyncio.gather(env.ensure_game(1), env.ensure_game(1))
    assert paths[0] == paths[1] == games_dir / "tw-r3-o5-q3-s1.z8" and built == [1]
    assert paths[0].exists() and paths[0].with_suffix(".json").exists()
    assert not list(games_dir.glob("*partial*"))
    again = _env(tiny_model_dir, games_dir)
    assert await again.ensure_game(1) == paths[0]  # a new env reuses the cached file
    assert _env(tiny_model_dir, games_dir, nb_rooms=2).game_file(1).name == "tw-r2-o5-q3-s1.z8"


async def test_following_the_walkthrough_wins_with_a_return_of_one(tiny_model_dir, games_dir):
    env = _env(tiny_model_dir, games_dir)
    session = await env.make_session(1)
    opening = session.messages[1]["content"]
    assert "Commands you can use now:" in opening and "-=" in opening  # objective, room, commands
    assert "take_action" in session.messages[0]["content"] and '"command"' in session.messages[0]["content"]
    rewards = []
    for turn, command in enumerate(_walkthrough(await env.ensure_game(1))):
        feedback = await session.step(take_action(command, "command"), turn)
        rewards.append(feedback.reward)
    session.close()
    assert feedback.done and session.won and sum(rewards) == pytest.approx(1.0)
    assert session.metrics()["points_fraction"] == 1.0


async def test_unknown_commands_are_moves_but_a_reply_without_one_is_invalid(tiny_model_dir, games_dir):
    env = _env(tiny_model_dir, games_dir, invalid_action_penalty=-0.5)
    session = await env.make_session(1)
    feedback = await session.step(take_action("dance wildly", "command"), 0)
    assert not feedback.done and feedback.reward == 0.0 and "not a verb" in feedback.messages[0]["content"]
    feedback = await session.step("I would rather not play.", 1)
    assert feedback.done and feedback.reward == -0.5 and session.invalid_action
    session.close()
    session = await env.make_session(1)
    assert (await session.step(take_action("   ", "command"), 0)).done
    session.close()
    tag = await _env(tiny_model_dir, games_dir, action_format="tag").make_session(1)
    assert not (await tag.step("<action>look</action>", 0)).done
    tag.close()


async def test_episodes_end_early_when_won_and_train_only_the_commands(tiny_model_dir, games_dir):
    env = _env(tiny_model_dir, games_dir, max_turns=12)
    commands = _walkthrough(await env.ensure_game(1))
    respond = episode_responder([[take_action(c, "command") for c in commands]])
    with launch_scripted_server(respond=respond, tokenizer=tiny_model_dir) as server:
        env = _env(
            tiny_model_dir, games_dir, server.base_url, max_turns=len(commands) + 5, max_tokens_per_turn=256
        )
        session, episode = await env.play({"seed": 1})
    assert episode.end_reason == "done" and len(episode.turns) == len(commands) and session.won
    assert env.score(session, episode) == pytest.approx(1.0)
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    trained = tokenizer.decode([m for m in episode.masks if m != -100], skip_special_tokens=False)
    assert trained == "".join(r + "<|im_end|>" for r in episode.replies)
    assert "Commands you can use" not in trained


def test_process_writes_groups(scripted, games_dir):
    respond = episode_responder([["Let me think about it."], [take_action("look", "command")]])
    args = ["--env.group_size", "4", "--env.total_steps", "1", "--env.seed", "1",
            "--env.max_turns", "2", "--env.max_tokens_per_turn", "64", "--env.games_dir", games_dir]  # fmt: skip
    groups = scripted.process(TextWorldEnv, args, respond)
    assert len(groups) == 1
    assert sorted(groups[0]["scores"]) == [-1.0, -1.0, 0.0, 0.0]
    assert all("Commands you can use now" in m[1]["content"] for m in groups[0]["messages"])


async def test_quest_and_grammar_settings_shape_the_generated_game(tiny_model_dir, games_dir):
    env = _env(
        tiny_model_dir,
        games_dir,
        quest_min_length=1,
        quest_max_length=2,
        quest_max_depth=2,
        grammar_include_adj=True,
    )
    options = env.game_options(4)
    chaining = options.chaining
    assert (chaining.min_length, chaining.max_length, chaining.max_depth) == (1, 2, 2)
    assert options.grammar.include_adj and options.grammar.theme == "house"
    default = _env(tiny_model_dir, games_dir).game_options(4)
    assert (default.chaining.min_length, default.chaining.max_length, default.grammar.include_adj) == (
        3,
        3,
        False,
    )
    assert env.game_file(4).name == "tw-r3-o5-q3-c1_2_2-ghouse_adj-s4.z8"
    quest = len(_walkthrough(await env.ensure_game(4)))
    assert 1 <= quest <= 2  # the quest's length within the configured bounds


async def test_game_file_path_plays_one_game_in_every_episode(tiny_model_dir, games_dir):
    game = await _env(tiny_model_dir, games_dir).ensure_game(1)
    env = _env(tiny_model_dir, games_dir, game_file_path=str(game), max_steps=7)
    assert env.config.max_turns == 7  # 0.4.0's name of the turn limit
    assert await env.ensure_game(5) == await env.ensure_game(6) == game
    session = await env.make_session(5)
    generated = await _env(tiny_model_dir, games_dir).make_session(1)
    assert session.messages == generated.messages
    session.close()
    generated.close()
