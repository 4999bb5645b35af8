"""A small MCP server for the MCP environment's tests (official ``mcp`` SDK).

Tools: ``add`` and ``capital_of`` answer; ``fail`` raises, ``hang`` sleeps, ``huge`` answers with ``size``
characters. ``python mcp_tools_server.py`` serves over stdio; ``python mcp_tools_server.py PORT`` serves
streamable HTTP on ``127.0.0.1:PORT/mcp``.
"""

from __future__ import annotations

import sys

import anyio
from mcp.server.mcpserver import MCPServer

CAPITALS = {"Norway": "Oslo", "Peru": "Lima", "Kenya": "Nairobi"}

server = MCPServer("test-tools")


@server.tool()
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


@server.tool()
def capital_of(country: str) -> str:
    """The capital city of a country."""
    if country not in CAPITALS:
        raise ValueError(f"unknown country {country!r}")
    return CAPITALS[country]


@server.tool()
def fail(reason: str) -> str:
    """Always fails with the given reason."""
    raise RuntimeError(reason)


@server.tool()
async def hang(seconds: float) -> str:
    """Sleep for the given number of seconds."""
    await anyio.sleep(seconds)
    return "awake"


@server.tool()
def huge(size: int) -> str:
    """Answer with size characters."""
    return "x" * size


if __name__ == "__main__":
    if len(sys.argv) > 1:
        server.run(transport="streamable-http", host="127.0.0.1", port=int(sys.argv[1]))
    else:
        server.run()
