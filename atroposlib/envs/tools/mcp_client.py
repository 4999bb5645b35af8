"""MCP servers as tools: start or connect to Model Context Protocol servers and call their tools.

Built on the official ``mcp`` SDK. An :class:`McpServerSpec` names a server and how to reach it: a
``command`` (with ``args``, ``env``, ``cwd``) started as a child process and spoken to over stdio, or the
``url`` of a streamable-HTTP endpoint. :class:`McpConnection` owns one session: a background task
enters the transport and the ``ClientSession``, initialises it, lists the server's tools and keeps the
session open until :meth:`McpConnection.close` (anyio requires the task that opened a session to close
it, so calls from any task go through that one session). :class:`McpTool` is one listed tool as a
:class:`~atroposlib.envs.tools.base.Tool`: its declared input schema is what the model sees and what
arguments are checked against; its answer is the text of the result's content blocks, cut to
``max_chars``; a result flagged as an error raises :class:`ToolError` with that text.

Calls are bounded by ``timeout_s`` on the client side: a tool that hangs costs its caller that long and
the session stays usable (the server may keep running the abandoned call).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
from typing import Any, Optional

from pydantic import BaseModel, Field, model_validator

from atroposlib.envs.tools.base import ToolError
from atroposlib.envs.tools.research import truncate

logger = logging.getLogger(__name__)


class McpServerSpec(BaseModel):
    """How to reach one MCP server: ``command`` (stdio) or ``url`` (streamable HTTP), exactly one."""

    name: str = Field(..., min_length=1, description="the server's name in logs and errors")
    command: Optional[str] = Field(None, description="executable that starts the server (stdio transport)")
    args: list[str] = Field(default_factory=list, description="arguments of the command")
    env: Optional[dict[str, str]] = Field(None, description="extra environment variables of the command")
    cwd: Optional[str] = Field(None, description="working directory of the command")
    url: Optional[str] = Field(None, description="streamable-HTTP endpoint, e.g. http://127.0.0.1:8000/mcp")

    @model_validator(mode="after")
    def _one_transport(self) -> McpServerSpec:
        if (self.command is None) == (self.url is None):
            raise ValueError(
                f"MCP server {self.name!r}: give exactly one of 'command' (stdio) or 'url' (HTTP)"
            )
        return self


def _field(obj: Any, snake: str, camel: str, default: Any = None) -> Any:
    """``obj.snake`` (mcp 2) or ``obj.camel`` (mcp 1)."""
    value = getattr(obj, snake, None)
    return getattr(obj, camel, default) if value is None else value


def result_text(result: Any) -> str:
    """The text of a ``CallToolResult``: its text blocks, other blocks as JSON, structured content last."""
    parts = []
    for block in getattr(result, "content", None) or []:
        text = getattr(block, "text", None)
        if text is not None:
            parts.append(str(text))
        else:
            dump = block.model_dump(exclude_none=True) if hasattr(block, "model_dump") else str(block)
            dump = {k: v for k, v in dump.items() if k != "data"} if isinstance(dump, dict) else dump
            parts.append(json.dumps(dump, default=str))
    if not parts:
        structured = _field(result, "structured_content", "structuredContent")
        if structured is not None:
            parts.append(json.dumps(structured, default=str))
    return "\n".join(parts)


class McpConnection:
    """One open session with one MCP server (see the module docstring)."""

    def __init__(self, spec: McpServerSpec, connect_timeout_s: float = 30.0):
        self.spec = spec
        self.connect_timeout_s = connect_timeout_s
        self.session: Any = None
        self.tools: list[Any] = []
        self._ready = asyncio.Event()
        self._stop = asyncio.Event()
        self._task: Optional[asyncio.Task] = None
        self._error: Optional[BaseException] = None

    def _transport(self) -> Any:
        if self.spec.command is not None:
            from mcp import StdioServerParameters
            from mcp.client.stdio import stdio_client

            params = StdioServerParameters(
                command=self.spec.command, args=self.spec.args, env=self.spec.env, cwd=self.spec.cwd
            )
            return stdio_client(params)
        from mcp.client import streamable_http

        connect = getattr(streamable_http, "streamable_http_client", None)
        if connect is None:  # mcp 1.x
            connect = streamable_http.streamablehttp_client
        return connect(self.spec.url)

    async def _run(self) -> None:
        from mcp import ClientSession

        try:
            async with self._transport() as streams:
                async with ClientSession(streams[0], streams[1]) as session:
                    await session.initialize()
                    self.tools = list((await session.list_tools()).tools)
                    self.session = session
                    self._ready.set()
                    await self._stop.wait()
        except asyncio.CancelledError:  # the event loop is shutting down
            raise
        except BaseException as exc:  # reported by start(); a closed session after start is logged
            self._error = exc
            if self._ready.is_set():
                logger.warning("MCP server %r: session ended: %s", self.spec.name, exc)
        finally:
            self.session = None
            self._ready.set()

    async def start(self) -> None:
        """Open the session and list the tools; RuntimeError naming the server when that fails."""
        self._task = asyncio.create_task(self._run(), name=f"mcp-{self.spec.name}")
        try:
            await asyncio.wait_for(self._ready.wait(), self.connect_timeout_s)
        except asyncio.TimeoutError:
            await self.close()
            raise RuntimeError(
                f"MCP server {self.spec.name!r}: no session within {self.connect_timeout_s} s"
            ) from None
        if self.session is None:
            error = self._error
            reason = f"{type(error).__name__}: {error}" if error else "it closed"
            await self.close()
            raise RuntimeError(f"MCP server {self.spec.name!r} could not be started or reached ({reason})")

    async def call(self, name: str, arguments: dict[str, Any], timeout_s: float) -> Any:
        """The server's ``CallToolResult`` for one call; ToolError when the session is gone or time runs out."""
        session = self.session
        if session is None:
            raise ToolError(f"the MCP server {self.spec.name!r} is not connected")
        try:
            return await asyncio.wait_for(
                session.call_tool(name, arguments, read_timeout_seconds=timeout_s), timeout_s
            )
        except asyncio.TimeoutError:
            raise ToolError(f"{name!r} did not answer within {timeout_s} s") from None

    async def close(self) -> None:
        """Close the session (and stop a stdio server's process)."""
        self._stop.set()
        if self._task is not None:
            try:
                await asyncio.wait_for(asyncio.shield(self._task), 10)
            except (asyncio.TimeoutError, Exception):
                self._task.cancel()
                with contextlib.suppress(BaseException):
                    await self._task
            self._task = None


