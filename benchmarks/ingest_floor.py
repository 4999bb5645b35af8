"""The latency floor of one ingest request at a time (concurrency 1), measured, not assumed.

At concurrency 1 a client waits for each answer before it sends the next group, so requests per
second are one over the round trip, and the second core cannot help. This script measures, in one
run and with the same client and bodies as ``api_throughput.py``:

- ``http``: the round trip through uvicorn (httptools, as ``run-api`` serves) of an ASGI app that
  reads the body and answers at once: what HTTP, the client and the kernel cost before any work;
- the same through a bare httptools protocol on uvloop, with no ASGI: what uvicorn's request
  cycle adds to ``http``, the most a server that bypassed it could save;
- ``decode``: inflating, checking and encoding for storage one body in this process, as the server does
  it (:func:`atroposlib.api.limits.inflate_gzip` and :func:`atroposlib.api.decode.decode_group`), the work no server may skip (the answer must
  say whether the group was acceptable);
- ``commit``: queueing one decoded group in the default durable store, in this process;
- this server and atroposlib 0.4.0 at concurrency 1.

It prints the ceilings these imply for a server on uvicorn with this decoder on this machine
(``1 / (http + decode)`` before storage, ``1 / (http + decode + commit)`` with it), as multiples of
0.4.0's rate; whatever a real server adds on top (its framework, its answer) comes off them.

Usage: ``python benchmarks/ingest_floor.py [--requests 3000] [--skip-original]``.
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import sys
import tempfile
import time
from pathlib import Path

import httptools
import uvloop

sys.path.insert(0, str(Path(__file__).resolve().parent))

import api_throughput as bench  # noqa: E402

from atroposlib.api.decode import decode_group  # noqa: E402
from atroposlib.api.limits import inflate_gzip  # noqa: E402
from atroposlib.api.schemas import Registration  # noqa: E402
from atroposlib.api.state import TrajectoryState  # noqa: E402
from atroposlib.api.store import SqliteStore  # noqa: E402

_ANSWER = b'{"status":"received"}'
_RAW_ANSWER = b"HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: %d\r\n\r\n%s" % (
    len(_ANSWER),
    _ANSWER,
)


async def null_app(scope, receive, send) -> None:
    """Read the whole body, answer 200 without looking at it."""
    if scope["type"] != "http":
        return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    headers = [(b"content-type", b"application/json"), (b"content-length", str(len(_ANSWER)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": _ANSWER})


def null_server(workdir: Path) -> bench.Server:
    app_dir = str(Path(__file__).resolve().parent)
    command = bench.uvicorn_command(sys.executable, "ingest_floor:null_app", "--app-dir", app_dir)
    return bench.Server("null ASGI app", command, 0, workdir)


class NullProtocol(asyncio.Protocol):
    """HTTP/1.1 on a bare httptools parser: each request's body is read, then answered at once."""

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport
        self.parser = httptools.HttpRequestParser(self)

    def data_received(self, data: bytes) -> None:
        self.parser.feed_data(data)

    def on_message_complete(self) -> None:
        self.transport.write(_RAW_ANSWER)


def serve_null_protocol(port: int) -> None:
    async def serve() -> None:
        server = await asyncio.get_running_loop().create_server(NullProtocol, "127.0.0.1", port)
        await server.serve_forever()

    uvloop.run(serve())


def null_protocol_server(workdir: Path) -> bench.Server:
    command = [sys.executable, str(Path(__file__).resolve()), "--null-protocol-server", "--port", "0"]
    return bench.Server("null httptools protocol", command, 0, workdir)


def decode_seconds(payloads: list[bytes], repeats: int) -> float:
    """Median seconds to inflate, check and re-encode one body in this process."""
    samples = []
    for _ in range(5):
        started = time.perf_counter()
        for i in range(repeats):
            decoded = decode_group(inflate_gzip(payloads[i % len(payloads)], 1 << 30))
        samples.append((time.perf_counter() - started) / repeats)
        assert not decoded.problems
    return statistics.median(samples)


