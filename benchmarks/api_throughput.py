"""Trajectory API throughput: this server against atroposlib 0.4.0, same load, same run.

Both servers run as subprocesses on loopback with one uvicorn worker; the original comes from
PyPI (``atroposlib==0.4.0``) in its own virtualenv, created on first use under
``~/.cache/atroposlib/bench-venv-0.4.0`` (``--original-venv`` to change). The load is the
issue's: groups of 8 sequences x 512 tokens (128 masked prompt tokens), batch size 64, bodies
gzipped like the environment client sends them (``--no-gzip`` to send plain JSON).

Measured, alternating between the servers in every round (these machines are noisy, so the
ratios matter more than the absolute numbers):

- ingest: ``POST /scored_data`` requests per second at several concurrency levels, and the
  server's CPU time per request; the client sends
  pre-built requests over keep-alive sockets
  (``--client aiohttp`` for aiohttp), so that its own CPU use, shared with the servers on a small
  machine, stays a small part of the figure;
- ``GET /batch``: latency (p50/p99) to serve one batch of 64 sequences (``Accept-Encoding:
  gzip``, like ``requests``), with 8 fresh groups queued before each call;
- memory: resident memory growth per queued token after queueing many groups.

Usage: ``python benchmarks/api_throughput.py [--quick] [--json-out results.json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import json
import os
import random
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import urlsplit

import aiohttp
import orjson
import requests

from atroposlib.testing.api_process import free_port
from atroposlib.utils.processes import stop_process, tree_usage, wait_until_ok

ORIGINAL_VERSION = "0.4.0"
DEFAULT_VENV = Path.home() / ".cache" / "atroposlib" / f"bench-venv-{ORIGINAL_VERSION}"
GROUP_SIZE = 8
SEQ_LEN = 512
PROMPT_LEN = 128
BATCH_SIZE = 64
VOCAB = 151_000


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ------------------------------------------------------------------ the original, from PyPI


def ensure_original(venv: Path) -> Path:
    """The venv's python with atroposlib 0.4.0 and what its API server needs; created if missing.

    Only the server's own dependencies are installed (``--no-deps`` for atroposlib itself, whose
    full dependency list pulls in unrelated heavy packages).
    """
    python = venv / "bin" / "python"
    probe = [str(python), "-c", "import atroposlib.api.server, uvicorn"]
    # Run outside this checkout so that its atroposlib does not shadow the installed original.
    env = isolated_env()
    if python.exists() and subprocess.run(probe, capture_output=True, cwd=venv, env=env).returncode == 0:
        return python
    log(f"setting up atroposlib=={ORIGINAL_VERSION} in {venv} (first run only)...")
    venv.parent.mkdir(parents=True, exist_ok=True)
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(python), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    subprocess.run([*pip, "--no-deps", f"atroposlib=={ORIGINAL_VERSION}"], check=True)
    subprocess.run([*pip, "fastapi", "uvicorn[standard]", "pydantic"], check=True)
    subprocess.run(probe, check=True, cwd=venv, env=env)
    return python


def isolated_env() -> dict[str, str]:
    """The environment without ``PYTHONPATH`` (so a venv sees only its own packages)."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


# ------------------------------------------------------------------ servers


