"""Math with tools (python, calculator): tools over several turns, failures reported to the model, masking, MT-GRPO, ``process``."""

from __future__ import annotations

import json
import re

import pytest
from transformers import AutoTokenizer

from atroposlib.envs.base import APIServerConfig
from atroposlib.envs.tools import CalculatorTool, ToolRegistry
from atroposlib.group import check_group
from atroposlib.sandbox import SandboxError
from atroposlib.testing.scripted_server import launch_scripted_server
from environments.tool_use_python_math_server import (
    PythonMathToolUseConfig,
    PythonMathToolUseEnv,
    ToolUseItem,
    answer_is_correct,
    gold_answer,
)
from tests.helpers.cli_runs import FIXTURES, read_jsonl
from tests.helpers.multi_turn_runs import episode_responder, tool_call, tool_responses

SAMPLE = FIXTURES / "tool_use_sample.jsonl"
ITEM = ToolUseItem("A box holds 12 pencils. How many pencils are in 17 boxes?", "204")


def _env(tiny_model_dir, base_url="http://127.0.0.1:9/v1", **overrides) -> PythonMathToolUseEnv:
    values = {
        "tokenizer_name": str(tiny_model_dir),
        "use_wandb": False,
        "dataset_path": str(SAMPLE),
        "group_size": 2,
        "max_tokens_per_turn": 256,
        "python_wall_seconds": 2.0,
        **overrides,
    }
    server = APIServerConfig(base_url=base_url, model_name="m", server_type="vllm")
    return PythonMathToolUseEnv(PythonMathToolUseConfig(**values), server)


async def _play(tiny_model_dir, script, **overrides):
    with launch_scripted_server(respond=episode_responder([script]), tokenizer=tiny_model_dir) as server:
        env = _env(tiny_model_dir, server.base_url, **overrides)
        await env.setup()
        session, episode = await env.play(ITEM)
    return env, session, episode


def test_gold_answers_and_grading():
    assert gold_answer("48/2 = 24\n#### 1,072") == "1072" and gold_answer(" 3.5 ") == "3.5"
    assert answer_is_correct("<think>so</think>The answer is \\boxed{204}.", "204")
    assert answer_is_correct("\\boxed{204.0}", "204") and answer_is_correct("\\boxed{\\frac{1}{2}}", "0.5")
    assert answer_is_correct("\\boxed{1,048,576}", "1048576")
    assert not answer_is_correct("\\boxed{205}", "204") and not answer_is_correct("204", "204")
    assert not answer_is_correct("\\boxed{204} or \\boxed{205}", "204")


async def test_tools_run_over_turns_until_a_final_answer(tiny_model_dir):
    script = [
        tool_call("calculator", expression="17 * 12"),
        tool_call("python", code="print(17 * 12)") + tool_call("calculator", expression="204 / 1"),
        "The total is \\boxed{204}.",
    ]
    env, session, episode = await _play(tiny_model_dir, script)
    assert episode.end_reason == "done" and len(episode.turns) == 3
    assert tool_responses(episode) == [
        {"name": "calculator", "content": "204"},
        {"name": "python", "content": "204\n"},  # run in the sandbox
        {"name": "calculator", "content": "204.0"},
    ]
    assert env.score(session, episode) == 1.0 and env.episode_correct(session, episode, 1.0)
    assert env.episode_metrics(session, episode) == {
        "correct": 1.0,
        "tool_calls": 3.0,
        "tool_errors": 0.0,
        "answered": 1.0,
    }
    system = episode.messages[0]["content"]
    assert '"name": "python"' in system and '"name": "calculator"' in system and "<tools>" in system
    # Only the model's replies are trained: the prompt and the tool responses are masked.
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    trained = tokenizer.decode([m for m in episode.masks if m != -100], skip_special_tokens=False)
    assert trained == "".join(r + "<|im_end|>" for r in episode.replies)
    assert "tool_response" not in trained and "pencils" not in trained
    masked = tokenizer.decode([t for t, m in zip(episode.tokens, episode.masks, strict=True) if m == -100])
    assert masked.count("</tool_response>") == 3


