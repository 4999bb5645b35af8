"""Capacity of one trajectory API: many environments posting, one trainer pulling, for a fixed time.

One ``run-api`` process (durable SQLite store, defaults) on loopback. The load:

- ``--clients`` simulated environments (default 64), each registered with ``POST /register-env`` and
  posting groups to ``/scored_data`` back to back over its own keep-alive connection, gzipped as the
  environment client sends them, honouring 503 backpressure (``Retry-After``). A group is
  ``--group-size`` sequences of ``--seq-len`` tokens (a quarter of them masked prompt) with
  rollout logprobs, like a real environment's;
- one trainer registered with ``--batch-size`` sequences per batch, pulling ``GET /batch`` as fast as
  batches form and acknowledging each (``POST /batch/ack``), as ``atropos-grpo`` does.

Reported over the ``--duration`` seconds after ``--warmup``:

- sequences (and tokens) per second accepted and served;
- queue latency: from a group's ``200`` to the trainer receiving the batch holding it (p50/p90/p99);
- post latency (one ``/scored_data`` round trip) and the number of 503 answers;
- the API's resident memory: at start, peak, end; its CPU time per
  1,000 sequences and per million tokens.

Each client and the trainer run in this process (asyncio), which shares the machine with the API:
on a small machine the figures are a lower bound. The client pre-compresses the bulk of a group
once; each post adds a small gzip member with the group's id (the API inflates every member).

Usage: ``python benchmarks/api_capacity.py [--clients 64] [--duration 30] [--json-out f.json]``.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import json
import random
import re
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

import aiohttp
import orjson
import psutil

from atroposlib.testing.api_process import launch_api
from atroposlib.utils.processes import tree_usage

_BENCH_ID = re.compile(rb'"bench_id":"([^"]+)"')
_BATCH_ID = re.compile(rb'"batch_id":(\d+)')


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


@dataclass
class Tally:
    """Counters shared by the clients and the trainer (one event loop: no locks needed)."""

    measuring: bool = False
    stopping: bool = False
    posted_at: dict[str, float] = field(default_factory=dict)
    accepted_groups: int = 0
    served_groups: int = 0
    served_batches: int = 0
    rejected_503: int = 0
    errors: int = 0
    post_ms: list[float] = field(default_factory=list)
    queue_ms: list[float] = field(default_factory=list)
    batch_ms: list[float] = field(default_factory=list)


def group_bulk(group_size: int, seq_len: int, seed: int) -> bytes:
    """The JSON text of a group up to the opening quote of its id (tokens, masks, scores, logprobs)."""
    rng = random.Random(seed)
    prompt = max(1, seq_len // 4)
    tokens = [[rng.randrange(5, 151_000) for _ in range(seq_len)] for _ in range(group_size)]
    masks = [[-100] * prompt + row[prompt:] for row in tokens]
    logprobs = [
        [1.0] * prompt + [round(-rng.random() * 3, 4) for _ in range(seq_len - prompt)] for _ in tokens
    ]
    scores = [float(i % 2) for i in range(group_size)]
    head = orjson.dumps(
        {
            "tokens": tokens,
            "masks": masks,
            "scores": scores,
            "advantages": None,
            "ref_logprobs": None,
            "messages": None,
            "generation_params": {"temperature": 1.0},
            "inference_logprobs": logprobs,
            "overrides": None,
        }
    )
    return head[:-1] + b',"group_overrides":{"bench_id":"'


async def client(
    session: aiohttp.ClientSession, url: str, env_id: int, bulk_gz: bytes, tally: Tally, headers: dict
) -> None:
    """One environment: post groups back to back until told to stop."""
    n = 0
    while not tally.stopping:
        gid = f"{env_id}-{n}"
        n += 1
        tail = gzip.compress(f'{gid}"}},"env_id":{env_id}}}'.encode(), compresslevel=1)
        start = time.perf_counter()
        while not tally.stopping:
            try:
                async with session.post(f"{url}/scored_data", data=bulk_gz + tail, headers=headers) as resp:
                    await resp.read()
                    status, retry = resp.status, resp.headers.get("Retry-After")
            except aiohttp.ClientError:
                tally.errors += 1
                await asyncio.sleep(0.5)
                continue
            if status == 503:
                tally.rejected_503 += 1
                await asyncio.sleep(min(float(retry or 1), 2.0))
                continue
            if status != 200:
                tally.errors += 1
                await asyncio.sleep(0.5)
            break
        else:
            return
        done = time.perf_counter()
        if status == 200:
            tally.posted_at[gid] = done
            if tally.measuring:
                tally.accepted_groups += 1
                tally.post_ms.append((done - start) * 1000)


async def trainer(session: aiohttp.ClientSession, url: str, tally: Tally, headers: dict) -> None:
    """Pull batches as fast as they form; acknowledge each."""
    while not tally.stopping:
        asked = time.perf_counter()
        async with session.get(f"{url}/batch", headers=headers) as resp:
            body = await resp.read()
        now = time.perf_counter()
        # Only the group ids are needed: a regex over the bytes instead of decoding the whole batch
        # (which a real trainer does, at a cost of its own), so the figures describe the API.
        ids = _BENCH_ID.findall(body)
        if not ids:
            await asyncio.sleep(0.02)
            continue
        if tally.measuring:
            tally.batch_ms.append((now - asked) * 1000)
        batch_id = _BATCH_ID.search(body[-200:]) or _BATCH_ID.search(body)
        if batch_id:
            ack = {"batch_id": int(batch_id[1])}
            async with session.post(f"{url}/batch/ack", json=ack, headers=headers):
                pass
        if not tally.measuring:
            continue
        tally.served_batches += 1
        for gid in ids:
            tally.served_groups += 1
            posted = tally.posted_at.pop(gid.decode(), None)
            if posted is not None:
                tally.queue_ms.append((now - posted) * 1000)


class Sampler:
    """RSS and CPU time of the API process and its children."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.peak_rss = 0

    def rss(self) -> int:
        total = tree_usage(self.pid)[1]
        self.peak_rss = max(self.peak_rss, total)
        return total

    def cpu_seconds(self) -> float:
        return tree_usage(self.pid)[0]

    async def run(self, tally: Tally) -> None:
        while not tally.stopping:
            self.rss()
            await asyncio.sleep(0.25)


