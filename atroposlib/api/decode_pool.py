"""Inflating and decoding ingested groups in worker processes, so ingest uses more than one core.

Inflating a gzip body and decoding its token matrices is most of the CPU time of an ingest
request, and it depends on nothing but the body. The server's event loop hands large bodies to
a small pool of worker processes and, while they work, goes on parsing other requests and
committing decoded groups. Admission checks and the commit stay in the server process, in
arrival order of the decoded results, so the state is still changed by one thread only. A body
that arrives while no other is being decoded (one client sending one group at a time) is decoded
in the server process: there is nothing to overlap it with, and the hand-off would only add its
latency (on two cores, about 0.2 ms of a 0.7 ms request).

Each worker is a fresh interpreter (``python -m atroposlib.api.decode_pool FD``, so nothing of
the server's own ``__main__`` is re-run) serving one socket pair; requests to a worker are pipelined
and answered in order. The pool is started lazily by the first body large enough to use it;
until a worker is ready, and whenever one is lost (it is then replaced), bodies are decoded in
the server process, so the answer never depends on the pool.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import pickle
import signal
import socket
import struct
import subprocess
import sys
from dataclasses import dataclass
from multiprocessing.connection import Connection
from typing import Literal

from atroposlib.api.limits import Rejection, inflate_body
from atroposlib.api.validation import Group, InvalidRequest, decode_group, decode_group_list

logger = logging.getLogger("atroposlib.api")

Kind = Literal["one", "many"]
#: Bodies smaller than this (on the wire) are decoded in the server process: for them the hand-off
#: costs more than it saves.
DEFAULT_MIN_BYTES = 8 * 1024
#: Bodies this large or larger stay in the server process (frame sizes are sent as a signed
#: 32-bit length; this leaves room for the request's pickling overhead).
_MAX_FRAME = 1 << 30
_READY = b"ready"
#: Workers that die before they are ready, in a row, after which the pool stops replacing them.
_MAX_FAILED_STARTS = 3


@dataclass(frozen=True, slots=True)
class Decoded:
    """What decoding a body produced: groups, a schema error, or a body-level rejection."""

    groups: list[Group] | None = None
    invalid: InvalidRequest | None = None
    rejection: Rejection | None = None


def decode_body(kind: Kind, data: bytes, gzipped: bool, max_inflated_bytes: int) -> Decoded:
    """Inflate (when ``gzipped``) and decode an ingest body; the same in a worker and inline."""
    if gzipped:
        inflated = inflate_body(data, max_inflated_bytes)
        if isinstance(inflated, Rejection):
            return Decoded(rejection=inflated)
        data = inflated
    try:
        groups = [decode_group(data)] if kind == "one" else decode_group_list(data)
    except InvalidRequest as exc:
        return Decoded(invalid=exc)
    return Decoded(groups=groups)


def default_workers() -> int:
    """One worker per core beyond the server's own, at most 4 (0 on a single core)."""
    return max(0, min(4, (os.cpu_count() or 1) - 1))


# ---------------------------------------------------------------------------------- worker side


