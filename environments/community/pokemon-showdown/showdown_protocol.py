"""A Pokémon Showdown client over the server's websocket line protocol (``PROTOCOL.md`` of smogon/pokemon-showdown).

:class:`ShowdownClient` is one logged-in user: it connects to ``ws://HOST:PORT/showdown/websocket``, logs in
as a guest name with ``/trn NAME,0,`` (a server started with ``--no-security`` accepts names without an
authentication token), challenges or accepts a battle and sends battle decisions with ``/choose``. Server
messages arrive as chunks: an optional ``>ROOMID`` line, then protocol lines ``|TYPE|ARG|...``.
"""

from __future__ import annotations

import asyncio
import json
import re
from typing import Any, Optional

import aiohttp

_NON_ID = re.compile(r"[^a-z0-9]")


class ShowdownError(RuntimeError):
    """The Showdown server could not be reached, refused a command or stopped answering."""


def to_id(text: str) -> str:
    """Showdown's id of a name: lowercase letters and digits only (``"Mr. Mime"`` -> ``"mrmime"``)."""
    return _NON_ID.sub("", text.lower())


def split_chunk(message: str) -> tuple[str, list[list[str]]]:
    """``(room id, lines)`` of one server message; each line split at ``|`` (the empty first field dropped).

    Lines that are not protocol lines (plain chat text) come back as ``["", text]``.
    """
    lines = message.split("\n")
    room = ""
    if lines and lines[0].startswith(">"):
        room = lines.pop(0)[1:].strip()
    parsed = []
    for line in lines:
        if not line:
            continue
        parsed.append(line.split("|")[1:] if line.startswith("|") else ["", line])
    return room, parsed


class ShowdownClient:
    """One user connected to a Showdown server (see the module docstring).

    ``timeout`` (seconds) bounds every wait for the server; waiting longer raises :class:`ShowdownError`.
    ``None`` waits as long as it takes (an opponent waiting for the model's decision).
    """

    def __init__(self, url: str, name: str, timeout: Optional[float] = 60.0):
        self.url = url
        self.name = name
        self.user_id = to_id(name)
        self.timeout = timeout
        self._session: Optional[aiohttp.ClientSession] = None
        self._ws: Optional[aiohttp.ClientWebSocketResponse] = None

    async def connect(self) -> None:
        """Open the websocket and log in as :attr:`name`; wait until the server confirms the name."""
        self._session = aiohttp.ClientSession()
        try:
            self._ws = await self._session.ws_connect(self.url, timeout=aiohttp.ClientWSTimeout(ws_close=5))
        except (aiohttp.ClientError, OSError) as exc:
            await self.close()
            raise ShowdownError(f"cannot connect to the Showdown server at {self.url}: {exc}") from None
        await self.wait_for(lambda room, line: line[0] == "challstr", "the server's challstr")
        await self.send("", f"/trn {self.name},0,")

        def named(room: str, line: list[str]) -> bool:
            if line[0] == "nametaken":
                raise ShowdownError(f"the Showdown server refused the name {self.name!r}: {line[-1]}")
            return line[0] == "updateuser" and len(line) > 1 and to_id(line[1]) == self.user_id

        await self.wait_for(named, f"the login of {self.name!r}")

    async def send(self, room: str, text: str) -> None:
        """Send ``ROOMID|TEXT``."""
        if self._ws is None or self._ws.closed:
            raise ShowdownError(f"the connection of {self.name!r} to {self.url} is closed")
        await self._ws.send_str(f"{room}|{text}")

    async def receive(self) -> tuple[str, list[list[str]]]:
        """The next server message as :func:`split_chunk` gives it."""
        if self._ws is None:
            raise ShowdownError("not connected")
        try:
            message = await asyncio.wait_for(self._ws.receive(), self.timeout)
        except asyncio.TimeoutError:
            raise ShowdownError(f"the Showdown server sent nothing for {self.timeout} s") from None
        if message.type != aiohttp.WSMsgType.TEXT:
            raise ShowdownError(f"the Showdown server closed the connection of {self.name!r}")
        return split_chunk(message.data)

    async def wait_for(self, predicate: Any, what: str) -> tuple[str, list[str]]:
        """Read messages until ``predicate(room, line)`` holds for a line; return that ``(room, line)``.

        A ``|popup|`` (the server's error box, e.g. a refused challenge) raises :class:`ShowdownError`.
        """
        while True:
            try:
                room, lines = await self.receive()
            except ShowdownError as exc:
                raise ShowdownError(f"waiting for {what}: {exc}") from None
            for line in lines:
                if line[0] == "popup":
                    raise ShowdownError(f"the Showdown server answered {what} with: {'|'.join(line[1:])}")
                if predicate(room, line):
                    return room, line

    async def challenge(self, opponent: str, battle_format: str) -> None:
        """Challenge ``opponent`` to a ``battle_format`` battle with a server-made (random) team."""
        await self.send("", "/utm null")
        await self.send("", f"/challenge {opponent}, {battle_format}")

    async def accept_challenge_from(self, challenger: str) -> None:
        """Wait for a challenge from ``challenger`` and accept it with a server-made team."""
        wanted = to_id(challenger)

        def challenged(room: str, line: list[str]) -> bool:
            if line[0] == "updatechallenges" and len(line) > 1:
                return wanted in (json.loads(line[1]).get("challengesFrom") or {})
            # older servers announce a challenge as a PM "/challenge FORMAT"
            return (
                line[0] == "pm"
                and len(line) > 3
                and to_id(line[1]) == wanted
                and line[3].startswith("/challenge")
            )

        await self.wait_for(challenged, f"a challenge from {challenger!r}")
        await self.send("", "/utm null")
        await self.send("", f"/accept {challenger}")

    async def choose(self, room: str, choice: str, rqid: Any = None) -> None:
        """Send the decision ``choice`` (``move 2``, ``switch 3``, ``default``) for request ``rqid``."""
        await self.send(room, f"/choose {choice}" + (f"|{rqid}" if rqid is not None else ""))

    async def close(self) -> None:
        """Close the websocket and its HTTP session (safe to call twice)."""
        if self._ws is not None and not self._ws.closed:
            await self._ws.close()
        if self._session is not None and not self._session.closed:
            await self._session.close()
