"""Multi-turn tool calling on recorded conversations: scenarios, reply checks, replayed tool responses,
the original's reward, masking, ``process`` and ``evaluate`` with the hub unreachable."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from atroposlib.envs.base import APIServerConfig
from atroposlib.envs.data_loading import DatasetError
from atroposlib.testing.scripted_server import launch_scripted_server
from atroposlib.utils.tool_calls import ToolCall
from environments.tool_use_multiturn_server import (
    SYSTEM_PROMPT,
    MultiTurnToolCallingEnv,
    MultiTurnToolUseConfig,
    calls_match,
    narration_ok,
    reply_calls_only,
    tasks_of,
)
from tests.helpers.cli_runs import FIXTURES, read_jsonl
from tests.helpers.multi_turn_runs import episode_responder, tool_call
from tests.helpers.single_turn_runs import offline_env, setup_failure, write_jsonl
from tests.helpers.tool_replay import replayer

SAMPLE = FIXTURES / "tool_use_multiturn_sample.jsonl"
ROWS = read_jsonl(SAMPLE)
WEATHER = [tool_call("get_weather", city="Oslo"), tool_call("convert_temperature", celsius=12)]


async def play(tiny_model_dir, script, question, env_cls=MultiTurnToolCallingEnv, **overrides):
    """Play the evaluation task whose opening asks ``question`` with the scripted replies."""
    values = {
        "tokenizer_name": str(tiny_model_dir),
        "use_wandb": False,
        "dataset_path": str(SAMPLE),
        "eval_dataset_path": str(SAMPLE),
        "max_tokens_per_turn": 256,
        **overrides,
    }
    with launch_scripted_server(respond=episode_responder([script]), tokenizer=tiny_model_dir) as server:
        env = env_cls(
            env_cls.env_config_cls(**values),
            APIServerConfig(base_url=server.base_url, model_name="m", server_type="vllm"),
        )
        await env.setup()
        task = next(t for t in env.test if question in t.messages[1]["content"])
        session, episode = await env.play(task)
    return env, session, episode


def test_conversations_become_tasks_per_scenario():
    multistep = tasks_of(ROWS, "f", "multistep", 2, SYSTEM_PROMPT)
    assert [t.messages[1]["content"][:13] for t in multistep] == ["How warm is i", "Book two seat"]
    oslo = multistep[0]
    assert oslo.expected == (
        (ToolCall("get_weather", {"city": "Oslo"}),),
        (ToolCall("convert_temperature", {"celsius": 12}),),
    )
    assert oslo.between[0][0]["role"] == "tool" and '"temperature_c": 12' in oslo.between[0][0]["content"]
    assert oslo.messages[0]["content"].startswith(SYSTEM_PROMPT) and "<tools>" in oslo.messages[0]["content"]
    assert len(tasks_of(ROWS, "f", "multistep", 1, SYSTEM_PROMPT)[0].expected) == 1  # the cap
    (stocks,) = tasks_of(ROWS, "f", "multiturn", 2, SYSTEM_PROMPT)
    assert [len(turn) for turn in stocks.expected] == [1, 0, 1, 0]
    assert [m["role"] for b in stocks.between for m in b] == ["tool", "user", "tool"]
    assert stocks.between[1][0]["content"] == "And Microsoft?"
    (pizza,) = tasks_of(ROWS, "f", "relevance", 2, SYSTEM_PROMPT)
    assert pizza.expected == ((),) and "apologise" in pizza.messages[0]["content"]
    assert len(tasks_of(ROWS, "f", "single", 2, SYSTEM_PROMPT)) == 3
    narrated = tasks_of(ROWS, "f", "multistep", 2, SYSTEM_PROMPT, narrate=True)[0]
    assert [len(turn) for turn in narrated.expected] == [1, 1, 0] and len(narrated.between) == 2
    assert '"fahrenheit": 53.6' in narrated.between[1][0]["content"]
    assert narrated.between[1][0]["content"].endswith("without calling a tool.")
    (single,) = tasks_of(ROWS[:1], "f", "single", 2, SYSTEM_PROMPT, narrate=True)
    assert [len(turn) for turn in single.expected] == [1, 0] and "temperature_c" in single.between[0][0][
        "content"
    ]
    with pytest.raises(DatasetError, match="f: row 0: field 'conversations' must be a list"):
        tasks_of([{"conversations": "hi"}], "f", "single", 2, SYSTEM_PROMPT)
    with pytest.raises(DatasetError, match="no conversation fits the scenario 'multiturn'"):
        tasks_of(ROWS[:1], "f", "multiturn", 2, SYSTEM_PROMPT)


def test_replies_are_checked_strictly_and_calls_compared_by_value():
    expected = (
        ToolCall("book_flight", {"flight_id": "TP840", "seats": 2}),
        ToolCall("get_weather", {"city": "Rome"}),
    )
    right = (
        "<think>both</think>\n"
        + tool_call("get_weather", city="Rome")
        + "\n"
        + tool_call("book_flight", seats=2.0, flight_id="TP840", note="window")
    )
    assert calls_match(reply_calls_only(right), expected)  # order free, 2 = 2.0, extra arguments allowed
    wrong = [
        tool_call("get_weather", city="Rome") + tool_call("book_flight", flight_id="TP840", seats=3),  # value
        tool_call("get_weather", city="Rome"),  # a call short
        tool_call("get_weather", city="Rome") * 2 + tool_call("book_flight", flight_id="TP840", seats=2),
        tool_call("get_weather", city="Rome")
        + tool_call("book_flight", flight_id="TP840"),  # missing argument
    ]
    for reply in wrong:
        assert not calls_match(reply_calls_only(reply), expected), reply
    for malformed in [
        "Sure! " + tool_call("get_weather", city="Rome"),  # text around the calls
        "<tool_call>{'name': 'get_weather', 'arguments': {'city': 'Rome'}}</tool_call>",  # Python literal
        "<think>unclosed " + tool_call("get_weather", city="Rome"),
        '<tool_call>{"name": "get_weather"',
        "",
    ]:
        assert reply_calls_only(malformed) is None, malformed
    assert reply_calls_only(tool_call("get_weather", city="Rome"), require_think=True) is None
    assert narration_ok("<think>ok</think>It is 53.6 F.") and narration_ok("It is 53.6 F.")
    assert not narration_ok("It is 53.6 F.", require_think=True)
    assert not narration_ok("<think>x</think>") and not narration_ok(
        "Done. " + tool_call("get_weather", city="x")
    )
    assert not narration_ok("<tool_response>{}</tool_response>")


async def test_right_calls_are_fed_the_recorded_responses_and_score_with_the_bonus(tiny_model_dir):
    env, session, episode = await play(tiny_model_dir, WEATHER, "How warm")
    assert episode.end_reason == "done" and len(episode.turns) == 2
    assert episode.messages[3]["role"] == "tool" and '"temperature_c": 12' in episode.messages[3]["content"]
    assert env.score(session, episode) == 1.5 and env.episode_correct(session, episode, 1.5)
    assert env.episode_metrics(session, episode) == {
        "call_accuracy": 1.0,
        "all_turns_right": 1.0,
        "mismatch": 0.0,
    }
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    trained = tokenizer.decode([m for m in episode.masks if m != -100], skip_special_tokens=False)
    assert trained == "".join(r + "<|im_end|>" for r in episode.replies)  # the replayed response is masked
    assert "temperature_c" not in trained
    masked = tokenizer.decode([t for t, m in zip(episode.tokens, episode.masks, strict=True) if m == -100])
    assert '"temperature_c": 12' in masked


@pytest.mark.parametrize(
    ("second", "score"),
    [
        (tool_call("convert_temperature", celsius=13), 0.5 - 0.2),  # wrong value
        ("It is 54 F.", 0.5 - 0.2),  # no call where one was recorded
        ("", 0.5 - 0.2),  # empty
        ("<tool_call>{'name': 'convert_temperature'}</tool_call>", 0.5 - 0.2),  # malformed
    ],
)
async def test_a_mismatching_turn_ends_the_episode_with_the_penalty(tiny_model_dir, second, score):
    env, session, episode = await play(tiny_model_dir, [WEATHER[0], second], "How warm")
    assert len(episode.turns) == 2 and session.mismatch
    assert env.score(session, episode) == pytest.approx(score)


async def test_a_narration_turn_after_the_last_call(tiny_model_dir):
    script = [*WEATHER, "It is 53.6 F and cloudy in Oslo."]
    env, session, episode = await play(tiny_model_dir, script, "How warm", generate_all_gpt_turns=True)
    assert len(episode.turns) == 3 and session.finished and env.score(session, episode) == 1.5
    assert '"fahrenheit": 53.6' in episode.messages[5]["content"]  # the last call's recorded response
    env, session, episode = await play(tiny_model_dir, WEATHER, "How warm", generate_all_gpt_turns=True)
    assert len(episode.turns) == 3 and not session.finished  # a call where a summary was due ends it
    assert (
        env.score(session, episode) == 1.5 and env.episode_metrics(session, episode)["all_turns_right"] == 0.0
    )


async def test_multiturn_and_relevance_scenarios(tiny_model_dir):
    script = [
        tool_call("get_stock_price", symbol="AAPL"),
        "Apple trades at 189.50.",
        tool_call("get_stock_price", symbol="MSFT"),
        "Microsoft trades at 411.20.",
    ]
    env, session, episode = await play(tiny_model_dir, script, "Apple", scenario_category="multiturn")
    roles = [m["role"] for m in episode.messages]
    assert roles == [
        "system",
        "user",
        "assistant",
        "tool",
        "assistant",
        "user",
        "assistant",
        "tool",
        "assistant",
    ]
    assert env.score(session, episode) == 1.5
    env, session, episode = await play(
        tiny_model_dir, ["Sorry, I cannot order food. Could you provide another request?"], "pizza",
        scenario_category="relevance",
    )  # fmt: skip
    assert env.score(session, episode) == pytest.approx(1.2)
    env, session, episode = await play(
        tiny_model_dir, [tool_call("get_weather", city="Napoli")], "pizza", scenario_category="relevance"
    )
    assert env.score(session, episode) == pytest.approx(-0.2)


async def test_the_hub_set_is_the_default(tiny_model_dir, hub_offline, tmp_path):
    env = offline_env(MultiTurnToolCallingEnv, tiny_model_dir)
    with pytest.raises(
        DatasetError, match=r"interstellarninja/toolace_hermes_sequential_tool_use: cannot load"
    ):
        await env.setup()
    env = offline_env(
        MultiTurnToolCallingEnv, tiny_model_dir, dataset_path=write_jsonl(tmp_path / "x.jsonl", [{}])
    )
    await setup_failure(env, r"x.jsonl: row 0: missing field 'conversations'")
    assert MultiTurnToolUseConfig().scenario_category == "multistep"


def test_process_writes_token_exact_groups(scripted, tiny_model_dir):
    args = ["--env.dataset_path", SAMPLE, "--env.group_size", "4", "--env.total_steps", "2",
            "--env.max_tokens_per_turn", "256"]  # fmt: skip
    groups = scripted.process(MultiTurnToolCallingEnv, args, replayer(ROWS[:2]))
    assert len(groups) == 2
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    for group in groups:
        assert sorted(group["scores"]) == pytest.approx([-0.2, -0.2, 1.5, 1.5])
        for masks, messages in zip(group["masks"], group["messages"], strict=True):
            replies = [m["content"] for m in messages if m["role"] == "assistant"]
            trained = tokenizer.decode([m for m in masks if m != -100], skip_special_tokens=False)
            assert trained == "".join(r + "<|im_end|>" for r in replies)


def test_evaluate_reports_exact_metrics(scripted):
    args = [
        "--env.dataset_path",
        SAMPLE,
        "--env.eval_dataset_path",
        SAMPLE,
        "--env.max_tokens_per_turn",
        "256",
    ]
    metrics, samples, _ = scripted.evaluate(MultiTurnToolCallingEnv, args, replayer(ROWS[:2]))
    # two evaluation tasks, in order: episode 0 replays right (1.5), episode 1 misses its first call (-0.2)
    assert len(samples) == 2 and metrics["eval/percent_correct"] == 0.5
    assert metrics["eval/mean_score"] == pytest.approx(0.65) and metrics["eval/call_accuracy"] == 0.5
    assert metrics["eval/mean_turns"] == 1.5 and metrics["eval/mismatch"] == 0.5