@dataclass
class Server:
    name: str
    cmd: list[str]
    port: int
    cwd: Path
    env: dict[str, str] | None = None
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> None:
        """Start on a free loopback port (written into the command's ``--port``); wait for ``/info``."""
        self.port = free_port()
        self.cmd[self.cmd.index("--port") + 1] = str(self.port)
        self.proc = subprocess.Popen(
            self.cmd,
            cwd=self.cwd,
            env=self.env,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        wait_until_ok(self.proc, f"{self.url}/info", name=f"{self.name} server", timeout=60)

    def stop(self) -> None:
        stop_process(self.proc, 20)

    def cpu_seconds(self) -> float:
        """User + system CPU time of the server and its live child processes so far."""
        return tree_usage(self.proc.pid)[0]

    def rss_bytes(self) -> int:
        """Resident memory of the server and its live child processes."""
        return tree_usage(self.proc.pid)[1]


def uvicorn_command(python: Path | str, app: str, *extra: str) -> list[str]:
    """``python -m uvicorn APP`` on loopback (port chosen at start), quiet, without access log."""
    return [
        str(python), "-m", "uvicorn", app, *extra,
        "--host", "127.0.0.1", "--port", "0", "--log-level", "warning", "--no-access-log",
    ]  # fmt: skip


@contextlib.contextmanager
def servers(original_python: Path | None, workdir: Path) -> Iterator[list[Server]]:
    ours = Server(
        "this",
        [
            sys.executable,
            "-m",
            "atroposlib.cli.run_api",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--data-dir",
            str(workdir / "data"),
            "--log-level",
            "warning",
        ],  # fmt: skip
        0,
        workdir,
    )
    started: list[Server] = [ours]
    if original_python is not None:
        # The original's run-api is uvicorn.run("atroposlib.api:app"); served the same way here,
        # with its access log off like ours, so logging does not count against it.
        started.append(
            Server(
                f"atroposlib {ORIGINAL_VERSION}",
                uvicorn_command(original_python, "atroposlib.api:app"),
                0,
                workdir,
                isolated_env(),
            )
        )
    try:
        for server in started:
            server.start()
        yield started
    finally:
        for server in started:
            server.stop()


# ------------------------------------------------------------------ load


#: Top-k of the distillation cubes added by ``--with-distill``.
DISTILL_TOP_K = 5


def make_payloads(
    count: int, compress: bool, with_logprobs: bool, seed: int = 0, *, with_distill: bool = False
) -> list[bytes]:
    rng = random.Random(seed)
    payloads = []
    for _ in range(count):
        tokens = [[rng.randrange(VOCAB) for _ in range(SEQ_LEN)] for _ in range(GROUP_SIZE)]
        group = {
            "tokens": tokens,
            "masks": [[-100] * PROMPT_LEN + row[PROMPT_LEN:] for row in tokens],
            "scores": [rng.choice([0.0, 1.0]) for _ in range(GROUP_SIZE)],
        }
        if with_logprobs:
            group["inference_logprobs"] = [
                [1.0] * PROMPT_LEN + [-rng.random() * 5 for _ in range(SEQ_LEN - PROMPT_LEN)] for _ in tokens
            ]
        if with_distill:
            group["distill_token_ids"] = [
                [[rng.randrange(VOCAB) for _ in range(DISTILL_TOP_K)] for _ in range(SEQ_LEN)] for _ in tokens
            ]
            group["distill_logprobs"] = [
                [sorted(-rng.random() * 10 for _ in range(DISTILL_TOP_K))[::-1] for _ in range(SEQ_LEN)]
                for _ in tokens
            ]
        data = json.dumps(group).encode()
        payloads.append(gzip.compress(data) if compress else data)
    return payloads


def headers_for(compress: bool) -> dict[str, str]:
    headers = {"Content-Type": "application/json"}
    if compress:
        headers["Content-Encoding"] = "gzip"
    return headers


def reset_and_register(server: Server) -> None:
    requests.get(f"{server.url}/reset_data", timeout=30)
    registration = {
        "wandb_group": "bench",
        "wandb_project": "bench",
        "batch_size": BATCH_SIZE,
        "max_token_len": 2048,
        "checkpoint_dir": "/tmp/bench",
        "save_checkpoint_interval": 1000,
        "starting_step": 0,
        "num_steps": 1000,
    }
    requests.post(f"{server.url}/register", json=registration, timeout=30).raise_for_status()


async def ingest(
    url: str, payloads: list[bytes], requests_total: int, concurrency: int, headers: dict
) -> float:
    """Requests per second for ``requests_total`` posts spread over ``concurrency`` connections."""
    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        counter = iter(range(requests_total))

        async def worker() -> None:
            for i in counter:
                async with session.post(
                    f"{url}/scored_data", data=payloads[i % len(payloads)], headers=headers
                ) as r:
                    await r.read()
                    if r.status != 200:
                        raise RuntimeError(f"ingest got {r.status}: {await r.text()}")

        started = time.perf_counter()
        await asyncio.gather(*(worker() for _ in range(concurrency)))
        return requests_total / (time.perf_counter() - started)


class _PostLoop(asyncio.Protocol):
    """One keep-alive connection posting pre-built requests back to back, driven by callbacks.

    The response head is parsed just enough to check the status and find ``Content-Length``; the
    next request goes out as soon as a response is complete.
    """

    def __init__(self, wire: list[bytes], counter: Iterator[int], done: asyncio.Future):
        self.wire = wire
        self.counter = counter
        self.done = done
        self.buffer = b""
        self.body_end: int | None = None
        self.transport: asyncio.Transport | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]
        self._next()

    def _next(self) -> None:
        i = next(self.counter, None)
        if i is None:
            self.transport.close()
            if not self.done.done():
                self.done.set_result(None)
            return
        self.transport.write(self.wire[i % len(self.wire)])

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        while True:
            if self.body_end is None:
                head_end = self.buffer.find(b"\r\n\r\n")
                if head_end < 0:
                    return
                head = self.buffer[:head_end].lower()
                at = head.find(b"content-length:")
                if at < 0:
                    return self._fail(f"response without Content-Length: {head!r}")
                line_end = head.find(b"\r\n", at)
                length = int(head[at + 15 : line_end if line_end >= 0 else len(head)])
                if head[9:12] != b"200":
                    return self._fail(f"ingest got {head[9:12].decode()}: {self.buffer[:300]!r}")
                self.body_end = head_end + 4 + length
            if len(self.buffer) < self.body_end:
                return
            self.buffer = self.buffer[self.body_end :]
            self.body_end = None
            self._next()
            if not self.buffer:
                return

    def _fail(self, message: str) -> None:
        if not self.done.done():
            self.done.set_exception(RuntimeError(message))
        self.transport.close()

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_exception(exc or RuntimeError("server closed the connection"))


