"""Decoding ingest bodies in worker processes: same answers as inline, survives lost workers."""

from __future__ import annotations

import asyncio
import gzip
import os
import signal
import sys
import time
from concurrent.futures import ThreadPoolExecutor

import orjson
import psutil
import pytest
import requests

from atroposlib.api.decode_pool import DecodePool, decode_body
from atroposlib.api.stored_group import group_json
from atroposlib.testing.api_process import launch_api
from tests.api.helpers import TIMEOUT, get, group, register

LIMIT = 1 << 20


def big_group(marker: int) -> dict:
    """8 x 512 tokens, like a real group; the first token is ``marker``."""
    return group(8, 512, start=marker)


async def ready(pool: DecodePool, count: int = 1) -> None:
    if not pool._workers:
        pool._start()
    deadline = time.monotonic() + 60
    while pool.ready_workers < count:
        assert time.monotonic() < deadline, "decode worker did not start"
        await asyncio.sleep(0.05)


def same(a, b) -> bool:
    """Two :class:`Decoded` results are equal (errors compared by their details)."""
    if a.groups is not None or b.groups is not None:
        return a.groups == b.groups
    if a.invalid is not None or b.invalid is not None:
        return a.invalid is not None and b.invalid is not None and a.invalid.errors == b.invalid.errors
    return a.rejection == b.rejection


BODIES = {
    "plain": (orjson.dumps(big_group(5)), False),
    "gzip": (gzip.compress(orjson.dumps(big_group(6))), True),
    "invalid json": (b'{"tokens": [[1, 2]' + b" " * 9000, False),
    "schema error": (orjson.dumps({**big_group(7), "scores": ["high"] * 8}), False),
    "int32 overflow": (orjson.dumps({**big_group(8), "tokens": [[2**40] * 512] * 8}), False),
    "corrupt gzip": (gzip.compress(orjson.dumps(big_group(9)))[:-20], True),
    "gzip bomb": (gzip.compress(b" " * (2 * LIMIT)), True),
}


async def test_worker_answers_equal_inline_answers():
    pool = DecodePool(1, LIMIT, min_bytes=0, alone_inline=False)
    try:
        await ready(pool)
        for name, (body, gzipped) in BODIES.items():
            kind = "one"
            got = await pool.decode(kind, body, gzipped)
            want = decode_body(kind, body, gzipped, LIMIT)
            assert same(got, want), name
        many = orjson.dumps([big_group(1), big_group(2)])
        assert same(await pool.decode("many", many, False), decode_body("many", many, False, LIMIT))
        assert pool.offloaded == len(BODIES) + 1 and pool.inline == 0
    finally:
        await pool.close()


async def test_concurrent_requests_are_matched_to_their_answers():
    pool = DecodePool(2, LIMIT, min_bytes=0)
    try:
        await ready(pool, 2)
        bodies = [orjson.dumps(big_group(i)) for i in range(24)]
        results = await asyncio.gather(*(pool.decode("one", b, False) for b in bodies))
        assert [orjson.loads(group_json(r.groups[0].data))["tokens"][0][0] for r in results] == list(
            range(24)
        )
    finally:
        await pool.close()


async def test_a_lone_body_is_decoded_inline_and_concurrent_ones_by_workers():
    pool = DecodePool(1, LIMIT, min_bytes=0)
    try:
        await ready(pool)
        bodies = [orjson.dumps(big_group(i)) for i in range(8)]
        for body in bodies[:3]:  # one at a time: nothing to overlap, no hand-off
            assert same(await pool.decode("one", body, False), decode_body("one", body, False, LIMIT))
        assert pool.inline == 3 and pool.offloaded == 0
        results = await asyncio.gather(*(pool.decode("one", b, False) for b in bodies))
        assert [orjson.loads(group_json(r.groups[0].data))["tokens"][0][0] for r in results] == list(range(8))
        assert pool.offloaded == 8 and pool.inline == 3
    finally:
        await pool.close()


async def test_small_bodies_and_an_empty_pool_decode_inline():
    for pool in (DecodePool(1, LIMIT), DecodePool(0, LIMIT, min_bytes=0)):
        body = orjson.dumps(group(1, 3))
        assert same(await pool.decode("one", body, False), decode_body("one", body, False, LIMIT))
        assert pool.inline == 1 and pool.offloaded == 0 and not pool._workers
        await pool.close()