async def test_a_sandbox_time_out_and_a_crashing_program_are_reported_and_the_episode_goes_on(tiny_model_dir):
    script = [
        tool_call("python", code="while True:\n    pass"),
        tool_call("python", code="print('start')\nraise ValueError('bad input')"),
        "\\boxed{204}",
    ]
    env, session, episode = await _play(tiny_model_dir, script, python_wall_seconds=1.0)
    timeout, crash = tool_responses(episode)
    assert "time limit" in timeout["error"]
    assert crash["content"].startswith("start\n[stderr]\n") and "ValueError: bad input" in crash["content"]
    assert "[exit code 1" in crash["content"]
    assert episode.end_reason == "done" and env.score(session, episode) == 1.0 and session.errors == 1


async def test_malformed_and_unknown_calls_get_errors_and_the_episode_goes_on(tiny_model_dir):
    script = [
        '<tool_call>{"name": "calculator", "arguments": {"expression": "1+1"}</tool_call>',
        tool_call("web_search", query="pencils"),
        tool_call("calculator"),
        tool_call("calculator", expression="open('/etc/passwd')"),
        "<tool_call>" + json.dumps({"name": "calculator", "arguments": {"expression": "1"}}),
        "\\boxed{204}",
    ]
    env, session, episode = await _play(tiny_model_dir, script, max_turns=8)
    errors = [body["error"] for body in tool_responses(episode)]
    assert errors[0].startswith("malformed tool call: not valid JSON")
    assert errors[1] == "unknown tool 'web_search'; tools: calculator, python"
    assert errors[2] == "invalid arguments for 'calculator': 'expression' is a required property"
    assert "Call is not allowed" in errors[3]
    assert "needs its </tool_call>" in errors[4]
    assert episode.end_reason == "done" and len(episode.turns) == 6 and env.score(session, episode) == 1.0
    assert env.episode_metrics(session, episode)["tool_errors"] == 5.0


class BrokenTool:
    name = "lookup"
    description = "Look something up."
    parameters = {"type": "object", "properties": {"key": {"type": "string"}}, "required": ["key"]}

    async def call(self, arguments):
        raise ConnectionError("backend unreachable")


async def test_a_tool_that_raises_and_a_user_registered_tool(tiny_model_dir):
    class WithLookup(PythonMathToolUseEnv):
        tool_registry = ToolRegistry()

    WithLookup.tool_registry.register("lookup", BrokenTool)
    WithLookup.tool_registry.register("calculator", CalculatorTool)
    respond = episode_responder([[tool_call("lookup", key="pencils"), "I could not find it: \\boxed{0}"]])
    with launch_scripted_server(respond=respond, tokenizer=tiny_model_dir) as server:
        config = PythonMathToolUseConfig(
            tokenizer_name=str(tiny_model_dir),
            use_wandb=False,
            dataset_path=str(SAMPLE),
            tools=["lookup", "calculator"],
            max_tokens_per_turn=256,
        )
        env = WithLookup(
            config, APIServerConfig(base_url=server.base_url, model_name="m", server_type="vllm")
        )
        await env.setup()
        session, episode = await env.play(ITEM)
    assert set(env.tools) == {"lookup", "calculator"} and '"name": "lookup"' in episode.messages[0]["content"]
    assert tool_responses(episode) == [
        {"name": "lookup", "error": "'lookup' failed: ConnectionError: backend unreachable"}
    ]
    assert episode.end_reason == "done" and env.score(session, episode) == 0.0


async def test_the_turn_limit_ends_an_episode_that_keeps_calling(tiny_model_dir):
    env, session, episode = await _play(
        tiny_model_dir, [tool_call("calculator", expression="1+1")], max_turns=3
    )
    assert episode.end_reason == "turn_limit" and len(episode.turns) == 3 and session.final_reply is None
    assert env.score(session, episode) == 0.0 and not env.episode_correct(session, episode, 0.0)


