"""Tool calls in model text: the one module that reads them, writes them and compares them.

Formats read:

* Hermes blocks, ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``; a reply may hold several
  (parallel calls). :func:`extract_tool_call_blocks` returns their contents and refuses tags that do not
  pair up; :func:`extract_tool_call` returns the first block under any of several tag names.
* The call object inside a block: ``name`` a non-empty string, ``arguments`` an object, a string holding
  a JSON object (OpenAI style) or absent (:func:`call_from_object`, :func:`decode_arguments`).

Strict readers take JSON only, with no repeated key, NaN or Infinity (:func:`parse_call_block`,
:func:`reply_tool_calls`, :func:`split_tool_calls`). :func:`expected_tool_calls` also takes Python
literals (``{'name': 'f', 'arguments': {'x': True}}``), as some Hermes data sets write them.
:func:`parse_tool_call` is the lenient reader of one call (single quotes accepted, errors reported as
the ``"-ERROR-"`` name).

Two sets of calls are the same when they are equal as multisets of JSON values: the order of calls and
of object keys does not matter, numbers compare by value (``250`` = ``250.0``), booleans are not numbers
(``true`` != ``1``), strings and lists compare exactly, nested values structurally.
"""

from __future__ import annotations

import ast
import json
import logging
import math
import re
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from atroposlib.utils.replies import answer_section

logger = logging.getLogger(__name__)

#: The tool name :func:`parse_tool_call` returns for a call it cannot read.
ERROR_TOOL_NAME = "-ERROR-"


class ToolCallError(ValueError):
    """Text or a value that is not a well-formed tool call; the message says why."""


def _block_pattern(tag: str) -> re.Pattern:
    return re.compile(f"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>", re.DOTALL)


def extract_tool_call(text: str, preferred_tags: list[str] | None = None) -> str | None:
    """Content of the first ``<tag>...</tag>`` block (stripped), trying each tag in order.

    ``preferred_tags`` defaults to ``["tool_call"]``. Returns None when no tag pair is found or
    ``text`` is not a string.
    """
    if not isinstance(text, str):
        return None
    for tag in preferred_tags or ["tool_call"]:
        match = _block_pattern(tag).search(text)
        if match:
            return match.group(1).strip()
    return None


def extract_tool_call_blocks(text: str, tag: str = "tool_call") -> list[str] | None:
    """Contents (stripped) of every ``<tag>...</tag>`` block of ``text``, in order.

    Returns an empty list when there is no block, and None when the tags do not pair up: an opening
    tag that never closes, a closing tag without an opening one, or a block nested in another.
    """
    pattern = _block_pattern(tag)
    blocks = [match.strip() for match in pattern.findall(text)]
    rest = pattern.sub("", text)
    if f"<{tag}>" in rest or f"</{tag}>" in rest or any(f"<{tag}>" in block for block in blocks):
        return None
    return blocks


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


def decode_arguments(arguments: Any) -> Any:
    """The arguments of a call as written: a string is decoded as strict JSON (OpenAI style, an empty
    string is ``{}``), any other value is returned as it is. Raises :class:`ToolCallError` for a string
    that is not JSON; whether the result is an object is the caller's check."""
    if isinstance(arguments, str):
        return load_json(arguments) if arguments.strip() else {}
    return arguments


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
    arguments = decode_arguments(value.get("arguments", {}))
    if not isinstance(arguments, dict):
        raise ToolCallError(f"the arguments of {name!r} must be a JSON object")
    return ToolCall(name=name, arguments=canonical_value(arguments))


def parse_call_block(block: str) -> ToolCall:
    """The call written in one block's content, in strict JSON (see :func:`call_from_object`).

    Raises :class:`ToolCallError` saying what is wrong with it.
    """
    return call_from_object(load_json(block))


def split_tool_calls(text: str) -> Optional[tuple[str, list[ToolCall]]]:
    """``(content, calls)`` of model text: the text before its first ``<tool_call>`` block and every
    block's call, in order; ``(text, [])`` when there is no block. None when the tags do not pair up
    or a block is not one call in strict JSON."""
    blocks = extract_tool_call_blocks(text)
    if blocks is None:
        return None
    try:
        calls = [parse_call_block(block) for block in blocks]
    except ToolCallError:
        return None
    content = text.split("<tool_call>", 1)[0] if calls else text
    return content, calls


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
        return [parse_call_block(block) for block in blocks]
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


def _load_lenient(content: str) -> Any:
    """JSON of a call; models often write Python-style single quotes, so retry with them swapped."""
    try:
        return json.loads(content, strict=False)
    except json.JSONDecodeError:
        return json.loads(content.replace("'", '"'), strict=False)


def _tool_names(available_tools: list) -> set[str]:
    """Names of tools given as ``{"name": ...}`` or OpenAI's ``{"function": {"name": ...}}``."""
    names = set()
    for tool in available_tools:
        if not isinstance(tool, dict):
            continue
        if "name" in tool:
            names.add(tool["name"])
        elif isinstance(tool.get("function"), dict) and "name" in tool["function"]:
            names.add(tool["function"]["name"])
    return names


def parse_tool_call(
    response: str, available_tools: list[dict] | None = None, preferred_tags: list[str] | None = None
) -> tuple[str, dict[str, Any], bool]:
    """The first call of ``response``, read leniently: ``(tool_name, arguments, is_error)``.

    Reads the first block of ``preferred_tags`` (default ``["tool_call"]``); single quotes and
    arguments given as a JSON string are accepted. On any problem (no block, invalid JSON, not an
    object, a name not among ``available_tools`` when given) the name is ``"-ERROR-"`` and
    ``is_error`` is True; the arguments are kept when the JSON itself parsed.
    """
    content = extract_tool_call(response, preferred_tags)
    if not content:
        logger.debug("no tool call found in response %r", str(response)[:200])
        return ERROR_TOOL_NAME, {}, True
    try:
        call = _load_lenient(content)
    except (json.JSONDecodeError, ValueError) as exc:
        logger.debug("tool call is not valid JSON (%s): %r", exc, content[:200])
        return ERROR_TOOL_NAME, {}, True
    if not isinstance(call, dict):
        logger.debug("tool call is not a JSON object: %r", content[:200])
        return ERROR_TOOL_NAME, {}, True
    name = call.get("name", "")
    arguments = call.get("arguments", {})
    if isinstance(arguments, str):
        try:
            arguments = json.loads(arguments, strict=False)
        except json.JSONDecodeError:
            pass
    if available_tools and (not name or name not in _tool_names(available_tools)):
        return ERROR_TOOL_NAME, arguments, True
    return name, arguments, False