async def test_a_killed_worker_is_replaced_and_no_request_fails():
    pool = DecodePool(1, LIMIT, min_bytes=0, alone_inline=False)
    try:
        await ready(pool)
        first = pool._workers[0].process
        body = orjson.dumps(big_group(3))
        os.kill(first.pid, signal.SIGKILL)
        results = [await pool.decode("one", body, False) for _ in range(5)]
        assert all(same(r, decode_body("one", body, False, LIMIT)) for r in results)
        await ready(pool)
        assert pool._workers[0].process.pid != first.pid
        assert same(await pool.decode("one", body, False), results[0])
    finally:
        await pool.close()
    assert first.poll() is not None


async def test_workers_that_cannot_start_are_given_up(monkeypatch):
    monkeypatch.setattr(sys, "executable", "/bin/false")  # every worker exits at once
    pool = DecodePool(1, LIMIT, min_bytes=0, alone_inline=False)
    body = orjson.dumps(big_group(4))
    want = decode_body("one", body, False, LIMIT)
    try:
        deadline = time.monotonic() + 30
        while pool._failed_starts < 3:
            assert same(await pool.decode("one", body, False), want)
            assert time.monotonic() < deadline, "failed starts were not counted"
            await asyncio.sleep(0.05)
        assert not pool._workers
        assert same(await pool.decode("one", body, False), want)
        assert not pool._workers and pool.offloaded == 0  # not started again
    finally:
        await pool.close()


@pytest.mark.parametrize("workers", [0, 1])
def test_run_api_serves_the_same_batches_with_and_without_workers(tmp_path, workers):
    with launch_api(["--decode-workers", str(workers)], data_dir=tmp_path / "d") as api:
        register(api.url, batch_size=16)
        headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
        for marker in range(6):
            body = gzip.compress(orjson.dumps(big_group(100 + marker)))
            answer = requests.post(f"{api.url}/scored_data", data=body, headers=headers, timeout=TIMEOUT)
            assert answer.json() == {"status": "received"}
        bad = gzip.compress(orjson.dumps({**big_group(1), "masks": [[0] * 511] * 8}))
        answer = requests.post(f"{api.url}/scored_data", data=bad, headers=headers, timeout=TIMEOUT)
        assert answer.status_code == 422 and answer.json()["detail"][0]["type"] == "length_mismatch"
        answer = requests.post(f"{api.url}/scored_data", data=bad[:-30], headers=headers, timeout=TIMEOUT)
        assert answer.status_code == 400
        batches = [get(api.url, "/batch").json()["batch"] for _ in range(3)]
        assert [[g["tokens"][0][0] for g in b] for b in batches] == [[104, 105], [102, 103], [100, 101]]
        assert len(psutil.Process(api.proc.pid).children()) == workers


def decoded_counts(url: str) -> dict[str, float]:
    counts = {}
    for line in get(url, "/metrics").text.splitlines():
        if line.startswith("atropos_ingest_bodies_decoded_total{"):
            where = line.split('where="')[1].split('"')[0]
            counts[where] = float(line.rsplit(" ", 1)[1])
    return counts


def test_run_api_hands_concurrent_bodies_to_workers_and_loses_none(tmp_path):
    with launch_api(["--decode-workers", "1"], data_dir=tmp_path / "d") as api:
        register(api.url, batch_size=8)
        headers = {"Content-Type": "application/json", "Content-Encoding": "gzip"}
        bodies = [gzip.compress(orjson.dumps(big_group(1000 + i))) for i in range(64)]

        def send(body: bytes) -> dict:
            with requests.Session() as session:
                return session.post(
                    f"{api.url}/scored_data", data=body, headers=headers, timeout=TIMEOUT
                ).json()

        sent = 0
        with ThreadPoolExecutor(8) as threads:
            # Eight clients at once overlap their requests; until the workers are up, or should
            # the requests happen not to overlap, they are decoded in the server process.
            while sent < len(bodies) * 8 and decoded_counts(api.url).get("worker", 0) == 0:
                answers = list(threads.map(send, bodies))
                assert answers == [{"status": "received"}] * len(bodies)
                sent += len(bodies)
        counts = decoded_counts(api.url)
        assert counts["worker"] > 0 and counts["worker"] + counts["server"] == sent
        served = []
        while batch := get(api.url, "/batch").json()["batch"]:
            served.extend(g["tokens"][0][0] for g in batch)
        assert sorted(served) == sorted(list(range(1000, 1064)) * (sent // len(bodies)))
