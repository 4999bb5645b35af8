"""The servers file: where a run's inference servers are, written by whoever starts them, read by environments.

An environment given ``--openai.servers_file PATH`` (instead of ``--openai.base_url``) sends its requests to the
servers the file lists, one OpenAI-style base URL (``http://host:port/v1``) each, and follows the file while it
runs: its :class:`~atroposlib.envs.server_handling.server_manager.ServerManager` looks at the file once a second
(a changed modification time or size) and reads it again every second while some server is not answering, so a
server restarted on another address is found without touching the environment's command line. The trainer's
inference server manager writes the file each time it (re)starts its server (``--inference-servers-file``,
default ``<--log-dir>/inference_servers.txt``).

Format: one URL a line (blank lines and ``#`` comments ignored), or a YAML list of URLs. Every other
``--openai.*`` setting applies to each listed server. The file is replaced atomically by
:func:`write_servers_file`, so a reader never sees half of it.
"""

from __future__ import annotations

import logging
import os
import tempfile
from collections.abc import Iterable
from pathlib import Path
from typing import Optional, Union

import yaml

logger = logging.getLogger(__name__)

PathLike = Union[str, "os.PathLike[str]"]


class ServersFileError(ValueError):
    """The servers file is missing, empty or malformed (the message is one line naming the file)."""


def parse_servers(text: str, source: str = "servers file") -> list[str]:
    """The base URLs listed in ``text`` (one a line, or a YAML list), without trailing slashes.

    Raises:
        ServersFileError: no URL, a YAML document that is not a list of strings, or an entry that is not an
            ``http(s)://`` URL.
    """
    stripped = text.strip()
    if stripped.startswith(("-", "[")):
        try:
            entries = yaml.safe_load(stripped)
        except yaml.YAMLError as exc:
            problem = str(exc).splitlines()[0]
            raise ServersFileError(f"{source}: not a valid YAML list of URLs ({problem})") from None
        if not isinstance(entries, list) or not all(isinstance(e, str) for e in entries):
            raise ServersFileError(f"{source}: a YAML list must hold URL strings, got {entries!r}")
    else:
        entries = [line.split("#", 1)[0] for line in stripped.splitlines()]
    urls = [e.strip().rstrip("/") for e in entries if e and e.strip()]
    if not urls:
        raise ServersFileError(
            f"{source} lists no inference server (expected base URLs like http://host:port/v1)"
        )
    for url in urls:
        if not url.startswith(("http://", "https://")) or " " in url:
            raise ServersFileError(f"{source}: {url!r} is not a base URL like http://host:port/v1")
    return urls


def read_servers_file(path: PathLike) -> list[str]:
    """The base URLs listed in the file at ``path`` (see :func:`parse_servers`).

    Raises:
        ServersFileError: the file cannot be read, or :func:`parse_servers` refuses it.
    """
    try:
        text = Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise ServersFileError(
            f"servers file {path} does not exist (it is written by whoever starts the inference servers)"
        ) from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ServersFileError(f"servers file {path} cannot be read: {exc}") from None
    return parse_servers(text, f"servers file {path}")


def write_servers_file(path: PathLike, urls: Iterable[str]) -> None:
    """Replace the file at ``path`` by ``urls``, one a line, atomically (readers see the old or the new list)."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    body = "".join(f"{url}\n" for url in urls)
    parse_servers(body, f"servers for {target}")  # never publish a list readers would refuse
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=str(target.parent))
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as out:
            out.write(body)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class ServersFile:
    """A servers file and the URLs last read from it.

    Construction reads it (:class:`ServersFileError` when it cannot be used). :meth:`poll` reports a new list
    of URLs, or None when nothing changed; a file that became unreadable keeps the last list (with one
    warning per distinct problem), since the writer may be between two versions.
    """

    def __init__(self, path: PathLike) -> None:
        self.path = Path(path)
        self.urls: list[str] = read_servers_file(self.path)
        self._stamp = self._stat()
        self._last_problem: Optional[str] = None

    def _stat(self) -> Optional[tuple[int, int]]:
        try:
            st = self.path.stat()
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def poll(self, force: bool = False) -> Optional[list[str]]:
        """The new URL list when the file changed (or, with ``force``, whenever its content differs)."""
        stamp = self._stat()
        if not force and stamp == self._stamp:
            return None
        self._stamp = stamp
        try:
            urls = read_servers_file(self.path)
        except ServersFileError as exc:
            if str(exc) != self._last_problem:
                logger.warning("%s; keeping the servers %s", exc, ", ".join(self.urls))
                self._last_problem = str(exc)
            return None
        self._last_problem = None
        if urls == self.urls:
            return None
        self.urls = urls
        return urls
