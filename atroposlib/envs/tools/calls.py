"""Running the Hermes tool calls of a model reply and writing the ``<tool_response>`` answer.

A reply calls tools with ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` blocks after its
reasoning (nothing inside ``<think>`` counts). :func:`run_tool_calls` runs every block in order and
records, per block, the output or an error that the model can read: unpaired tags, invalid JSON, a
block that is not a call, an unknown tool, arguments that do not match the tool's schema, a tool that
raised or ran past ``timeout_s``. A reply without any block makes no calls (it is a final answer).
"""

from __future__ import annotations

import asyncio
import json
import logging
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Optional

from atroposlib.envs.tools.base import Tool, ToolError, argument_errors
from atroposlib.utils.replies import answer_section
from atroposlib.utils.tool_calls import ToolCallError, extract_tool_call_blocks, parse_call_block

logger = logging.getLogger(__name__)


@dataclass
class ToolCallRecord:
    """One attempted call: the tool name and arguments when they could be read, and the outcome."""

    name: Optional[str]
    arguments: Optional[dict[str, Any]]
    ok: bool
    output: str  #: the tool's output, or the error message when not ``ok``

    def response(self) -> str:
        """The JSON body of this call's ``<tool_response>``."""
        key = "content" if self.ok else "error"
        return json.dumps({"name": self.name, key: self.output}, ensure_ascii=False)


@dataclass
class ToolTurn:
    """The calls of one reply, in order."""

    calls: list[ToolCallRecord] = field(default_factory=list)
    over_limit: bool = False  #: the reply made more calls than allowed and none ran

    @property
    def made_calls(self) -> bool:
        """Whether the reply tried to call anything (well-formed or not)."""
        return bool(self.calls)

    @property
    def errors(self) -> int:
        """How many calls failed (malformed, unknown tool, bad arguments, tool error)."""
        return sum(1 for c in self.calls if not c.ok)

    def response_text(self) -> str:
        """One ``<tool_response>`` block per call, in call order."""
        return "\n".join(f"<tool_response>\n{c.response()}\n</tool_response>" for c in self.calls)


async def _run_one(block: str, tools: Mapping[str, Tool], timeout_s: Optional[float]) -> ToolCallRecord:
    try:
        call = parse_call_block(block)
    except ToolCallError as exc:
        return ToolCallRecord(None, None, False, f"malformed tool call: {exc}")
    tool = tools.get(call.name)
    if tool is None:
        available = ", ".join(sorted(tools)) or "none"
        return ToolCallRecord(
            call.name, call.arguments, False, f"unknown tool {call.name!r}; tools: {available}"
        )
    problems = argument_errors(tool, call.arguments)
    if problems:
        return ToolCallRecord(
            call.name, call.arguments, False, f"invalid arguments for {call.name!r}: {'; '.join(problems)}"
        )
    try:
        if timeout_s is not None:
            output = await asyncio.wait_for(tool.call(call.arguments), timeout_s)
        else:
            output = await tool.call(call.arguments)
    except asyncio.TimeoutError:
        return ToolCallRecord(
            call.name, call.arguments, False, f"{call.name!r} did not answer within {timeout_s} s"
        )
    except ToolError as exc:
        return ToolCallRecord(call.name, call.arguments, False, str(exc))
    except Exception as exc:  # a tool bug must not end the run; the model sees a short error
        logger.warning("tool %r raised %s: %s", call.name, type(exc).__name__, exc)
        return ToolCallRecord(
            call.name, call.arguments, False, f"{call.name!r} failed: {type(exc).__name__}: {exc}"
        )
    return ToolCallRecord(call.name, call.arguments, True, str(output))


async def run_tool_calls(
    reply: str, tools: Mapping[str, Tool], timeout_s: Optional[float] = None, max_calls: Optional[int] = None
) -> ToolTurn:
    """Run the tool calls of ``reply`` (see the module docstring); calls run one after another.

    With ``max_calls``, a reply holding more blocks than that runs none of them: the turn is one error
    record saying so (``ToolTurn.over_limit`` is set).
    """
    section = answer_section(reply)
    if section is None:
        section = reply.rsplit("</think>", 1)[-1]
    blocks = extract_tool_call_blocks(section)
    if blocks is None:
        return ToolTurn(
            [
                ToolCallRecord(
                    None, None, False, "malformed tool call: every <tool_call> needs its </tool_call>"
                )
            ]
        )
    if max_calls is not None and len(blocks) > max_calls:
        message = f"{len(blocks)} tool calls in one reply; at most {max_calls} are run per reply, so none ran"
        return ToolTurn([ToolCallRecord(None, None, False, message)], over_limit=True)
    turn = ToolTurn()
    for block in blocks:
        turn.calls.append(await _run_one(block, tools, timeout_s))
    return turn
