"""Hermes tool calls as values: read them from a reply and compare them with the expected ones.

A call is written ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``; a reply may hold several
(parallel calls). Two sets of calls are the same when they are equal as multisets of JSON values: the
order of calls and of object keys does not matter, numbers compare by value (``250`` = ``250.0``),
booleans are not numbers (``true`` != ``1``), strings and lists compare exactly, nested values
structurally.

:func:`reply_tool_calls` reads a model reply strictly (the reply conventions of
:mod:`atroposlib.utils.replies`: nothing inside the think block counts); :func:`expected_tool_calls`
reads a data set's expected answer, which may also be written as a Python literal
(``{'name': 'f', 'arguments': {'x': True}}``), as some Hermes data sets do.
"""

from __future__ import annotations

import ast
import json
import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from atroposlib.utils.replies import answer_section
from atroposlib.utils.tool_call_parser import extract_tool_call_blocks


class ToolCallError(ValueError):
    """Text or a value that is not a well-formed tool call; the message says why."""


def canonical_value(value: Any) -> Any:
    """``value`` with every integral float made an int, so equal numbers have one form.

    Accepts what JSON can hold (dict with str keys, list or tuple, str, int, float, bool, None).
    Raises :class:`ToolCallError` for NaN, infinities, non-string keys and other types.
    """
    if isinstance(value, bool) or value is None or isinstance(value, str):
        return value
    if isinstance(value, int):
        return value
    if isinstance(value, float):
        if not math.isfinite(value):
            raise ToolCallError(f"{value} is not a JSON number")
        return int(value) if value.is_integer() else value
    if isinstance(value, dict):
        if not all(isinstance(key, str) for key in value):
            raise ToolCallError("object keys must be strings")
        return {key: canonical_value(item) for key, item in value.items()}
    if isinstance(value, (list, tuple)):
        return [canonical_value(item) for item in value]
    raise ToolCallError(f"{type(value).__name__} is not a JSON value")


def canonical_json(value: Any) -> str:
    """One string per JSON value: keys sorted, numbers by value, no whitespace (see :func:`canonical_value`)."""
    return json.dumps(canonical_value(value), sort_keys=True, separators=(",", ":"), ensure_ascii=False)


def json_values_equal(left: Any, right: Any) -> bool:
    """Whether two JSON values are equal by value (key order ignored, ``250`` = ``250.0``, ``True`` != ``1``)."""
    return canonical_json(left) == canonical_json(right)


def json_contains(actual: Any, expected: Any) -> bool:
    """Whether ``actual`` holds ``expected``: objects by the expected keys (recursively, extra keys allowed),
    every other value equal by :func:`json_values_equal`; False for values that are not JSON."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(
            key in actual and json_contains(actual[key], value) for key, value in expected.items()
        )
    try:
        return json_values_equal(actual, expected)
    except ToolCallError:
        return False


@dataclass(frozen=True)
class ToolCall:
    """One call: the function ``name`` and its ``arguments`` object."""

    name: str
    arguments: dict[str, Any]

    def canonical(self) -> str:
        """The call as one string; equal calls (by JSON value) give equal strings."""
        return canonical_json({"name": self.name, "arguments": self.arguments})

    def to_text(self) -> str:
        """The call written in Hermes form, ``<tool_call>{...}</tool_call>``."""
        body = json.dumps({"name": self.name, "arguments": self.arguments}, ensure_ascii=False)
        return f"<tool_call>\n{body}\n</tool_call>"


def _no_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    keys = [key for key, _ in pairs]
    if len(set(keys)) != len(keys):
        duplicated = next(key for key in keys if keys.count(key) > 1)
        raise ToolCallError(f"key {duplicated!r} appears twice in one object")
    return dict(pairs)


def _reject_constant(name: str) -> Any:
    raise ToolCallError(f"{name} is not a JSON number")


def load_json(text: str) -> Any:
    """Parse JSON strictly: a repeated key, NaN or Infinity is an error (:class:`ToolCallError`)."""
    try:
        return json.loads(
            text, object_pairs_hook=_no_duplicate_keys, parse_constant=_reject_constant, strict=False
        )
    except json.JSONDecodeError as exc:
        raise ToolCallError(f"not valid JSON ({exc.msg})") from None


def call_from_object(value: Any) -> ToolCall:
    """A :class:`ToolCall` from a decoded ``{"name": ..., "arguments": ...}`` object.

    ``arguments`` may be an object, a string holding a JSON object (OpenAI style), or absent (no
    arguments). Other keys are ignored. Raises :class:`ToolCallError` when ``value`` is not an object,
    the name is not a non-empty string, or the arguments are not an object.
    """
    if not isinstance(value, dict):
        raise ToolCallError("a tool call must be a JSON object")
    name = value.get("name")
    if not isinstance(name, str) or not name.strip():
        raise ToolCallError("a tool call needs a non-empty string 'name'")
    arguments = value.get("arguments", {})
    if isinstance(arguments, str):
        arguments = load_json(arguments) if arguments.strip() else {}
    if not isinstance(arguments, dict):
        raise ToolCallError(f"the arguments of {name!r} must be a JSON object")
    return ToolCall(name=name, arguments=canonical_value(arguments))


def reply_tool_calls(reply: str) -> Optional[list[ToolCall]]:
    """The calls a model reply makes, or None when the reply is malformed.

    Only the part after the think block counts. Malformed: a think block that does not close (see
    :func:`atroposlib.utils.replies.answer_section`), ``<tool_call>`` tags that do not pair up, or any
    block that is not a well-formed call in strict JSON. A reply without calls gives ``[]``.
    """
    section = answer_section(reply)
    if section is None:
        return None
    blocks = extract_tool_call_blocks(section)
    if blocks is None:
        return None
    try:
        return [call_from_object(load_json(block)) for block in blocks]
    except ToolCallError:
        return None


def _python_literal(text: str) -> Any:
    try:
        return ast.literal_eval(text)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        raise ToolCallError("neither JSON nor a Python literal") from None


def expected_tool_calls(text: str) -> list[ToolCall]:
    """The calls of a data set's expected answer (an assistant turn with ``<tool_call>`` blocks).

    Each block may be JSON or a Python literal. Raises :class:`ToolCallError` when the tags do not
    pair up, a block is not a call, or there is no call at all.
    """
    blocks = extract_tool_call_blocks(text)
    if blocks is None:
        raise ToolCallError("<tool_call> tags do not pair up")
    if not blocks:
        raise ToolCallError("no <tool_call> block")
    calls = []
    for block in blocks:
        try:
            value = load_json(block)
        except ToolCallError:
            value = _python_literal(block)
        calls.append(call_from_object(value))
    return calls


def same_calls(actual: Iterable[ToolCall], expected: Iterable[ToolCall]) -> bool:
    """Whether two collections of calls are equal as multisets (order ignored, repeats counted)."""
    return Counter(call.canonical() for call in actual) == Counter(call.canonical() for call in expected)


def reply_matches(reply: str, expected: Sequence[ToolCall]) -> bool:
    """Whether ``reply`` makes exactly the ``expected`` calls (see :func:`reply_tool_calls`)."""
    calls = reply_tool_calls(reply)
    return calls is not None and bool(expected) and same_calls(calls, expected)