def percentile(values: list[float], q: float) -> float:
    if not values:
        return 0.0
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


async def drive(args: argparse.Namespace, url: str, pid: int, api_headers: dict) -> dict:
    tally = Tally()
    sampler = Sampler(pid)
    bulk = group_bulk(args.group_size, args.seq_len, seed=0)
    bulk_gz = gzip.compress(bulk, compresslevel=5)
    post_headers = {**api_headers, "Content-Type": "application/json", "Content-Encoding": "gzip"}
    connector = aiohttp.TCPConnector(limit=args.clients + 4)
    timeout = aiohttp.ClientTimeout(total=600)
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        registration = {
            "wandb_group": "capacity", "wandb_project": "bench", "batch_size": args.batch_size,
            "max_token_len": args.seq_len, "checkpoint_dir": "", "save_checkpoint_interval": -1,
            "starting_step": 0, "num_steps": 1_000_000,
        }  # fmt: skip
        async with session.post(f"{url}/register", json=registration, headers=api_headers) as resp:
            resp.raise_for_status()
        async with session.get(f"{url}/batch", headers=api_headers) as resp:  # the trainer has started
            resp.raise_for_status()
        env_ids = []
        for _ in range(args.clients):
            body = {
                "max_token_length": args.seq_len,
                "desired_name": "bench",
                "weight": 1.0,
                "group_size": args.group_size,
            }
            async with session.post(f"{url}/register-env", json=body, headers=api_headers) as resp:
                env_ids.append((await resp.json())["env_id"])
        rss_start = sampler.rss()
        tasks = [
            asyncio.create_task(sampler.run(tally)),
            asyncio.create_task(trainer(session, url, tally, api_headers)),
        ]
        tasks += [
            asyncio.create_task(client(session, url, env_id, bulk_gz, tally, post_headers))
            for env_id in env_ids
        ]
        await asyncio.sleep(args.warmup)
        cpu_start = sampler.cpu_seconds()
        own = psutil.Process()
        own_start = sum(own.cpu_times()[:2])
        tally.measuring = True
        started = time.perf_counter()
        await asyncio.sleep(args.duration)
        tally.measuring = False
        elapsed = time.perf_counter() - started
        cpu = sampler.cpu_seconds() - cpu_start
        own_cpu = sum(own.cpu_times()[:2]) - own_start
        rss_end = sampler.rss()
        tally.stopping = True
        await asyncio.wait(tasks, timeout=30)
        for task in tasks:
            task.cancel()
    seqs_in = tally.accepted_groups * args.group_size
    seqs_out = tally.served_groups * args.group_size
    return {
        "settings": {
            "clients": args.clients,
            "group_size": args.group_size,
            "seq_len": args.seq_len,
            "batch_size": args.batch_size,
            "duration_s": args.duration,
            "store": args.store,
            "body_bytes_gzipped": len(bulk_gz),
            "body_bytes_json": len(bulk),
        },  # fmt: skip
        "accepted_seq_per_s": seqs_in / elapsed,
        "served_seq_per_s": seqs_out / elapsed,
        "accepted_tokens_per_s": seqs_in * args.seq_len / elapsed,
        "served_batches_per_s": tally.served_batches / elapsed,
        "queue_ms": {
            q: percentile(tally.queue_ms, v) for q, v in (("p50", 0.5), ("p90", 0.9), ("p99", 0.99))
        },
        "post_ms": {q: percentile(tally.post_ms, v) for q, v in (("p50", 0.5), ("p99", 0.99))},
        "batch_ms": {q: percentile(tally.batch_ms, v) for q, v in (("p50", 0.5), ("p99", 0.99))},
        "load_cpu_cores_busy": own_cpu / elapsed,
        "machine_cores": psutil.cpu_count(),
        "rejected_503": tally.rejected_503,
        "errors": tally.errors,
        "rss_mib": {"start": rss_start / 2**20, "peak": sampler.peak_rss / 2**20, "end": rss_end / 2**20},
        "api_cpu_s_per_1k_seq": cpu / max(seqs_in, 1) * 1000,
        "api_cpu_s_per_mtok": cpu / max(seqs_in * args.seq_len, 1) * 1e6,
        "api_cpu_cores_busy": cpu / elapsed,
    }