def commit_seconds(payloads: list[bytes], repeats: int, data_dir: Path) -> float:
    """Median seconds to queue one decoded group durably (the default SQLite store, in this process)."""
    groups = [[decode_group(inflate_gzip(body, 1 << 30))] for body in payloads]
    registration = Registration(
        wandb_group="floor",
        wandb_project="floor",
        batch_size=bench.BATCH_SIZE,
        max_token_len=2048,
        checkpoint_dir=str(data_dir / "checkpoints"),
        save_checkpoint_interval=1000,
        starting_step=0,
        num_steps=1000,
    )
    state = TrajectoryState(SqliteStore(data_dir))
    try:
        state.register(registration)
        samples = []
        for _ in range(5):
            started = time.perf_counter()
            for i in range(repeats):
                state.ingest(groups[i % len(groups)])
            samples.append((time.perf_counter() - started) / repeats)
            state.reset()
            state.register(registration)
        return statistics.median(samples)
    finally:
        state.store.close()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=3000, help="Requests per measurement.")
    parser.add_argument("--original-venv", type=Path, default=bench.DEFAULT_VENV)
    parser.add_argument("--skip-original", action="store_true", help="Leave atroposlib 0.4.0 out.")
    parser.add_argument("--null-protocol-server", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.null_protocol_server:
        serve_null_protocol(args.port)
        return

    payloads = bench.make_payloads(64, True, False)
    headers = bench.headers_for(True)
    original_python = None if args.skip_original else bench.ensure_original(args.original_venv)
    workdir = Path(tempfile.mkdtemp(prefix="atropos-floor-"))

    def rate(server: bench.Server, register: bool) -> float:
        if register:
            bench.reset_and_register(server)
        return asyncio.run(bench.ingest_raw(server.url, payloads, args.requests, 1, headers))

    rates: dict[str, list[float]] = {}
    nulls = [null_server(workdir), null_protocol_server(workdir)]
    try:
        for null in nulls:
            null.start()
        with bench.servers(original_python, workdir) as started:
            for _ in range(3):
                for null in nulls:
                    rates.setdefault(null.name, []).append(rate(null, register=False))
                for server in started:
                    rates.setdefault(server.name, []).append(rate(server, register=True))
    finally:
        for null in nulls:
            null.stop()
    decode = decode_seconds(payloads, max(200, args.requests // 5))
    commit = commit_seconds(payloads, max(200, args.requests // 5), workdir / "commit")

    median = {name: statistics.median(values) for name, values in rates.items()}
    null, bare = nulls
    http = 1 / median[null.name]
    bare_http = 1 / median[bare.name]
    ceiling = 1 / (http + decode)
    durable = 1 / (http + decode + commit)
    print(f"\nIngest at concurrency 1, groups of {bench.GROUP_SIZE} x {bench.SEQ_LEN} tokens, gzipped")
    print(f"  http round trip, null ASGI app:        {http * 1e3:7.3f} ms  ({median[null.name]:.0f} req/s)")
    print(
        f"  same, null httptools protocol, no ASGI:{bare_http * 1e3:7.3f} ms  ({median[bare.name]:.0f} req/s)"
    )
    print(f"    (uvicorn's ASGI request cycle:       {(http - bare_http) * 1e3:7.3f} ms)")
    print(f"  inflate + check + encode, one body:    {decode * 1e3:7.3f} ms")
    print(f"  queue it durably (SQLite + payload):   {commit * 1e3:7.3f} ms")
    print(f"  ceiling without storage, 1/(http+decode):        {ceiling:7.0f} req/s")
    print(f"  ceiling with the durable commit, 1/(all three):  {durable:7.0f} req/s")
    for name in median:
        if name not in (null.name, bare.name):
            print(f"  {name + ':':38} {median[name]:7.0f} req/s  ({1e3 / median[name]:.3f} ms per request)")
    original = next((n for n in median if n.startswith("atroposlib")), None)
    if original:
        print(
            f"\n  ceilings / {original}: {ceiling / median[original]:.2f}x, {durable / median[original]:.2f}x"
        )
        print(f"  this / {original}:    {median['this'] / median[original]:.2f}x")
        print(f"  3x {original} needs a round trip of {1e3 / (3 * median[original]):.3f} ms")


if __name__ == "__main__":
    main()
