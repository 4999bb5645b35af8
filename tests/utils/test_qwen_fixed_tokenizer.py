"""QwenFixedTokenizer with the bundled template, on the real tiny tokenizer."""

from __future__ import annotations

import jinja2
import pytest

from atroposlib.utils.tokenize_for_trainer import tokenize_for_trainer
from atroposlib.utils.tokenizers.qwen_fixed_tokenizer import TEMPLATE_PATH, QwenFixedTokenizer

TOOLS = [
    {
        "type": "function",
        "function": {"name": "add", "description": "Add two numbers", "parameters": {"type": "object"}},
    }
]


@pytest.fixture(scope="module")
def qwen(tiny_model_dir):
    return QwenFixedTokenizer(str(tiny_model_dir))


def test_template_is_installed_and_attributes_delegate(qwen):
    assert qwen.tokenizer.chat_template == TEMPLATE_PATH.read_text(encoding="utf-8")
    assert qwen.eos_token == "<|im_end|>"
    assert qwen.decode(qwen.encode("seven apples", add_special_tokens=False)) == "seven apples"
    assert len(qwen) == len(qwen.tokenizer)
    assert qwen("hi")["input_ids"] == qwen.tokenizer("hi")["input_ids"]


def test_plain_chat_renders_chatml(qwen):
    msgs = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    text = qwen.apply_chat_template(msgs, tokenize=False, add_generation_prompt=True)
    assert (
        text
        == "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nhi<|im_end|>\n<|im_start|>assistant\n"
    )
    ids = qwen.apply_chat_template(msgs, add_generation_prompt=True)
    assert isinstance(ids, list) and qwen.decode(ids) == text


def test_tools_tool_calls_and_tool_responses(qwen):
    msgs = [
        {"role": "system", "content": "Use tools."},
        {"role": "user", "content": "1+2 and 3+4?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "a", "type": "function", "function": {"name": "add", "arguments": {"a": 1, "b": 2}}},
                {"id": "b", "type": "function", "function": {"name": "add", "arguments": '{"a": 3, "b": 4}'}},
            ],
        },
        {"role": "tool", "tool_call_id": "a", "content": "3"},
        {"role": "tool", "tool_call_id": "b", "content": "7"},
        {"role": "assistant", "content": "3 and 7."},
    ]
    text = qwen.apply_chat_template(msgs, tools=TOOLS, tokenize=False)
    assert text.startswith("<|im_start|>system\nUse tools.\n\n# Tools\n")
    assert '<tools>\n{"type": "function", "function": {"name": "add"' in text
    assert (
        "<|im_start|>assistant\n<tool_call>\n"
        '{"name": "add", "arguments": {"a": 1, "b": 2}}\n</tool_call>\n<tool_call>\n'
        '{"name": "add", "arguments": {"a": 3, "b": 4}}\n</tool_call><|im_end|>\n'
    ) in text
    assert (
        "<|im_start|>user\n<tool_response>\n3\n</tool_response>\n<tool_response>\n7\n</tool_response><|im_end|>\n"
    ) in text
    assert text.endswith("<|im_start|>assistant\n3 and 7.<|im_end|>\n")
    assert text.count("Use tools.") == 1


def test_assistant_text_with_tool_call_and_multimodal_content(qwen):
    msgs = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "look"}, {"type": "image_url", "image_url": {}}],
        },
        {
            "role": "assistant",
            "content": "Calling.",
            "tool_calls": [{"function": {"name": "add", "arguments": {}}}],
        },
    ]
    text = qwen.apply_chat_template(msgs, tokenize=False)
    assert text == (
        "<|im_start|>user\nlook<|im_end|>\n<|im_start|>assistant\nCalling.\n<tool_call>\n"
        '{"name": "add", "arguments": {}}\n</tool_call><|im_end|>\n'
    )


def test_template_renders_in_the_immutable_sandbox():
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True, undefined=jinja2.Undefined)
    env.filters["tojson"] = lambda v: __import__("json").dumps(v)
    rendered = env.from_string(TEMPLATE_PATH.read_text()).render(
        messages=[{"role": "user", "content": "x"}], tools=TOOLS, add_generation_prompt=True
    )
    assert rendered.endswith("<|im_start|>user\nx<|im_end|>\n<|im_start|>assistant\n")


def test_works_with_tokenize_for_trainer(qwen):
    msgs = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    out = tokenize_for_trainer(qwen, msgs)
    assert qwen.decode([t for t in out["masks"] if t != -100]) == "hello<|im_end|>\n"