class McpTool:
    """One tool of an MCP server (see the module docstring)."""

    def __init__(
        self, connection: McpConnection, listed: Any, timeout_s: float = 30.0, max_chars: int = 4000
    ):
        self.connection = connection
        self.name = str(listed.name)
        self.description = str(listed.description or f"{self.name} (MCP server {connection.spec.name!r})")
        schema = _field(listed, "input_schema", "inputSchema") or {}
        self.parameters: dict[str, Any] = dict(schema) or {"type": "object", "properties": {}}
        self.timeout_s = timeout_s
        self.max_chars = max_chars

    async def call(self, arguments: dict[str, Any]) -> str:
        result = await self.connection.call(self.name, arguments, self.timeout_s)
        text = truncate(result_text(result), self.max_chars)
        if _field(result, "is_error", "isError", False):
            raise ToolError(text or f"{self.name!r} failed")
        return text


async def connect_all(
    specs: list[McpServerSpec], connect_timeout_s: float, timeout_s: float, max_chars: int
) -> tuple[list[McpConnection], dict[str, McpTool]]:
    """Open every server and collect their tools by name; on any failure the opened ones are closed.

    Raises RuntimeError for a server that cannot be reached and ValueError when two servers offer a tool
    of the same name.
    """
    connections: list[McpConnection] = []
    tools: dict[str, McpTool] = {}
    owners: dict[str, str] = {}
    try:
        for spec in specs:
            connection = McpConnection(spec, connect_timeout_s)
            await connection.start()
            connections.append(connection)
            for listed in connection.tools:
                tool = McpTool(connection, listed, timeout_s=timeout_s, max_chars=max_chars)
                if tool.name in tools:
                    raise ValueError(
                        f"MCP servers {owners[tool.name]!r} and {spec.name!r} both offer a tool named {tool.name!r}"
                    )
                tools[tool.name] = tool
                owners[tool.name] = spec.name
    except BaseException:
        for connection in connections:
            await connection.close()
        raise
    return connections, tools
