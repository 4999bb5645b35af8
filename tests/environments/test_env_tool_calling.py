"""The function-calling environment: Hermes rows, multiset-of-calls scoring, ``process`` and ``evaluate``."""

from __future__ import annotations

import json
from typing import Any

import pytest

from atroposlib.envs.cli import parse_command
from atroposlib.envs.data_loading import DatasetError
from atroposlib.utils.tool_calls import ToolCall, expected_tool_calls, reply_matches
from environments.tool_calling_server import (
    SingleToolCallingEnv,
    ToolCallingEnv,
    evaluation_metrics,
    row_to_item,
)
from tests.helpers.cli_runs import FIXTURES, read_jsonl
from tests.helpers.single_turn_runs import (
    check_groups,
    offline_env,
    setup_failure,
    write_jsonl,
)

SAMPLE = FIXTURES / "hermes_fc_sample.jsonl"
ROWS = read_jsonl(SAMPLE)
GOLD = {
    row["conversations"][1]["value"]: expected_tool_calls(row["conversations"][2]["value"]) for row in ROWS
}


# The tiny tokenizer's think and tool-call tags are plain (non-special) tokens, as in chat models.
def _env(tiny_model_dir, **overrides) -> ToolCallingEnv:
    return offline_env(
        ToolCallingEnv,
        tiny_model_dir,
        **{"group_size": 4, "dataset_path": str(SAMPLE), "max_token_length": 1024, **overrides},
    )


def _text(calls: list[ToolCall], *, reverse: bool = False, floats: bool = False) -> str:
    """The calls written out, optionally in reverse order, keys reversed and integers as floats."""
    blocks = []
    for call in reversed(calls) if reverse else calls:
        arguments = {
            key: float(value) if floats and type(value) is int else value
            for key, value in reversed(list(call.arguments.items()))
        }
        blocks.append(
            "<tool_call>" + json.dumps({"arguments": arguments, "name": call.name}) + "</tool_call>"
        )
    return "\n".join(blocks)


def _question(prompt: Any) -> str:
    text = prompt[-1]["content"] if isinstance(prompt, list) else str(prompt)
    return next(question for question in GOLD if question in text)


def mixed_responder(prompt: Any, index: int) -> str:
    """Even choices: the expected calls in another equivalent form; odd: the last call dropped or changed."""
    calls = GOLD[_question(prompt)]
    if index % 2 == 0:
        return "<think>The request maps onto the declared functions.</think>" + _text(
            calls, reverse=True, floats=True
        )
    if len(calls) > 1:
        return "<think>One call should do.</think>" + _text(calls[:-1])
    return "<think>Close enough.</think>" + _text([ToolCall(calls[0].name, {"unknown": 1})])


def simple_only_responder(prompt: Any, index: int) -> str:
    """Right on items with one expected call, the first call only on parallel items."""
    calls = GOLD[_question(prompt)]
    return _text(calls if len(calls) == 1 else calls[:1])


# -- data -------------------------------------------------------------------------------------------------


async def test_setup_reads_the_hermes_fixture(tiny_model_dir):
    env = _env(tiny_model_dir)
    await env.setup()
    assert len(env.train) == len(env.test) == len(ROWS) == 8
    assert sum(item.parallel for item in env.test) == 4
    item = await env.get_next_item()
    system, user = item.messages
    assert (
        system["role"] == "system" and "<tool_call>" in system["content"] and "<tools>" in system["content"]
    )
    assert user == {"role": "user", "content": next(q for q in GOLD if q == user["content"])}
    assert list(item.expected) == GOLD[user["content"]]


def test_row_to_item_keeps_the_tools_and_reads_python_literal_answers():
    timer = next(row for row in ROWS if "timer" in row["conversations"][1]["value"])
    item = row_to_item(timer, 3, "sample")
    assert '"name": "set_timer"' in item.messages[0]["content"]
    assert item.expected == (ToolCall("set_timer", {"minutes": 15, "label": "tea", "silent": True}),)
    assert not item.parallel


