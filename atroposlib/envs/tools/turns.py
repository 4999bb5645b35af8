"""One model turn of tool calls in a multi-turn episode: the limits, the run and the session's answer.

:class:`ToolLimitsConfig` adds the settings every tool-calling environment bounds its tools with (time
per call, characters of output shown, calls per reply). :class:`ToolTally` runs a reply's calls under
those limits and answers the episode runner: a ``tool`` turn of ``<tool_response>`` blocks, an ended
episode when the reply made more calls than allowed (none of them run), or ``None`` when the reply made
no call (the session decides what a final reply means), while counting calls and failures.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

from pydantic import Field

from atroposlib.envs.episodes import Feedback
from atroposlib.envs.multi_turn import MultiTurnEnvConfig
from atroposlib.envs.tools.calls import ToolTurn, run_tool_calls


class ToolLimitsConfig(MultiTurnEnvConfig):
    """MultiTurnEnvConfig plus the limits of the tools the model calls."""

    tool_timeout_s: float = Field(
        30.0, gt=0, description="seconds a tool call may take before it is an error"
    )
    tool_output_chars: int = Field(4000, ge=100, description="characters of one tool answer shown")
    max_calls_per_turn: int = Field(
        8, ge=1, description="tool calls one reply may make; a reply with more ends the episode"
    )


@dataclass
class ToolTally:
    """The calls of an episode so far: how many ran, how many failed, whether a reply went over the limit."""

    calls: int = 0
    errors: int = 0
    over_limit: bool = False

    async def run(
        self, reply: str, tools: Mapping[str, Any], config: ToolLimitsConfig
    ) -> tuple[ToolTurn, Optional[Feedback]]:
        """Run the calls of ``reply``; the turn and the feedback (None when the reply made no call)."""
        turn = await run_tool_calls(
            reply, tools, timeout_s=config.tool_timeout_s, max_calls=config.max_calls_per_turn
        )
        if turn.over_limit:
            self.over_limit = True
            self.errors += 1
            return turn, Feedback(done=True, info={"over_limit": True})
        if not turn.made_calls:
            return turn, None
        self.calls += len(turn.calls)
        self.errors += turn.errors
        info = {"calls": [{"name": c.name, "ok": c.ok} for c in turn.calls]}
        return turn, Feedback(messages=[{"role": "tool", "content": turn.response_text()}], info=info)
