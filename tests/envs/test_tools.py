"""Tools for multi-turn environments: the calculator, the registry, running a reply's tool calls."""

from __future__ import annotations

import asyncio
import json
from types import SimpleNamespace

import pytest

from atroposlib.envs.tools import (
    CalculatorTool,
    ToolError,
    ToolRegistry,
    argument_errors,
    evaluate_expression,
    registry,
    run_tool_calls,
    tool_schema,
)
from atroposlib.envs.tools.python import format_result


@pytest.mark.parametrize(
    "expression, value",
    [
        ("3 * (4 + 5) / 2", 13.5),
        ("2 ** 10", 1024),
        ("-7 // 2", -4),
        ("17 % 5", 2),
        ("+3 - -2", 5),
        ("1.5e3 / 3", 500.0),
        ("2 ** -2", 0.25),
    ],
)
def test_calculator_evaluates_arithmetic(expression, value):
    assert evaluate_expression(expression) == value


@pytest.mark.parametrize(
    "expression, message",
    [
        ("__import__('os').system('true')", "Call is not allowed"),
        ("x + 1", "Name is not allowed"),
        ("(1).real", "Attribute is not allowed"),
        ("[1, 2]", "List is not allowed"),
        ("1 / 0", "division by zero"),
        ("7 % 0", "division by zero"),
        ("2 ^ 3", "use \\*\\* for powers"),
        ("9 ** 9 ** 9", "exponent is too large"),
        ("10 ** 400", "more than 300 digits"),
        ("1e308 * 10", "not a finite number"),
        ("(-8) ** 0.5", "not a real number"),
        ("True + 1", "not a number"),
        ("'a' * 3", "not a number"),
        ("1 +", "invalid expression"),
        ("", "empty"),
        ("1+" * 600 + "1", "longer than"),
    ],
)
def test_calculator_refuses_everything_but_arithmetic(expression, message):
    with pytest.raises(ToolError, match=message):
        evaluate_expression(expression)


async def test_calculator_tool_answers_text():
    tool = CalculatorTool()
    assert await tool.call({"expression": "6 * 7"}) == "42"
    assert await tool.call({"expression": "1 / 4"}) == "0.25"
    assert tool_schema(tool)["function"]["name"] == "calculator"
    assert argument_errors(tool, {}) == ["'expression' is a required property"]
    assert argument_errors(tool, {"expression": 3}) == ["expression: 3 is not of type 'string'"]
    assert argument_errors(tool, {"expression": "1", "extra": 1})


def test_registry_builds_tools_by_name_and_can_be_extended():
    assert {"calculator", "python"} <= set(registry.names())
    assert isinstance(registry.create("calculator"), CalculatorTool)
    mine = ToolRegistry()
    mine.register("echo", EchoTool)
    assert mine.create("echo").name == "echo"
    with pytest.raises(ValueError, match="already registered"):
        mine.register("echo", EchoTool)
    mine.register("echo", EchoTool, replace=True)
    with pytest.raises(KeyError, match="registered tools: echo"):
        mine.create("search")
    mine.register("misnamed", EchoTool)
    with pytest.raises(ValueError, match="named 'echo'"):
        mine.create("misnamed")


