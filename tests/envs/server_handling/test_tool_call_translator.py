"""ToolCallTranslator with vLLM's hermes parser and the tiny tokenizer."""

from __future__ import annotations

import json

import pytest

from atroposlib.envs.server_handling.tool_call_translator import VLLM_AVAILABLE, ToolCallTranslator

TOOLS = [{"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}]

pytestmark = pytest.mark.skipif(not VLLM_AVAILABLE, reason="vLLM (optional dependency) not installed")


@pytest.fixture(scope="module")
def translator(tiny_tokenizer):
    return ToolCallTranslator(tiny_tokenizer, parser_name="hermes")


def test_parse_and_reconstruct_round_trip(translator):
    raw = 'Let me check.<tool_call>{"name": "lookup", "arguments": {"q": "x"}}</tool_call>'
    content, calls, finish = translator.parse_model_output(raw, tool_choice="auto", tools=TOOLS)
    assert content == "Let me check." and finish == "tool_calls"
    assert calls[0].function.name == "lookup" and json.loads(calls[0].function.arguments) == {"q": "x"}
    as_dicts = [
        {
            "id": c.id,
            "type": "function",
            "function": {"name": c.function.name, "arguments": c.function.arguments},
        }
        for c in calls
    ]
    assert translator.reconstruct_raw_text_from_tool_calls(as_dicts) == raw
    converted = translator.convert_messages_for_template(
        [{"role": "user", "content": "hi"}, {"role": "assistant", "content": None, "tool_calls": as_dicts}]
    )
    assert converted[1] == {"role": "assistant", "content": raw}


def test_unknown_calls_are_rebuilt_best_effort(translator):
    calls = [{"id": "unknown", "function": {"name": "lookup", "arguments": '{"q": 1}'}}]
    text = translator.reconstruct_raw_text_from_tool_calls(calls)
    assert text == '<tool_call>{"name": "lookup", "arguments": {"q": 1}}</tool_call>'
    converted = translator.convert_messages_for_template(
        [{"role": "assistant", "content": "thinking", "tool_calls": calls}]
    )
    assert converted[0]["content"] == f"thinking\n{text}"


def test_no_parsing_without_tools_or_with_none(translator):
    raw = '<tool_call>{"name": "lookup", "arguments": {}}</tool_call>'
    assert translator.parse_model_output(raw, tools=None) == (raw, None, "stop")
    assert translator.parse_model_output(raw, tool_choice="none", tools=TOOLS) == (raw, None, "stop")
    assert translator.parse_model_output("plain answer", tools=TOOLS) == ("plain answer", None, "stop")


def test_decode_with_tool_awareness_keeps_tags(translator, tiny_tokenizer):
    # The tiny tokenizer's tags are ordinary added tokens (as in Qwen's); only special tokens are dropped.
    ids = tiny_tokenizer.encode("<tool_call>{}</tool_call><|im_end|>")
    assert translator.decode_with_tool_awareness(ids, has_tools=True) == "<tool_call>{}</tool_call><|im_end|>"
    assert translator.decode_with_tool_awareness(ids, has_tools=False) == "<tool_call>{}</tool_call>"
