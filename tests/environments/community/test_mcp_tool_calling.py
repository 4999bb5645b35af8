"""The MCP tool-calling environment: the original's defaults and hub split, MCP-style tool rows, the
multiset-of-calls reward both ways, ``process`` and ``evaluate`` against the scripted server."""

from __future__ import annotations

import json
from typing import Any

import datasets
import pytest

from atroposlib.envs.base import EvalHandlingEnum
from atroposlib.utils.tool_calls import ToolCall, expected_tool_calls, reply_matches
from environments.community.mcp_tool_calling.tool_calling_server import SingleToolCallingEnv
from tests.environments.community.community_runs import bad_rows_error, evaluate_local, process_local
from tests.helpers.cli_runs import FIXTURES, read_jsonl
from tests.helpers.single_turn_runs import check_groups, offline_env, prompt_text, setup_failure

SAMPLE = FIXTURES / "community" / "mcp_tool_calling" / "xlam_mcp_sample.jsonl"
ROWS = read_jsonl(SAMPLE)
GOLD = {
    row["conversations"][1]["value"]: expected_tool_calls(row["conversations"][2]["value"]) for row in ROWS
}


def _env(tiny_model_dir, **overrides) -> SingleToolCallingEnv:
    values = {"group_size": 4, "dataset_path": str(SAMPLE), "max_token_length": 1024, "max_tokens": None}
    return offline_env(SingleToolCallingEnv, tiny_model_dir, **{**values, **overrides})


def _calls(calls: list[ToolCall], *, reverse: bool = False) -> str:
    """The calls in Hermes form, optionally in reverse order with their keys reversed and whole numbers as
    floats (all equivalent to the expected answer)."""
    blocks = []
    for call in reversed(calls) if reverse else calls:
        items = reversed(list(call.arguments.items())) if reverse else call.arguments.items()
        arguments = {k: float(v) if reverse and type(v) is int else v for k, v in items}
        blocks.append(
            "<tool_call>" + json.dumps({"arguments": arguments, "name": call.name}) + "</tool_call>"
        )
    return "\n".join(blocks)


def _gold(prompt: Any) -> list[ToolCall]:
    text = prompt_text(prompt)
    return next(calls for question, calls in GOLD.items() if question in text)


def _responder(prompt: Any, index: int) -> str:
    """Even choices: the expected calls in an equivalent form; odd: the calls plus a hedging alternative."""
    calls = _gold(prompt)
    if index % 2 == 0:
        return "<think>The request maps onto the listed tools.</think>\n" + _calls(calls, reverse=True)
    return _calls(calls) + "\n" + _calls([ToolCall(calls[0].name, {})])


def _simple_only(prompt: Any, index: int) -> str:
    calls = _gold(prompt)
    return _calls(calls[:1])


async def _item(env: SingleToolCallingEnv, question_part: str):
    await env.setup()
    return next(item for item in env.train if question_part in item.messages[1]["content"])


# -- configuration and data ------------------------------------------------------------------------------------


def test_the_original_defaults():
    config, server = SingleToolCallingEnv.config_init()
    assert (config.group_size, config.steps_per_eval, config.max_token_length) == (32, 20, 16384)
    assert (config.max_tokens, config.temperature, config.eval_temperature) == (15360, 0.8, 1.0)
    assert config.eval_handling is EvalHandlingEnum.LIMIT_TRAIN and config.eval_limit_ratio == 0.1
    assert config.wandb_name == "toolcall_think" and config.dataset_name == "NousResearch/XLAM-Atropos"
    assert (config.eval_size, config.eval_share) == (None, 0.02)
    assert config.tokenizer_name == "Qwen/Qwen2.5-1.5B-Instruct"
    assert server.model_name == "Qwen/Qwen2.5-1.5B-Instruct" and server.base_url == "http://localhost:9004/v1"


async def test_default_loader_is_the_hub_set(tiny_model_dir, hub_offline):
    await setup_failure(
        _env(tiny_model_dir, dataset_path=None), "NousResearch/XLAM-Atropos: cannot load from the hub"
    )


async def test_the_hub_split_holds_out_two_percent(tiny_model_dir, monkeypatch):
    asked = []

    def load_dataset(name, config=None, split=None, **kwargs):
        asked.append((name, config, split))
        return ROWS * 13

    monkeypatch.setattr(datasets, "load_dataset", load_dataset)
    env = _env(tiny_model_dir, dataset_path=None)
    await env.setup()
    assert asked == [("NousResearch/XLAM-Atropos", "default", "train")]
    assert (len(env.train), len(env.test)) == (101, 3)  # ceil(104 x 0.02) held out
    env = _env(tiny_model_dir, dataset_path=None, eval_size=10)
    await env.setup()
    assert (len(env.train), len(env.test)) == (94, 10)


