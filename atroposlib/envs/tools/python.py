"""The ``python`` tool: run model-written code in the sandbox and return what it printed.

The code runs through :class:`atroposlib.sandbox.Sandbox` (never outside it). The answer holds the
program's stdout, then its stderr and exit status when there is anything to say, truncated to
``output_limit`` characters; a time-out or a sandbox refusal is reported to the model as an error.
"""

from __future__ import annotations

import asyncio
from typing import Any

from atroposlib.envs.tools.base import ToolError


def _truncate(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + f"\n... [truncated: {len(text) - limit} more characters]"


def format_result(result: Any, output_limit: int) -> str:
    """The text the model sees for a sandbox ``result`` (``stdout``, ``stderr``, ``exit_code``,
    ``timed_out``, ``truncated``, ``reason``), at most about ``output_limit`` characters."""
    if getattr(result, "timed_out", False):
        partial = (result.stdout or "").strip()
        message = "the program was stopped: it ran past its time limit"
        if partial:
            message += f"\nstdout before it was stopped:\n{_truncate(partial, output_limit)}"
        raise ToolError(message)
    text = result.stdout or ""

    def add(block: str) -> None:
        nonlocal text
        text += ("\n" if text and not text.endswith("\n") else "") + block

    if result.stderr:
        add(f"[stderr]\n{result.stderr}")
    if result.exit_code not in (0, None):
        reason = getattr(result, "reason", None)
        detail = f" ({reason})" if reason and "exit status" not in reason else ""
        add(f"[exit code {result.exit_code}{detail}]")
    if getattr(result, "truncated", False):
        add("[output truncated by the sandbox]")
    if not text:
        return "[no output: print() the values you want to see]"
    return _truncate(text, output_limit)


class PythonTool:
    """The ``python`` tool: ``{"code": "print(6 * 7)"}`` -> ``"42\\n"``.

    Args:
        sandbox: an :class:`atroposlib.sandbox.Sandbox` (default: a new one with default limits).
        limits: :class:`atroposlib.sandbox.SandboxLimits` for each run (default: the sandbox's).
        output_limit: characters of output returned to the model.
    """

    name = "python"
    description = (
        "Run a Python 3 program in an isolated sandbox (no network, no files kept between calls) and get "
        "what it prints. Print every value you need."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {"code": {"type": "string", "description": "the complete program to run"}},
        "required": ["code"],
        "additionalProperties": False,
    }

    def __init__(self, sandbox: Any = None, limits: Any = None, output_limit: int = 2000):
        if sandbox is None:
            from atroposlib.sandbox import Sandbox

            sandbox = Sandbox()
        self.sandbox = sandbox
        self.limits = limits
        self.output_limit = int(output_limit)

    async def check(self) -> None:
        """Raise :class:`atroposlib.sandbox.SandboxError` naming the cause when the sandbox cannot run."""
        check = getattr(self.sandbox, "check", None)
        if check is None:
            return
        if asyncio.iscoroutinefunction(check):
            await check()
        else:  # a blocking start-up probe: keep the event loop free
            await asyncio.to_thread(check)

    async def call(self, arguments: dict[str, Any]) -> str:
        from atroposlib.sandbox import SandboxError

        try:
            result = await self.sandbox.run_python(arguments["code"], limits=self.limits)
        except SandboxError as exc:
            raise ToolError(f"the sandbox could not run the program: {exc}") from None
        return format_result(result, self.output_limit)
