"""ToolCallTranslator without vLLM: the hermes format is read by atroposlib's own tool-call reader."""

from __future__ import annotations

import json

import pytest

from atroposlib.envs.server_handling import tool_call_translator
from atroposlib.envs.server_handling.tool_call_translator import ToolCallTranslator

TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]


@pytest.fixture
def no_vllm(monkeypatch):
    monkeypatch.setattr(tool_call_translator, "VLLM_AVAILABLE", False)


def test_hermes_calls_are_parsed_and_rebuilt_exactly(no_vllm):
    translator = ToolCallTranslator(tokenizer=None, parser_name="hermes")
    raw = (
        'Let me check.<tool_call>{"name": "lookup", "arguments": {"q": "café"}}</tool_call>\n'
        '<tool_call>{"name": "lookup", "arguments": "{\\"q\\": 2}"}</tool_call>'
    )
    content, calls, finish = translator.parse_model_output(raw, tool_choice="auto", tools=TOOLS)
    assert content == "Let me check." and finish == "tool_calls"
    assert [c.function.name for c in calls] == ["lookup", "lookup"]
    assert [json.loads(c.function.arguments) for c in calls] == [{"q": "café"}, {"q": 2}]
    assert len({c.id for c in calls}) == 2 and all(c.type == "function" for c in calls)
    as_dicts = [
        {"id": c.id, "function": {"name": c.function.name, "arguments": c.function.arguments}} for c in calls
    ]
    assert translator.reconstruct_raw_text_from_tool_calls(as_dicts) == raw


def test_text_without_a_valid_call_is_returned_as_is(no_vllm):
    translator = ToolCallTranslator(tokenizer=None, parser_name="hermes")
    for raw in (
        "plain answer",
        "<tool_call>not json</tool_call>",
        '<tool_call>{"name": "lookup"}',  # never closed
        '<tool_call>{"arguments": {}}</tool_call>',  # no name
    ):
        assert translator.parse_model_output(raw, tool_choice="auto", tools=TOOLS) == (raw, None, "stop")
    assert translator.call_id_to_raw_text == {}
    call = '<tool_call>{"name": "lookup", "arguments": {}}</tool_call>'
    assert translator.parse_model_output(call, tool_choice="none", tools=TOOLS) == (call, None, "stop")
    assert translator.parse_model_output(call, tools=None) == (call, None, "stop")
    content, calls, _ = translator.parse_model_output(call, tools=TOOLS)
    assert content is None and calls[0].function.arguments == "{}"


def test_other_formats_need_vllm(no_vllm):
    with pytest.warns(UserWarning, match="'mistral' tool parser is unavailable"):
        translator = ToolCallTranslator(tokenizer=None, parser_name="mistral")
    raw = '[TOOL_CALLS][{"name": "lookup", "arguments": {}}]'
    assert translator.parse_model_output(raw, tools=TOOLS) == (raw, None, "stop")


def test_rebuilt_arguments_that_are_not_json_stay_strings(no_vllm):
    translator = ToolCallTranslator(tokenizer=None, parser_name="hermes")
    calls = [{"id": "x", "function": {"name": "lookup", "arguments": "{oops"}}]
    assert translator.reconstruct_raw_text_from_tool_calls(calls) == (
        '<tool_call>{"name": "lookup", "arguments": "{oops"}</tool_call>'
    )