async def ingest_raw(
    url: str, payloads: list[bytes], requests_total: int, concurrency: int, headers: dict
) -> float:
    """As :func:`ingest`, over plain keep-alive HTTP/1.1 connections with pre-built requests.

    Each request is one precomputed byte string (head + gzipped body), sent by a callback-driven
    protocol (:class:`_PostLoop`). This client spends a small fraction of aiohttp's CPU per
    request, so on a small machine, where client and server share the cores, the figures
    measure the servers rather than the client.
    """
    parts = urlsplit(url)
    extra = "".join(f"{k}: {v}\r\n" for k, v in headers.items())
    wire = [
        (
            f"POST /scored_data HTTP/1.1\r\nHost: {parts.netloc}\r\n{extra}"
            f"Content-Length: {len(body)}\r\n\r\n"
        ).encode()
        + body
        for body in payloads
    ]
    loop = asyncio.get_running_loop()
    counter = iter(range(requests_total))
    done = [loop.create_future() for _ in range(concurrency)]
    started = time.perf_counter()
    for future in done:
        await loop.create_connection(lambda f=future: _PostLoop(wire, counter, f), parts.hostname, parts.port)
    await asyncio.gather(*done)
    return requests_total / (time.perf_counter() - started)


def batch_latency(server: Server, payloads: list[bytes], headers: dict, session: requests.Session) -> float:
    """Seconds for one ``GET /batch`` serving 64 sequences (8 groups queued beforehand)."""
    for i in range(BATCH_SIZE // GROUP_SIZE):
        session.post(
            f"{server.url}/scored_data", data=payloads[i], headers=headers, timeout=30
        ).raise_for_status()
    started = time.perf_counter()
    response = session.get(
        f"{server.url}/batch", headers={"Accept-Encoding": "gzip"}, timeout=60, stream=True
    )
    raw = response.raw.read(decode_content=False)
    elapsed = time.perf_counter() - started
    body = gzip.decompress(raw) if response.headers.get("Content-Encoding") == "gzip" else raw
    batch = orjson.loads(body)["batch"]
    if sum(len(g["tokens"]) for g in batch) != BATCH_SIZE:
        raise RuntimeError(f"{server.name} served a wrong batch")
    return elapsed


def queued_memory(server: Server, payloads: list[bytes], groups: int, headers: dict) -> float:
    """Resident bytes per queued token after queueing ``groups`` groups (after a warm-up)."""
    reset_and_register(server)
    asyncio.run(ingest(server.url, payloads, BATCH_SIZE // GROUP_SIZE * 4, 4, headers))
    while requests.get(f"{server.url}/batch", timeout=60).json().get("batch"):
        pass
    time.sleep(0.5)
    before = server.rss_bytes()
    asyncio.run(ingest(server.url, payloads, groups, 4, headers))
    time.sleep(0.5)
    after = server.rss_bytes()
    return (after - before) / (groups * GROUP_SIZE * SEQ_LEN)


# ------------------------------------------------------------------ report


@dataclass
class Results:
    ingest: dict[str, dict[int, list[float]]] = field(default_factory=dict)
    ingest_cpu: dict[str, list[float]] = field(default_factory=dict)
    batch: dict[str, list[float]] = field(default_factory=dict)
    memory: dict[str, float] = field(default_factory=dict)


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    index = min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))
    return ordered[index]


def report(results: Results, names: list[str], levels: list[int]) -> dict:
    ours, original = names[0], (names[1] if len(names) > 1 else None)
    summary: dict = {"ingest_req_per_s": {}, "batch_ms": {}, "bytes_per_queued_token": {}}
    print(f"\nTrajectory API benchmark: groups of {GROUP_SIZE} x {SEQ_LEN} tokens, batch {BATCH_SIZE}")
    print(f"{'':28}" + "".join(f"{n:>22}" for n in names) + ("          ratio" if original else ""))
    for level in levels:
        values = [statistics.median(results.ingest[n][level]) for n in names]
        summary["ingest_req_per_s"][level] = dict(zip(names, values, strict=True))
        ratio = f"{values[0] / values[1]:>14.1f}x" if original else ""
        print(f"{f'ingest req/s (conc {level})':28}" + "".join(f"{v:>22.0f}" for v in values) + ratio)
    cpu = [statistics.median(results.ingest_cpu[n]) * 1000 for n in names]
    summary["ingest_server_cpu_ms"] = dict(zip(names, cpu, strict=True))
    ratio = f"{cpu[1] / cpu[0]:>14.1f}x" if original else ""
    print(f"{'ingest server CPU ms/req':28}" + "".join(f"{v:>22.3f}" for v in cpu) + ratio)
    for label, q in (("/batch p50 (ms)", 0.5), ("/batch p99 (ms)", 0.99)):
        values = [percentile(results.batch[n], q) * 1000 for n in names]
        summary["batch_ms"][label.split()[1]] = dict(zip(names, values, strict=True))
        ratio = f"{values[1] / values[0]:>14.1f}x" if original else ""
        print(f"{label:28}" + "".join(f"{v:>22.2f}" for v in values) + ratio)
    values = [results.memory[n] for n in names]
    summary["bytes_per_queued_token"] = dict(zip(names, values, strict=True))
    ratio = f"{values[1] / max(values[0], 1e-9):>14.1f}x" if original else ""
    print(f"{'RSS bytes / queued token':28}" + "".join(f"{v:>22.2f}" for v in values) + ratio)
    if original:
        best = max(
            levels,
            key=lambda lv: summary["ingest_req_per_s"][lv][ours] / summary["ingest_req_per_s"][lv][original],
        )
        ingest_ratio = min(
            summary["ingest_req_per_s"][lv][ours] / summary["ingest_req_per_s"][lv][original] for lv in levels
        )
        batch_ratio = summary["batch_ms"]["p50"][original] / summary["batch_ms"]["p50"][ours]
        print("\nTargets:")
        print(
            f"  /batch >= 10x faster (p50):      {batch_ratio:6.1f}x  {'met' if batch_ratio >= 10 else 'NOT met'}"
        )
        print(f"  ingest >= 3x (worst level):      {ingest_ratio:6.1f}x  {'met' if ingest_ratio >= 3 else 'NOT met'}"
              f"  (best: {summary['ingest_req_per_s'][best][ours] / summary['ingest_req_per_s'][best][original]:.1f}x"
              f" at concurrency {best})")  # fmt: skip
        memory_ok = values[0] <= 8
        print(f"  <= 8 bytes RSS per queued token: {values[0]:6.2f}   {'met' if memory_ok else 'NOT met'}")
        cpu_ratio = cpu[1] / cpu[0]
        print(f"  (ingest server CPU per request:  {cpu_ratio:6.1f}x less than the original)")
        summary["ratios"] = {"batch_p50": batch_ratio, "ingest_worst": ingest_ratio, "ingest_cpu": cpu_ratio}
    return summary


# ------------------------------------------------------------------ main


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="Fewer requests and rounds (about a minute).")
    parser.add_argument(
        "--concurrency", default="1,4,8,16", help="Comma-separated ingest concurrency levels."
    )
    parser.add_argument("--rounds", type=int, default=None, help="Alternating rounds per measurement.")
    parser.add_argument("--requests", type=int, default=None, help="Ingest requests per measurement.")
    parser.add_argument("--batches", type=int, default=None, help="/batch calls timed per server.")
    parser.add_argument(
        "--memory-groups", type=int, default=None, help="Groups queued for the memory figure."
    )
    parser.add_argument("--no-gzip", action="store_true", help="Send plain JSON bodies.")
    parser.add_argument(
        "--client",
        choices=["raw", "aiohttp"],
        default="raw",
        help="Ingest client: pre-built requests on keep-alive sockets (cheap) or aiohttp.",
    )
    parser.add_argument("--with-logprobs", action="store_true", help="Add inference_logprobs to every group.")
    parser.add_argument(
        "--with-distill",
        action="store_true",
        help=f"Add top-{DISTILL_TOP_K} distill_token_ids and distill_logprobs to every group.",
    )
    parser.add_argument("--original-venv", type=Path, default=DEFAULT_VENV)
    parser.add_argument("--skip-original", action="store_true", help="Benchmark this server alone.")
    parser.add_argument("--json-out", type=Path, default=None, help="Also write the figures as JSON.")
    args = parser.parse_args(argv)

    quick = args.quick
    levels = [int(x) for x in args.concurrency.split(",") if x.strip()]
    rounds = args.rounds or (1 if quick else 3)
    n_requests = args.requests or (150 if quick else 400)
    n_batches = args.batches or (10 if quick else 30)
    memory_groups = args.memory_groups or (150 if quick else 500)
    compress = not args.no_gzip
    load = ingest_raw if args.client == "raw" else ingest
    headers = headers_for(compress)

    original_python = None if args.skip_original else ensure_original(args.original_venv)
    payloads = make_payloads(64, compress, args.with_logprobs, with_distill=args.with_distill)
    load_average = os.getloadavg()[0]
    log(f"load average before start: {load_average:.2f} on {os.cpu_count()} CPUs")

    workdir = Path(tempfile.mkdtemp(prefix="atropos-bench-"))
    results = Results()
    try:
        with servers(original_python, workdir) as started:
            names = [s.name for s in started]
            for server in started:
                results.ingest[server.name] = {level: [] for level in levels}
                results.ingest_cpu[server.name] = []
                results.batch[server.name] = []
            log("memory per queued token...")
            for server in started:
                results.memory[server.name] = queued_memory(server, payloads, memory_groups, headers)
            for r in range(rounds):
                order = started if r % 2 == 0 else list(reversed(started))
                for level in levels:
                    for server in order:
                        reset_and_register(server)
                        cpu_before = server.cpu_seconds()
                        rate = asyncio.run(load(server.url, payloads, n_requests, level, headers))
                        results.ingest_cpu[server.name].append(
                            (server.cpu_seconds() - cpu_before) / n_requests
                        )
                        results.ingest[server.name][level].append(rate)
                        log(f"round {r + 1}/{rounds} ingest conc {level:>2} {server.name}: {rate:.0f} req/s")
            sessions = {s.name: requests.Session() for s in started}
            for server in started:
                reset_and_register(server)
                batch_latency(server, payloads, headers, sessions[server.name])  # warm-up
            for i in range(n_batches):
                order = started if i % 2 == 0 else list(reversed(started))
                for server in order:
                    results.batch[server.name].append(
                        batch_latency(server, payloads, headers, sessions[server.name])
                    )
            log("done")
        summary = report(results, names, levels)
        summary["settings"] = {
            "gzip_requests": compress,
            "with_logprobs": args.with_logprobs,
            "with_distill": args.with_distill,
            "rounds": rounds,
            "requests": n_requests,
            "batches": n_batches,
            "memory_groups": memory_groups,
            "client": args.client,
            "load_average": load_average,
            "cpus": os.cpu_count(),
        }
        if args.json_out:
            args.json_out.write_text(json.dumps(summary, indent=2))
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


if __name__ == "__main__":
    main()