async def test_local_rows_keep_the_mcp_tools_in_the_prompt(tiny_model_dir):
    env = _env(tiny_model_dir)
    await env.setup()
    assert len(env.train) == len(env.test) == 8 and sum(item.parallel for item in env.test) == 3
    item = await _item(env, "safe search")  # its answer is written as a Python literal
    assert '"name": "brave_web_search"' in item.messages[0]["content"]
    assert item.expected == (
        ToolCall(
            "brave_web_search", {"query": "model context protocol spec", "count": 3, "safesearch": True}
        ),
    )


@pytest.mark.parametrize(
    ("row", "field"),
    [
        ({"messages": []}, "row 0: missing field 'conversations'"),
        ({"conversations": [{"from": "human", "value": "hi"}]}, "row 0: no 'gpt' turn"),
        ({"conversations": [{"from": "human"}]}, r"row 0: conversations\[0\] lacks 'value'"),
    ],
)
async def test_a_bad_row_names_the_file_row_and_field(tiny_model_dir, tmp_path, row, field):
    await bad_rows_error(SingleToolCallingEnv, tiny_model_dir, tmp_path, [row], field)


# -- reward ---------------------------------------------------------------------------------------------------


async def test_equivalent_calls_are_right(tiny_model_dir):
    env = _env(tiny_model_dir)
    item = await _item(env, "Berlin and in Sao Paulo")
    gold = list(item.expected)
    replies = [
        _calls(gold),
        "<think>Two zones, two calls.</think>\n" + _calls(gold, reverse=True),  # order, key order
        "Checking both.\n" + _calls(gold),
    ]
    assert env.score_replies(replies, item)[:3] == [1.0, 1.0, 1.0]


async def test_hedges_hacks_and_malformed_calls_are_wrong(tiny_model_dir):
    env = _env(tiny_model_dir)
    item = await _item(env, "last 5 commits")
    right = _calls(list(item.expected))
    call = '<tool_call>{"name": "git_log", "arguments": %s}</tool_call>'
    wrong = [
        right + "\n" + call % '{"repo_path": "/work/app", "max_count": 10}',  # hedge: two alternatives
        call % '{"repo_path": "/work/app", "max_count": 5, "all": true}',  # an extra argument
        call % '{"repo_path": "/work/app"}',  # a missing argument
        call % '{"repo_path": "/work/app", "max_count": "5"}',  # a number as a string
        "<think>" + right + "</think>I would call git_log.",  # the call only in the reasoning
        "<think>" + right,  # reasoning never closes
        prompt_text(item.messages),  # the prompt echoed back
        right.replace("</tool_call>", ""),  # unclosed tag
        '<tool_call>{"name": "git_log", "arguments": {"repo_path": "/work/app", "max_count": 5}</tool_call>',
        '<tool_call>{"name": "list_directory", "arguments": {"path": "/work/app"}}</tool_call>',  # wrong tool
        "",
    ]
    assert env.score_replies([right, *wrong], item) == [1.0] + [-1.0] * len(wrong)


async def test_an_all_right_group_prefers_short_replies(tiny_model_dir):
    env = _env(tiny_model_dir, max_token_length=400)
    item = await _item(env, "todo.md")
    right = _calls(list(item.expected))
    replies = [
        right,
        "<think>" + "hm " * 150 + "</think>" + right,
        "<think>" + "hm " * 400 + "</think>" + right,
    ]
    scores = env.score_replies(replies, item)
    assert scores[0] == 1.0 and 0.0 < scores[1] < 1.0 and scores[2] == 0.0


# -- process and evaluate -------------------------------------------------------------------------------------


def test_process_writes_every_scored_group(scripted):
    groups = process_local(scripted, SingleToolCallingEnv, SAMPLE, _responder, group_size=4, total_steps=3)
    check_groups(groups, 3, [-1.0, -1.0, 1.0, 1.0])
    for group in groups:
        for messages, score in zip(group["messages"], group["scores"], strict=True):
            assert "<tools>" in messages[0]["content"]
            assert reply_matches(messages[-1]["content"], _gold(messages)) is (score == 1.0)


def test_process_keeps_groups_whose_scores_are_all_equal(scripted):
    groups = process_local(
        scripted, SingleToolCallingEnv, SAMPLE, lambda p, i: "No tool needed.", group_size=2, total_steps=2
    )
    assert [group["scores"] for group in groups] == [[-1.0, -1.0], [-1.0, -1.0]]
    assert all(
        len(tokens) == len(masks)
        for g in groups
        for tokens, masks in zip(g["tokens"], g["masks"], strict=True)
    )


def test_evaluate_reports_simple_and_parallel_accuracy(scripted):
    evaluation = evaluate_local(scripted, SingleToolCallingEnv, SAMPLE, _simple_only)
    assert evaluation.metrics == {
        "eval/percent_correct": 5 / 8,
        "eval/simple_accuracy": 1.0,
        "eval/parallel_accuracy": 0.0,
    }
    assert len(evaluation.samples) == 8