class EchoTool:
    name = "echo"
    description = "Repeat the text."
    parameters = {"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]}

    async def call(self, arguments):
        return arguments["text"]


class BrokenTool:
    name = "broken"
    description = "Always fails."
    parameters = {"type": "object", "properties": {}}

    async def call(self, arguments):
        raise RuntimeError("disk on fire")


class SlowTool:
    name = "slow"
    description = "Never answers in time."
    parameters = {"type": "object", "properties": {}}

    async def call(self, arguments):
        await asyncio.sleep(5)
        return "late"


TOOLS = {"calculator": CalculatorTool(), "echo": EchoTool(), "broken": BrokenTool(), "slow": SlowTool()}


def _call(name, **arguments):
    return f"<tool_call>{json.dumps({'name': name, 'arguments': arguments})}</tool_call>"


def _bodies(turn):
    text = turn.response_text()
    return [json.loads(part.split("</tool_response>")[0]) for part in text.split("<tool_response>")[1:]]


async def test_calls_run_in_order_and_answer_in_tool_responses():
    reply = "<think>" + _call("echo", text="ignored") + "</think>" + _call("calculator", expression="2+2")
    reply += "\n" + _call("echo", text="hi")
    turn = await run_tool_calls(reply, TOOLS)
    assert turn.made_calls and turn.errors == 0
    assert [(c.name, c.output) for c in turn.calls] == [("calculator", "4"), ("echo", "hi")]
    assert _bodies(turn) == [{"name": "calculator", "content": "4"}, {"name": "echo", "content": "hi"}]
    assert turn.response_text().startswith("<tool_response>\n")


async def test_a_reply_without_calls_makes_none():
    for reply in ("The answer is \\boxed{4}.", "<think>" + _call("echo", text="x") + "</think> done", ""):
        turn = await run_tool_calls(reply, TOOLS)
        assert not turn.made_calls and turn.response_text() == ""


@pytest.mark.parametrize(
    "reply, message",
    [
        (
            '<tool_call>{"name": "echo", "arguments": {"text": "a"</tool_call>',
            "malformed tool call: not valid JSON",
        ),
        ("<tool_call>[1, 2]</tool_call>", "must be a JSON object"),
        ('<tool_call>{"arguments": {}}</tool_call>', "non-empty string 'name'"),
        (_call("search", query="x"), "unknown tool 'search'; tools: broken, calculator, echo, slow"),
        (_call("echo"), "invalid arguments for 'echo': 'text' is a required property"),
        (_call("echo", text=5), "invalid arguments for 'echo': text: 5 is not of type 'string'"),
        (_call("calculator", expression="1/0"), "division by zero"),
        (_call("broken"), "'broken' failed: RuntimeError: disk on fire"),
        ("<tool_call>" + json.dumps({"name": "echo", "arguments": {"text": "a"}}), "needs its </tool_call>"),
    ],
)
async def test_bad_calls_get_an_error_the_model_can_read(reply, message):
    turn = await run_tool_calls(reply, TOOLS)
    assert turn.made_calls and turn.errors == 1
    assert message in turn.calls[0].output
    body = _bodies(turn)[0]
    assert set(body) == {"name", "error"} and message in body["error"]


async def test_a_tool_that_does_not_answer_in_time_is_an_error():
    turn = await run_tool_calls(_call("slow") + _call("echo", text="after"), TOOLS, timeout_s=0.05)
    assert [c.ok for c in turn.calls] == [False, True]
    assert "did not answer within 0.05 s" in turn.calls[0].output and turn.calls[1].output == "after"


def test_python_results_read_as_text():
    ok = SimpleNamespace(stdout="42\n", stderr="", exit_code=0, timed_out=False, truncated=False, reason=None)
    assert format_result(ok, 100) == "42\n"
    failed = SimpleNamespace(
        stdout="",
        stderr="Traceback ...\nZeroDivisionError",
        exit_code=1,
        timed_out=False,
        truncated=False,
        reason=None,
    )
    assert format_result(failed, 100) == "[stderr]\nTraceback ...\nZeroDivisionError\n[exit code 1]"
    silent = SimpleNamespace(stdout="", stderr="", exit_code=0, timed_out=False, truncated=False, reason=None)
    assert "no output" in format_result(silent, 100)
    long = SimpleNamespace(
        stdout="x" * 500, stderr="", exit_code=0, timed_out=False, truncated=True, reason=None
    )
    text = format_result(long, 100)
    assert text.startswith("x" * 100) and "[truncated:" in text and len(text) < 200
    killed = SimpleNamespace(
        stdout="partial", stderr="", exit_code=-9, timed_out=True, truncated=False, reason="t"
    )
    with pytest.raises(ToolError, match="time limit(.|\n)*partial"):
        format_result(killed, 100)
