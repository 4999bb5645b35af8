"""Extract and validate a tool call written as JSON inside ``<tool_call>...</tool_call>`` tags."""

from __future__ import annotations

import json
import logging
import re
from typing import Any

logger = logging.getLogger(__name__)

ERROR_TOOL_NAME = "-ERROR-"


def _block_pattern(tag: str) -> re.Pattern:
    return re.compile(f"<{re.escape(tag)}>(.*?)</{re.escape(tag)}>", re.DOTALL)


def extract_tool_call(text: str, preferred_tags: list[str] | None = None) -> str | None:
    """Content of the first ``<tag>...</tag>`` block (stripped), trying each tag in order.

    ``preferred_tags`` defaults to ``["tool_call"]``. Returns None when no tag pair is found.
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


def _load_call(content: str) -> Any:
    """Parse the JSON of a call; models often write Python-style single quotes, so retry with them swapped."""
    try:
        return json.loads(content, strict=False)
    except json.JSONDecodeError:
        return json.loads(content.replace("'", '"'), strict=False)


def _tool_names(available_tools: list) -> set[str]:
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
    """Parse the tool call in ``response``.

    Returns ``(tool_name, arguments, is_error)``. On any problem (no tags, invalid JSON, not an object,
    unknown tool when ``available_tools`` is given, either as ``{"name": ...}`` or
    ``{"function": {"name": ...}}``) the name is ``"-ERROR-"`` and ``is_error`` is True; the arguments are
    kept when the JSON itself parsed.
    """
    content = extract_tool_call(response, preferred_tags)
    if not content:
        logger.debug("no tool call found in response %r", str(response)[:200])
        return ERROR_TOOL_NAME, {}, True
    try:
        call = _load_call(content)
    except (json.JSONDecodeError, ValueError) as exc:
        logger.debug("tool call is not valid JSON (%s): %r", exc, content[:200])
        return ERROR_TOOL_NAME, {}, True
    if not isinstance(call, dict):
        logger.debug("tool call is not a JSON object: %r", content[:200])
        return ERROR_TOOL_NAME, {}, True
    name = call.get("name", "")
    arguments = call.get("arguments", {})
    if isinstance(arguments, str):
        # OpenAI-style calls carry the arguments as a JSON string.
        try:
            arguments = json.loads(arguments, strict=False)
        except json.JSONDecodeError:
            pass
    if available_tools:
        if not name or name not in _tool_names(available_tools):
            return ERROR_TOOL_NAME, arguments, True
    return name, arguments, False
