"""Interleaved thinking: tool calls inside the reasoning run and their results are written into the same
turn, masked; scoring, limits, ``process`` and ``evaluate``."""

from __future__ import annotations

import itertools
import json
import re

import pytest
from transformers import AutoTokenizer

from atroposlib.envs.base import APIServerConfig
from atroposlib.testing.scripted_server import launch_scripted_server
from environments.tool_use_interleaved_thinking import InterleavedThinkingConfig, InterleavedThinkingEnv
from environments.tool_use_python_math_server import ToolUseItem, answer_is_correct
from tests.helpers.cli_runs import FIXTURES, read_jsonl
from tests.helpers.multi_turn_runs import tool_call

SAMPLE = FIXTURES / "tool_use_sample.jsonl"
ITEM = ToolUseItem("A box holds 12 pencils. How many pencils are in 17 boxes?", "204")
RIGHT = [
    "<think>I need 17 boxes of 12. " + tool_call("python", code="print(17 * 12)") + " (not generated)",
    " Let me double-check. " + tool_call("calculator", expression="17*12"),
    " Both say 204.</think>There are \\boxed{204} pencils.",
]


def segments_responder(scripts):
    """Episode k (in order of arrival) answers its n-th continuation with ``scripts[k][n]``; the episode is
    recognised by the ``<think>episode k`` its first piece opens with."""
    counter = itertools.count()

    def respond(prompt, index):
        text = str(prompt)
        found = re.search(r"<think>episode (\d+)", text)
        episode = int(found.group(1)) if found else next(counter)
        script = scripts[episode % len(scripts)]
        piece = script[min(text.count("</tool_response>"), len(script) - 1)]
        return piece.replace("<think>", f"<think>episode {episode} ", 1)

    return respond


async def _play(tiny_model_dir, script, server_type="vllm", **overrides):
    values = {"tokenizer_name": str(tiny_model_dir), "use_wandb": False, "dataset_path": str(SAMPLE),
              "max_tokens_per_turn": 512, "python_wall_seconds": 2.0, **overrides}  # fmt: skip
    with launch_scripted_server(respond=segments_responder([script]), tokenizer=tiny_model_dir) as server:
        env = InterleavedThinkingEnv(
            InterleavedThinkingConfig(**values),
            APIServerConfig(base_url=server.base_url, model_name="m", server_type=server_type),
        )
        env.server.tokens_from_messages = server_type == "openai"  # as process and evaluate set it
        await env.setup()
        session, episode = await env.play(ITEM)
    return env, session, episode


def _responses(reply: str) -> list[dict]:
    return [json.loads(b) for b in re.findall(r"<tool_response>\n(.*?)\n</tool_response>", reply, re.DOTALL)]


def test_the_answer_after_the_reasoning_is_graded():
    reply = (
        "<think>"
        + tool_call("calculator", expression="1")
        + "<tool_response>\n{}\n</tool_response>\\boxed{7}</think>"
    )
    assert answer_is_correct(reply + "So \\boxed{204.0}.", "204")
    assert not answer_is_correct(reply + "So 204.", "204")  # unboxed; the box in the thought does not count
    assert not answer_is_correct(reply + "\\boxed{204} or \\boxed{205}", "204")
    assert not answer_is_correct(reply + "\\boxed{205}", "204") and not answer_is_correct("", "204")


async def test_calls_in_the_thought_run_and_their_results_are_inserted_and_masked(tiny_model_dir):
    env, session, episode = await _play(tiny_model_dir, RIGHT)
    assert episode.end_reason == "done" and len(episode.turns) == 3 and session.calls == 2
    reply = episode.messages[-1]["content"]
    assert _responses(reply) == [
        {"name": "python", "content": "204\n"},
        {"name": "calculator", "content": "204"},
    ]
    assert reply.index("<tool_response>") < reply.index("Let me double-check") < reply.index("</think>")
    assert "(not generated)" not in reply  # generation stopped at the call's closing tag
    assert env.score(session, episode) == 1.0 and env.episode_correct(session, episode, 1.0)
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    trained = tokenizer.decode([m for m in episode.masks if m != -100], skip_special_tokens=False)
    assert trained == "".join(turn.reply for turn in episode.turns) + "<|im_end|>"
    assert "tool_response" not in trained and "</tool_call>" not in trained
    masked = tokenizer.decode([t for t, m in zip(episode.tokens, episode.masks, strict=True) if m == -100])
    assert masked.count("</tool_response>") == 2 and masked.count("</tool_call>\n<tool_response>") == 2