def report(figures: dict) -> str:
    s = figures["settings"]
    lines = [
        f"{s['clients']} environments x groups of {s['group_size']} x {s['seq_len']} tokens "
        f"({s['body_bytes_gzipped'] / 1024:.0f} KiB gzipped), trainer batches of {s['batch_size']}, "
        f"{s['duration_s']:.0f} s, store {s['store']}",
        f"accepted            {figures['accepted_seq_per_s']:10.1f} seq/s  "
        f"({figures['accepted_tokens_per_s'] / 1e6:.2f} M tokens/s)",
        f"served              {figures['served_seq_per_s']:10.1f} seq/s  "
        f"({figures['served_batches_per_s']:.2f} batches/s)",
        "queue latency ms    p50 {p50:.0f}  p90 {p90:.0f}  p99 {p99:.0f}".format(**figures["queue_ms"]),
        "post latency ms     p50 {p50:.1f}  p99 {p99:.1f}".format(**figures["post_ms"]),
        "GET /batch ms       p50 {p50:.1f}  p99 {p99:.1f}".format(**figures["batch_ms"]),
        f"503 answers         {figures['rejected_503']}   errors {figures['errors']}",
        "API RSS MiB         start {start:.0f}  peak {peak:.0f}  end {end:.0f}".format(**figures["rss_mib"]),
        f"API CPU             {figures['api_cpu_s_per_1k_seq']:.3f} s per 1k sequences, "
        f"{figures['api_cpu_s_per_mtok']:.3f} s per M tokens, {figures['api_cpu_cores_busy']:.2f} cores busy",
        f"load generator CPU  {figures['load_cpu_cores_busy']:.2f} cores busy (machine: "
        f"{figures['machine_cores']} cores)",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--clients", type=int, default=64, help="simulated environments")
    parser.add_argument("--group-size", type=int, default=16, help="sequences per group")
    parser.add_argument("--seq-len", type=int, default=2048, help="tokens per sequence")
    parser.add_argument("--batch-size", type=int, default=256, help="sequences per trainer batch")
    parser.add_argument("--duration", type=float, default=30.0, help="measured seconds")
    parser.add_argument("--warmup", type=float, default=5.0, help="seconds before measuring")
    parser.add_argument("--store", choices=["sqlite", "memory"], default="sqlite")
    parser.add_argument("--api-args", default="", help="extra run-api flags, e.g. '--max-queue-sequences 0'")
    parser.add_argument("--json-out", type=Path, default=None, help="also write the figures here")
    args = parser.parse_args(argv)
    if args.batch_size % args.group_size:
        parser.error("--batch-size must be a multiple of --group-size")
    with tempfile.TemporaryDirectory(prefix="atropos-capacity-") as tmp:
        extra = ["--store", args.store, *args.api_args.split()]
        with launch_api(extra, data_dir=Path(tmp) / "api") as api:
            log(
                f"run-api pid {api.proc.pid} at {api.url}; {args.clients} clients, warming up {args.warmup:.0f} s"
            )
            figures = asyncio.run(drive(args, api.url, api.proc.pid, api.headers()))
    print(report(figures))
    if args.json_out:
        args.json_out.write_text(json.dumps(figures, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
