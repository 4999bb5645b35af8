"""Xitter: reading one action, the engagement reward and its hacks, scenario rows, ``process`` and ``evaluate``."""

from __future__ import annotations

import pytest

from atroposlib.envs.cli import parse_command
from environments.community.xitter_env.actions import Action, parse_action
from environments.community.xitter_env.feed import action_reward, mentions
from environments.community.xitter_env.xitter_env import XitterEnv, XitterEnvConfig
from tests.environments.community.community_runs import bad_rows_error, evaluate_local, process_local
from tests.helpers.cli_runs import FIXTURES
from tests.helpers.single_turn_runs import check_group, offline_env

SAMPLE = FIXTURES / "community" / "xitter_env" / "scenarios_sample.jsonl"


@pytest.mark.parametrize(
    ("reply", "action"),
    [
        ("POST Hello Xitter! #first", Action("post", text="Hello Xitter! #first")),
        ('"like post1"', Action("like", post_id="post1")),
        ("<think>which post?</think>\nCOMMENT post2 Good luck!", Action("comment", "post2", "Good luck!")),
        ("DO_NOTHING", Action("do_nothing")),
    ],
)
def test_actions_read(reply, action):
    assert parse_action(reply) == action


@pytest.mark.parametrize(
    "reply",
    ["", "POST", "LIKE", "COMMENT post2", "I will LIKE post1", "POST hi\nLIKE post1", "<think>LIKE post1</think>",
     "<think>LIKE post1", "SHARE post1"],
)  # fmt: skip
def test_no_action(reply):
    assert parse_action(reply) is None


def test_topics_by_words_or_hashtag():
    assert mentions("Loving #SpaceExploration tonight", "space exploration")
    assert mentions("space-exploration!", "Space Exploration") and not mentions(
        "spaces exploring", "space exploration"
    )


@pytest.fixture
async def env(tiny_model_dir):
    env = offline_env(XitterEnv, tiny_model_dir, dataset_path=str(SAMPLE), eval_dataset_path=str(SAMPLE))
    await env.setup()
    return env


@pytest.mark.parametrize(
    ("reply", "reward"),
    [
        ("POST Watching the launch tonight, space exploration never gets old", 0.3),  # trend + one like
        ("POST #SpaceExploration shots tonight", 0.3),
        (
            "POST Space exploration via my astronomy club @agent_delta @agent_theta",
            1.4,
        ),  # 2 likes, 2 comments
        ("POST Sunday pancakes", 0.0),
        ("LIKE post1", 0.05),
        ("COMMENT post2 Good luck at the hackathon, ship something weird", 0.1),
        ("DO_NOTHING", 0.0),
    ],
)
async def test_rewards(env, reply, reward):
    assert action_reward(parse_action(reply), env.test[0], env.weights) == pytest.approx(reward)


@pytest.mark.parametrize(
    "reply",
    [
        "POST #a #b #c #d hello",  # hashtag stuffing
        "POST AI in Art, climate solutions, space exploration and music all day",  # topic stuffing
        "POST Excited about the upcoming Atropos hackathon!",  # a feed post repeated
        "POST #AIinArt #ClimateSolutions",  # only the trends
        "POST " + "space exploration " * 10,  # over 140 characters
        "LIKE post3",  # its own post
        "LIKE post99",
        "COMMENT post2 Excited about the upcoming Atropos hackathon!",
        "<think>LIKE post1</think>",
        "POST hi\nLIKE post1",
    ],
)
async def test_hacks_and_malformed_are_penalised(env, reply):
    assert action_reward(parse_action(reply), env.test[0], env.weights) == -0.5


async def test_rows_defaults_and_original_keys(env, tiny_model_dir, tmp_path):
    assert [s.id for s in env.test] == ["s1", "s2", "s3", "s4"]
    assert env.test[1].trending_topics == ("AI in Art", "Climate Solutions", "Space Exploration")
    system = env.prompt_messages(env.test[0])[0]["content"]
    assert "[post1] @agent_alpha: Just enjoyed a great virtual concert! #metaverse (10 likes)" in system
    assert "@agent_delta: space exploration, astronomy" in system and "agent_alpha liked your post" in system
    shipped = offline_env(XitterEnv, tiny_model_dir)
    await shipped.setup()
    assert len(shipped.test) == 3 and len(shipped.train) == 12
    config = XitterEnvConfig(num_agents=2, action_cost=-0.01, track_individual_agent_scores=True)
    assert config.like_reward_weight == 0.1 and config.invalid_action_penalty == -0.5
    await bad_rows_error(
        XitterEnv, tiny_model_dir, tmp_path, [{"agent_id": "a"}], "row 0: missing field 'feed'"
    )
    await bad_rows_error(
        XitterEnv, tiny_model_dir, tmp_path, [{"agent_id": "a", "feed": [{"id": "p"}]}], "row 0: field 'feed'"
    )


def test_an_original_config_file(tmp_path):
    path = tmp_path / "xitter.yaml"
    path.write_text("env:\n  num_agents: 2\n  action_cost: -0.01\n  like_reward_weight: 0.2\n")
    config = parse_command(XitterEnv, ["process", "--config", str(path)]).resolve().env_config
    assert config.like_reward_weight == 0.2 and "num_agents" not in config.model_dump()


def test_scores_log_valid_and_post_rates(env):
    rewards = env.score_replies(["POST Sunday pancakes", "LIKE post1", "nope", "DO_NOTHING"], env.test[0])
    assert rewards == [0.0, 0.05, -0.5, 0.0]
    assert env.share_metrics() == {"train/valid_rate": 0.75, "train/post_rate": 0.25}


def _text(prompt) -> str:
    """The whole prompt: chat messages joined, or the rendered text as it is."""
    return "\n".join(m["content"] for m in prompt) if isinstance(prompt, list) else str(prompt)


def _trend(prompt) -> str:
    return _text(prompt).split("Current trending topics: ", 1)[1].split(",", 1)[0]


def _responder(prompt, index):
    """Posts on the first trending topic for even choices, does nothing for odd ones."""
    return f"POST Thinking about {_trend(prompt)} today" if index % 2 == 0 else "DO_NOTHING"


def test_process_end_to_end(scripted):
    groups = process_local(
        scripted, XitterEnv, SAMPLE, _responder, group_size=2, total_steps=2, max_tokens=64
    )
    assert len(groups) == 2
    for group in groups:
        check_group(group, 2)
        assert min(group["scores"]) == 0.0 and max(group["scores"]) >= 0.2


def test_evaluate_reports_actions(scripted):
    def responder(prompt, index):
        posting = any(
            f"You are '{agent}'" in _text(prompt) for agent in ("agent_gamma", "agent_eta")
        )  # s1, s3
        return _responder(prompt, 0) if posting else "junk"

    metrics = evaluate_local(scripted, XitterEnv, SAMPLE, responder, max_tokens=64).metrics
    # s1: 0.2 (trend, no follower), s3: 0.3 (trend and a like: correct), s2 and s4: -0.5
    assert metrics["eval/mean_score"] == pytest.approx(-0.125) and metrics["eval/percent_correct"] == 0.25
    assert metrics["eval/valid_rate"] == 0.5 and metrics["eval/post_rate"] == 0.5