async def test_a_text_only_endpoint_gets_the_same_turn_with_tokens_computed_from_the_text(tiny_model_dir):
    env, session, episode = await _play(tiny_model_dir, RIGHT, server_type="openai")
    assert episode.end_reason == "done" and session.calls == 2 and env.score(session, episode) == 1.0
    assert _responses(episode.messages[-1]["content"])[0] == {"name": "python", "content": "204\n"}
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    trained = tokenizer.decode([m for m in episode.masks if m != -100], skip_special_tokens=False)
    assert trained == "".join(turn.reply for turn in episode.turns) + tokenizer.eos_token
    assert "tool_response" not in trained and episode.logprobs == []
    masked = tokenizer.decode([t for t, m in zip(episode.tokens, episode.masks, strict=True) if m == -100])
    assert masked.count("</tool_call>\n<tool_response>") == 2


async def test_bad_calls_in_the_thought_get_errors_and_the_thought_goes_on(tiny_model_dir):
    script = [
        "<think>" + tool_call("web", q="x"),
        '<tool_call>{"name": "calculator", "arguments": {"expression": "1+"}}</tool_call>',
        tool_call("calculator", expression=17),
        "</think>\\boxed{204}",
    ]
    env, session, episode = await _play(tiny_model_dir, script)
    errors = [r["error"] for r in _responses(episode.messages[-1]["content"])]
    assert errors[0] == "unknown tool 'web'; tools: calculator, python"
    assert errors[1].startswith("invalid expression") and errors[2].startswith(
        "invalid arguments for 'calculator'"
    )
    assert env.score(session, episode) == 1.0 and session.errors == 3


async def test_a_call_after_the_reasoning_is_not_run_and_scores_zero(tiny_model_dir):
    script = ["<think>easy</think>" + tool_call("calculator", expression="17*12"), "\\boxed{204}"]
    env, session, episode = await _play(tiny_model_dir, script)
    assert session.call_after_thinking and session.calls == 0 and len(episode.turns) == 1
    assert env.score(session, episode) == 0.0
    unclosed = ['<think>so <tool_call>{"name": "calculator", "arguments": {"expression": "17*12"}}', "x"]
    env, session, episode = await _play(tiny_model_dir, unclosed)  # the turn ends: the call is not run
    assert session.calls == 0 and len(episode.turns) == 1 and env.score(session, episode) == 0.0


@pytest.mark.parametrize(
    ("overrides", "end"), [({"max_tool_calls": 1}, "turn_limit"), ({"max_tokens_per_turn": 40}, "length")]
)
async def test_the_call_limit_and_the_token_budget_end_the_episode_with_zero(tiny_model_dir, overrides, end):
    env, session, episode = await _play(tiny_model_dir, RIGHT, **overrides)
    assert episode.end_reason == end and env.score(session, episode) == 0.0


def _golden_responder():
    golds = {row["question"]: row["answer"].rsplit("####", 1)[1].strip() for row in read_jsonl(SAMPLE)}
    counter = itertools.count()

    def respond(prompt, index):  # even episodes compute then answer right; odd ones answer 0 at once
        text = str(prompt)
        question = next(q for q in golds if q in text)
        found = re.search(r"<think>episode (\d+)", text)
        episode = int(found.group(1)) if found else next(counter)
        if episode % 2:
            return f"<think>episode {episode}</think>\\boxed{{0}}"
        if "</tool_response>" not in text:
            return f"<think>episode {episode} " + tool_call("calculator", expression="2+2")
        return f" fine</think>\\boxed{{{golds[question].replace(',', '')}}}"

    return respond


def test_process_writes_token_exact_groups(scripted, tiny_model_dir):
    args = ["--env.dataset_path", SAMPLE, "--env.group_size", "4", "--env.total_steps", "2",
            "--env.tools", '["calculator"]', "--env.max_tokens_per_turn", "256"]  # fmt: skip
    groups = scripted.process(InterleavedThinkingEnv, args, _golden_responder())
    assert len(groups) == 2
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    for group in groups:
        assert sorted(group["scores"]) == [0.0, 0.0, 1.0, 1.0]
        for masks, messages, score in zip(group["masks"], group["messages"], group["scores"], strict=True):
            reply = messages[-1]["content"]
            trained = tokenizer.decode([m for m in masks if m != -100], skip_special_tokens=False)
            assert ("<tool_response>" in reply) == (score == 1.0) and "<tool_response>" not in trained


def test_evaluate_reports_exact_metrics(scripted):
    args = ["--env.dataset_path", SAMPLE, "--env.tools", '["calculator"]', "--env.max_tokens_per_turn", "256"]
    metrics, samples, _ = scripted.evaluate(InterleavedThinkingEnv, args, _golden_responder())
    n = len(samples)
    assert n == len(read_jsonl(SAMPLE)) and metrics["eval/percent_correct"] == (n + 1) // 2 / n
    assert metrics["eval/tool_calls"] == (n + 1) // 2 / n and metrics["eval/tool_errors"] == 0.0