async def test_per_turn_rewards_and_turn_level_advantages(tiny_model_dir):
    good = [tool_call("calculator", expression="17*12"), "\\boxed{204}"]
    bad = [tool_call("calculator", expression="17 x 12"), "\\boxed{200}"]
    with launch_scripted_server(respond=episode_responder([good, bad]), tokenizer=tiny_model_dir) as server:
        env = _env(
            tiny_model_dir, server.base_url, per_turn_rewards=True, turn_level_advantages=True, group_size=2
        )
        await env.setup()
        group, _ = await env.collect_trajectories(ITEM)
    assert check_group(group) == []  # what the trajectory API accepts
    by_score = sorted(
        zip(group["scores"], group["advantages"], group["masks"], strict=True), key=lambda x: x[0]
    )
    (bad_score, bad_adv, bad_masks), (good_score, good_adv, good_masks) = by_score
    assert good_score == pytest.approx(1.1) and bad_score == pytest.approx(-0.2)
    for adv, masks in ((good_adv, good_masks), (bad_adv, bad_masks)):
        assert len(adv) == len(masks)
        assert all(a == 0.0 for a, m in zip(adv, masks, strict=True) if m == -100)
    # Turn 0: +1 (turn reward) +1 (outcome) for the good episode; turn 1: the outcome alone.
    good_turns = sorted({a for a, m in zip(good_adv, good_masks, strict=True) if m != -100}, reverse=True)
    bad_turns = sorted({a for a, m in zip(bad_adv, bad_masks, strict=True) if m != -100})
    assert good_turns == [2.0, 1.0] and bad_turns == [-2.0, -1.0]


async def test_the_environment_does_not_start_without_its_sandbox(tiny_model_dir, monkeypatch):
    from atroposlib.sandbox import Sandbox

    def refuse(self):
        raise SandboxError("bwrap not found on PATH")

    monkeypatch.setattr(Sandbox, "check", refuse)
    env = _env(tiny_model_dir)
    with pytest.raises(SandboxError, match="bwrap not found"):
        await env.setup()
    calculator_only = _env(tiny_model_dir, tools=["calculator"])
    await calculator_only.setup()
    assert list(calculator_only.tools) == ["calculator"]


def test_process_writes_token_exact_groups(scripted, tiny_model_dir):
    golds = {row["question"]: gold_answer(row["answer"]) for row in read_jsonl(SAMPLE)}

    def respond(prompt, index):  # even episodes compute with python then answer right; odd ones answer 0
        text = str(prompt)
        question = next(q for q in golds if q in text)
        marker = re.search(r"<think>episode (\d+)</think>", text)
        episode = int(marker.group(1)) if marker else next(counter)
        turn = text.count("<|im_start|>assistant") - 1
        if episode % 2:
            return f"<think>episode {episode}</think>\\boxed{{0}}"
        if turn == 0:
            return f"<think>episode {episode}</think>" + tool_call("python", code="print('computing')")
        return f"<think>episode {episode}</think>\\boxed{{{golds[question]}}}"

    import itertools

    counter = itertools.count()
    args = ["--env.dataset_path", SAMPLE, "--env.group_size", "4", "--env.total_steps", "2",
            "--env.max_tokens_per_turn", "256"]  # fmt: skip
    groups = scripted.process(PythonMathToolUseEnv, args, respond)
    assert len(groups) == 2
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    for group in groups:
        assert sorted(group["scores"]) == [0.0, 0.0, 1.0, 1.0]
        for masks, messages, score in zip(group["masks"], group["messages"], group["scores"], strict=True):
            replies = [m["content"] for m in messages if m["role"] == "assistant"]
            assert len(replies) == (2 if score == 1.0 else 1)
            trained = tokenizer.decode([m for m in masks if m != -100], skip_special_tokens=False)
            assert trained == "".join(r + "<|im_end|>" for r in replies)
            if score == 1.0:
                assert '"content": "computing\\n"' in messages[3]["content"] and messages[3]["role"] == "tool"


def test_evaluate_reports_accuracy_and_tool_use(scripted):
    golds = {row["question"]: gold_answer(row["answer"]) for row in read_jsonl(SAMPLE)}

    def respond(prompt, index):
        text = str(prompt)
        question = next(q for q in golds if q in text)
        if text.count("<|im_start|>assistant") == 1:
            return tool_call("calculator", expression="2 + 2")
        return f"\\boxed{{{golds[question]}}}"

    args = ["--env.dataset_path", SAMPLE, "--env.tools", '["calculator"]', "--env.max_tokens_per_turn", "256"]
    metrics, samples, _ = scripted.evaluate(PythonMathToolUseEnv, args, respond)
    assert metrics["eval/percent_correct"] == 1.0 and metrics["eval/tool_calls"] == 1.0
    assert metrics["eval/mean_turns"] == 2.0 and metrics["eval/tool_errors"] == 0.0
    assert len(samples) == 6