def _serve(conn: Connection) -> None:
    """Worker process: answer ``(kind, gzipped, limit, body)`` frames until the pipe closes."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server decides when workers stop
    conn.send_bytes(_READY)
    while True:
        try:
            frame = conn.recv_bytes()
        except (EOFError, OSError):
            return
        kind, gzipped, limit, data = pickle.loads(frame)
        try:
            reply = decode_body(kind, data, gzipped, limit)
        except Exception:  # the server decodes it itself and reports whatever this was
            reply = None
        conn.send_bytes(pickle.dumps(reply, protocol=pickle.HIGHEST_PROTOCOL))


# ---------------------------------------------------------------------------------- server side


class WorkerLost(Exception):
    """The worker died (or the pool closed) before answering."""


class _Worker:
    def __init__(self, process: subprocess.Popen, sock: socket.socket):
        self.process = process
        self.sock = sock
        self.pending: collections.deque[asyncio.Future] = collections.deque()
        self.ready = False
        self.alive = True
        self.reader: asyncio.StreamReader | None = None
        self.writer: asyncio.StreamWriter | None = None
        self.task: asyncio.Task | None = None


class DecodePool:
    """Up to ``workers`` decode processes; :meth:`decode` never fails because of them."""

    def __init__(
        self,
        workers: int,
        max_inflated_bytes: int,
        *,
        min_bytes: int = DEFAULT_MIN_BYTES,
        alone_inline: bool = True,
    ):
        self.size = workers
        self.max_inflated_bytes = max_inflated_bytes
        self.min_bytes = min_bytes
        self.alone_inline = alone_inline
        self._active = 0  # decode() calls in progress for bodies a worker could take
        self._workers: list[_Worker] = []
        self._closed = False
        self._failed_starts = 0
        #: Bodies decoded by a worker / in the server process (for metrics and tests).
        self.offloaded = 0
        self.inline = 0

    @property
    def ready_workers(self) -> int:
        return sum(1 for w in self._workers if w.ready and w.alive)

    async def decode(self, kind: Kind, data: bytes, gzipped: bool) -> Decoded:
        """Decode ``data`` in a worker when worth it and one is ready, else right here.

        With ``alone_inline``, a body that is the only one being decoded is decoded right here:
        with nothing to overlap it with, the hand-off would only add its latency. Deciding that
        waits one turn of the event loop, so that requests which arrived together are seen
        together.
        """
        if self.size > 0 and self.min_bytes <= len(data) < _MAX_FRAME and not self._closed:
            if not self._workers and self._failed_starts < _MAX_FAILED_STARTS:
                self._start()
            self._active += 1
            try:
                if self.alone_inline:
                    await asyncio.sleep(0)
                if self._active > 1 or not self.alone_inline:
                    reply = await self._offload((kind, gzipped, self.max_inflated_bytes, data))
                    if reply is not None:
                        return reply
            finally:
                self._active -= 1
        self.inline += 1
        return decode_body(kind, data, gzipped, self.max_inflated_bytes)

    async def _offload(self, request: tuple) -> Decoded | None:
        """The reply of the least busy ready worker; None without one, or when it was lost."""
        worker = min(
            (w for w in self._workers if w.ready and w.alive), key=lambda w: len(w.pending), default=None
        )
        if worker is None:
            return None
        with contextlib.suppress(WorkerLost):
            reply = await self._ask(worker, request)
            if reply is not None:
                self.offloaded += 1
            return reply
        return None

    async def _ask(self, worker: _Worker, request: tuple) -> Decoded | None:
        frame = pickle.dumps(request, protocol=pickle.HIGHEST_PROTOCOL)
        future = asyncio.get_running_loop().create_future()
        worker.pending.append(future)
        try:
            worker.writer.write(struct.pack("!i", len(frame)))
            worker.writer.write(frame)
            await worker.writer.drain()
        except (ConnectionError, OSError):
            self._lose(worker)
        return await future

    # ------------------------------------------------------------------ lifecycle

    def _start(self) -> None:
        for _ in range(self.size):
            self._spawn()

    def _spawn(self) -> None:
        sock, child = socket.socketpair()
        with child:
            process = subprocess.Popen(
                [sys.executable, "-m", "atroposlib.api.decode_pool", str(child.fileno())],
                pass_fds=[child.fileno()],
                stdin=subprocess.DEVNULL,
            )
        worker = _Worker(process, sock)
        self._workers.append(worker)
        worker.task = asyncio.get_running_loop().create_task(self._read(worker))

    async def _read(self, worker: _Worker) -> None:
        try:
            worker.reader, worker.writer = await asyncio.open_unix_connection(sock=worker.sock)
            while True:
                (size,) = struct.unpack("!i", await worker.reader.readexactly(4))
                if size == -1:
                    (size,) = struct.unpack("!Q", await worker.reader.readexactly(8))
                frame = await worker.reader.readexactly(size)
                if not worker.ready:
                    worker.ready = frame == _READY
                    self._failed_starts = 0
                    continue
                reply = pickle.loads(frame)
                future = worker.pending.popleft()
                if not future.done():
                    future.set_result(reply)
        except asyncio.CancelledError:
            self._lose(worker)
            raise
        except Exception as exc:  # EOF, a broken pipe, an unreadable reply: the worker is gone
            if not isinstance(exc, asyncio.IncompleteReadError | ConnectionError):
                logger.warning("decode worker (pid %s) failed: %r", worker.process.pid, exc)
        self._lose(worker)

    def _lose(self, worker: _Worker) -> None:
        if not worker.alive:
            return
        worker.alive = False
        while worker.pending:
            future = worker.pending.popleft()
            if not future.done():
                future.set_exception(WorkerLost())
        if worker.writer is not None:
            worker.writer.close()
        else:
            worker.sock.close()
        with contextlib.suppress(ValueError):
            self._workers.remove(worker)
        worker.process.poll()
        if self._closed:
            return
        if not worker.ready:
            self._failed_starts += 1
            if self._failed_starts >= _MAX_FAILED_STARTS:
                logger.error("decode workers cannot start; decoding in the server process from now on")
                return
        logger.warning("a decode worker (pid %s) exited; starting another", worker.process.pid)
        self._spawn()

    async def close(self) -> None:
        """Stop the workers (they exit when their pipe closes) and wait briefly for them."""
        self._closed = True
        workers, self._workers = list(self._workers), []
        for worker in workers:
            if worker.task is not None:
                worker.task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await worker.task
            else:
                self._lose(worker)
        for worker in workers:
            try:
                await asyncio.to_thread(worker.process.wait, 5)
            except subprocess.TimeoutExpired:
                worker.process.kill()
                worker.process.wait()


if __name__ == "__main__":  # a worker: python -m atroposlib.api.decode_pool FD
    # Through the imported module, so that replies pickle as atroposlib.api.decode_pool classes.
    from atroposlib.api import decode_pool

    decode_pool._serve(Connection(int(sys.argv[1])))