async def test_default_loader_is_the_hub_dataset(tiny_model_dir, hub_offline):
    env = _env(tiny_model_dir, dataset_path=None)
    await setup_failure(env, "NousResearch/XLAM-Atropos: cannot load from the hub")


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"messages": []}, "row 1: missing field 'conversations'"),
        ({"conversations": [{"from": "human", "value": "hi"}]}, "row 1: no 'gpt' turn"),
        (
            {"conversations": [{"from": "gpt", "value": "<tool_call>{}</tool_call>"}]},
            "row 1: no 'human' turn",
        ),
        ({"conversations": [{"from": "human"}]}, r"row 1: conversations\[0\] lacks 'value'"),
    ],
)
async def test_bad_rows_name_the_file_row_and_field(tiny_model_dir, tmp_path, row, message):
    path = write_jsonl(tmp_path / "bad.jsonl", [ROWS[0], row])
    env = _env(tiny_model_dir, dataset_path=path)
    with pytest.raises(DatasetError, match=f"{path}: {message}"):
        await env.setup()


async def test_empty_sets_and_unusable_answers_are_errors(tiny_model_dir, tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(DatasetError, match="no rows"):
        await _env(tiny_model_dir, dataset_path=str(empty)).setup()
    no_call = {"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "Hello!"}]}
    path = write_jsonl(tmp_path / "nocall.jsonl", [no_call])
    with pytest.raises(DatasetError, match="no row has a usable expected tool call"):
        await _env(tiny_model_dir, dataset_path=path).setup()
    # A usable row keeps the set; the unusable one is left out (with a warning).
    env = _env(tiny_model_dir, dataset_path=write_jsonl(tmp_path / "mixed.jsonl", [no_call, ROWS[0]]))
    await env.setup()
    assert len(env.train) == 1


def test_process_reports_a_bad_file_in_one_line(scripted, tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", [{"conversations": [{"from": "human", "value": "hi"}]}])
    assert f"{path}: row 0: no 'gpt' turn in 'conversations'" in scripted.failure(ToolCallingEnv, path)


# -- scoring ----------------------------------------------------------------------------------------------


async def _item(env: ToolCallingEnv, question_part: str):
    await env.setup()
    return next(item for item in env.train if question_part in item.messages[1]["content"])


async def test_score_mixed_group_gets_plus_minus_one(tiny_model_dir):
    env = _env(tiny_model_dir)
    item = await _item(env, "97 and 91")
    right = (
        '<tool_call>{"name": "is_prime", "arguments": {"n": 91}}</tool_call>'
        '<tool_call>{"name": "is_prime", "arguments": {"n": 97.0}}</tool_call>'
    )
    replies = [
        "<think>two checks</think>" + right,
        right,
        '<tool_call>{"name": "is_prime", "arguments": {"n": 97}}</tool_call>',  # one call short
        "<think>" + right + "</think>Done.",  # calls only inside the think block
        "",  # empty reply
    ]
    assert env.score_replies(replies, item) == [1.0, 1.0, -1.0, -1.0, -1.0]


async def test_score_all_correct_prefers_shorter_replies(tiny_model_dir):
    env = _env(tiny_model_dir, max_token_length=400)
    item = await _item(env, "AAPL")
    reply = _text(list(item.expected))
    assert len(env.tokenizer.encode(reply, add_special_tokens=False)) <= 200  # under half the budget
    longer = "<think>" + "a " * 150 + "</think>" + reply
    longest = "<think>" + "a " * 400 + "</think>" + reply
    scores = env.score_replies([reply, longer, longest], item)
    assert scores[0] == 1.0 and 0.0 < scores[1] < 1.0 and scores[2] == 0.0
    assert env.score_replies([reply], item) == [1.0]  # a lone reply (evaluation) keeps its full score


async def test_where_the_original_scored_wrong_answers_as_right(tiny_model_dir):
    """The original matched only the expected keys, read calls inside the think block, skipped malformed
    blocks and compared with Python's ``==`` (``True == 1``): each of these replies scored +1 there."""
    env = _env(tiny_model_dir)
    convert = await _item(env, "250 US dollars")
    timer = next(item for item in env.train if "timer" in item.messages[1]["content"])
    extra_argument = (
        '<tool_call>{"name": "convert_currency", "arguments": {"amount": 250, "from_currency": "USD", '
        '"to_currency": "EUR", "fee": 99}}</tool_call>'
    )
    inside_think = "<think>" + _text(list(convert.expected)) + "</think>I am not sure."
    plus_malformed = _text(list(convert.expected)) + "<tool_call>{broken</tool_call>"
    bool_as_number = '<tool_call>{"name": "set_timer", "arguments": {"minutes": 15, "label": "tea", "silent": 1}}</tool_call>'
    for reply, item in (
        (extra_argument, convert),
        (inside_think, convert),
        (plus_malformed, convert),
        (bool_as_number, timer),
    ):
        assert env.score_replies([reply, _text(list(item.expected))], item) == [-1.0, 1.0], reply


def test_evaluation_metrics_split_simple_and_parallel():
    results = [
        {"correct": True, "parallel": False},
        {"correct": False, "parallel": False},
        {"correct": True, "parallel": True},
        {"correct": True, "parallel": True},
    ]
    assert evaluation_metrics(results) == {
        "eval/percent_correct": 0.75,
        "eval/simple_accuracy": 0.5,
        "eval/parallel_accuracy": 1.0,
    }
    assert evaluation_metrics(results[:2]) == {"eval/percent_correct": 0.5, "eval/simple_accuracy": 0.5}


def test_the_original_class_names_import():
    assert SingleToolCallingEnv is ToolCallingEnv
    assert ToolCallingEnv.config_init()[1].model_name == "NousResearch/DeepHermes-3-Llama-3-8B-Preview"


# -- process and evaluate ----------------------------------------------------------------------------------


def test_process_with_the_local_fixture(scripted):
    args = ["--env.dataset_path", SAMPLE, "--env.max_token_length", 2048]
    args += ["--env.group_size", 4, "--env.total_steps", 4]
    groups = scripted.process(ToolCallingEnv, args, mixed_responder)
    check_groups(groups, 4, [-1.0, -1.0, 1.0, 1.0])
    for group in groups:
        for messages, score in zip(group["messages"], group["scores"], strict=True):
            assert "<tools>" in messages[0]["content"] and messages[-1]["role"] == "assistant"
            question = messages[1]["content"]
            assert reply_matches(messages[-1]["content"], GOLD[question]) is (score == 1.0)


def test_evaluate_reports_simple_and_parallel_accuracy(scripted):
    args = ["--env.dataset_path", SAMPLE, "--env.max_token_length", 1024]
    metrics, samples, printed = scripted.evaluate(ToolCallingEnv, args, simple_only_responder)
    assert metrics == {
        "eval/percent_correct": 0.5,
        "eval/simple_accuracy": 1.0,
        "eval/parallel_accuracy": 0.0,
    }
    assert "simple_accuracy=1.0000" in printed and "parallel_accuracy=0.0000" in printed
    assert "simple accuracy" in printed  # the metrics table
    assert len(samples) == 8
    assert all(s["correct"] is (not s["parallel"]) for s in samples)


def test_serve_sends_scored_groups_to_the_api(scripted, api):
    args = ["--env.dataset_path", SAMPLE, "--env.group_size", "4", "--env.max_token_length", "2048"]
    served = scripted.serve(ToolCallingEnv, args, mixed_responder, api)
    assert sorted(served.group["scores"]) == [-1.0, -1.0, 1.0, 1.0]


async def test_max_eval_samples_evaluates_on_a_seeded_subset(tiny_model_dir):
    async def questions(**values) -> list[str]:
        env = _env(tiny_model_dir, **values)
        await env.setup()
        assert len(env.train) == len(ROWS)  # training keeps every row
        return [item.messages[-1]["content"] for item in env.eval_items()]

    everything = await questions()
    subset = await questions(max_eval_samples=3, eval_sample_seed=7)
    assert len(subset) == 3 and set(subset) < set(everything)
    assert subset == await questions(max_eval_samples=3, eval_sample_seed=7)
    others = [await questions(max_eval_samples=3, eval_sample_seed=seed) for seed in range(5)]
    assert any(other != subset for other in others)
    assert await questions(max_eval_samples=50) == everything


def test_the_original_dataset_key_names_the_hub_set(tmp_path):
    config = tmp_path / "tools.yaml"
    config.write_text("env:\n  dataset: NousResearch/tool_calling\n  max_eval_samples: 20\n")
    run = parse_command(ToolCallingEnv, ["evaluate", "--config", str(config)]).resolve()
    assert run.env_config.dataset_name == "NousResearch/tool_calling"
    assert run.env_config.max_eval_samples == 20
