"""Body limits, gzip bombs, backpressure, and a fuzz run that must never produce a 5xx."""

from __future__ import annotations

import gzip
import http.client
import json
import random
import socket
from urllib.parse import urlsplit

import pytest
import requests

from atroposlib.api.limits import BodyTooLarge, InvalidGzip, inflate_gzip, is_json_content_type
from atroposlib.group import FIELD_NAMES
from atroposlib.testing.api_process import launch_api
from tests.helpers.api import (
    TIMEOUT,
    env_registration,
    get,
    group,
    post_group,
    register,
    register_env,
    registration,
)

MAX_BODY = 4096
MAX_INFLATED = 16384
MAX_QUEUE = 8


@pytest.fixture(scope="module")
def small(tmp_path_factory):
    args = [
        "--max-body-bytes", str(MAX_BODY),
        "--max-inflated-bytes", str(MAX_INFLATED),
        "--max-queue-sequences", str(MAX_QUEUE),
        "--retry-after-seconds", "3",
    ]  # fmt: skip
    with launch_api(args, data_dir=tmp_path_factory.mktemp("small")) as proc:
        yield proc


@pytest.fixture
def surl(small):
    get(small.url, "/reset_data")
    yield small.url


def raw_request(url: str, head: bytes, body_chunks: list[bytes]) -> tuple[int, bytes]:
    """Send a hand-written HTTP/1.1 request and return (status, body)."""
    parts = urlsplit(url)
    with socket.create_connection((parts.hostname, parts.port), timeout=TIMEOUT) as sock:
        sock.sendall(head)
        try:
            for chunk in body_chunks:
                sock.sendall(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server may answer and close before the body is sent
        response = http.client.HTTPResponse(sock)
        response.begin()
        return response.status, response.read()


# ------------------------------------------------------------------ pure helpers


def test_inflate_gzip_limits_and_errors():
    data = b"x" * 1000
    assert inflate_gzip(gzip.compress(data), 1000) == data
    assert inflate_gzip(gzip.compress(data[:400]) + gzip.compress(data[400:]), 1000) == data
    assert inflate_gzip(gzip.compress(data) + b"\x00" * 8, 1000) == data
    with pytest.raises(BodyTooLarge):
        inflate_gzip(gzip.compress(data), 999)
    with pytest.raises(BodyTooLarge):
        inflate_gzip(gzip.compress(data[:600]) + gzip.compress(data[600:]), 999)
    for bad in (b"plain", gzip.compress(data)[:-5], gzip.compress(data) + b"trailing"):
        with pytest.raises(InvalidGzip):
            inflate_gzip(bad, 10_000)


@pytest.mark.parametrize(
    ("value", "ok"),
    [
        ("application/json", True),
        ("application/json; charset=utf-8", True),
        ("Application/JSON", True),
        ("application/vnd.api+json", True),
        ("text/plain", False),
        ("application/x-www-form-urlencoded", False),
        ("multipart/form-data; boundary=x", False),
        ("", False),
    ],
)
def test_json_content_types(value, ok):
    assert is_json_content_type(value) is ok


# ------------------------------------------------------------------ body size limits


def test_body_over_limit_by_content_length(surl):
    register(surl, batch_size=4)
    body = json.dumps(group(1, 900)).encode()
    assert len(body) > MAX_BODY
    response = requests.post(f"{surl}/scored_data", data=body, timeout=TIMEOUT)
    assert response.status_code == 413
    assert "max_body_bytes" in response.json()["detail"]
    assert get(surl, "/status").json()["queue_size"] == 0


def test_chunked_body_over_limit_is_cut_while_reading(surl):
    register(surl, batch_size=4)
    parts = urlsplit(surl)
    head = (
        f"POST /scored_data HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n"
    ).encode()
    chunk = b"[" + b"1," * 1023 + b"1]"
    framed = [b"%x\r\n%s\r\n" % (len(chunk), chunk) for _ in range(8)] + [b"0\r\n\r\n"]
    status, body = raw_request(surl, head, framed)
    assert status == 413
    assert b"max_body_bytes" in body
    assert get(surl, "/status").json()["queue_size"] == 0


def test_declared_length_over_limit_is_refused_before_reading(surl):
    parts = urlsplit(surl)
    head = (
        f"POST /scored_data HTTP/1.1\r\nHost: {parts.netloc}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {10 * MAX_BODY}\r\n\r\n"
    ).encode()
    status, _ = raw_request(surl, head, [b"{}"])
    assert status == 413


def test_gzip_bomb_is_413(surl):
    register(surl, batch_size=4)
    bomb = gzip.compress(b'{"tokens": [[' + b"0," * 2_000_000 + b"0]]}")
    assert len(bomb) < MAX_BODY
    response = requests.post(
        f"{surl}/scored_data", data=bomb, headers={"Content-Encoding": "gzip"}, timeout=TIMEOUT
    )
    assert response.status_code == 413
    assert "max_inflated_bytes" in response.json()["detail"]


def test_gzip_body_within_limits_is_accepted(surl):
    register(surl, batch_size=4)
    raw = json.dumps(group(1, 1000)).encode()
    assert MAX_BODY < len(raw) < MAX_INFLATED
    response = requests.post(
        f"{surl}/scored_data", data=gzip.compress(raw), headers={"Content-Encoding": "gzip"}, timeout=TIMEOUT
    )
    assert response.json() == {"status": "received"}


# ------------------------------------------------------------------ backpressure


def test_backpressure_503_with_retry_after_then_recovers(surl):
    register(surl, batch_size=4)
    assert post_group(surl, group(4)).status_code == 200
    assert post_group(surl, group(4, start=10)).status_code == 200
    full = post_group(surl, group(4, start=20))
    assert full.status_code == 503
    assert full.headers["Retry-After"] == "3"
    assert get(surl, "/health").json()["waiting_sequences"] == MAX_QUEUE
    assert get(surl, "/status").json()["queue_size"] == 2
    # all-or-nothing for lists too
    listed = requests.post(f"{surl}/scored_data_list", json=[group(1, start=30)], timeout=TIMEOUT)
    assert listed.status_code == 503
    # serving a batch frees room; the same payload is then accepted
    assert get(surl, "/batch").json()["batch"] is not None
    assert post_group(surl, group(4, start=20)).status_code == 200
    assert post_group(surl, group(4, start=40)).status_code == 503
    metrics = get(surl, "/metrics").text
    assert 'atropos_requests_rejected_total{reason="queue_full"}' in metrics


def test_request_larger_than_the_whole_queue_is_422(surl):
    register(surl, batch_size=4)
    groups = [group(4, 2, start=i) for i in range(3)]
    response = requests.post(f"{surl}/scored_data_list", json=groups, timeout=TIMEOUT)
    assert response.status_code == 422
    assert response.json()["detail"][0]["type"] == "queue_limit"


# ------------------------------------------------------------------ fuzzing


def _hostile_values(rng: random.Random):
    return [
        None,
        True,
        -1,
        0,
        2**31,
        2**64,
        -(2**70),
        1.5,
        1e308,
        "",
        "x" * rng.randint(1, 300),
        "\u0000",
        [],
        [[]],
        [[None]],
        [["1"]],
        [[1.0]],
        [[True]],
        {},
        {"a": [1, {"b": None}]},
        [[{"role": "user"}]],
        [[{"role": 1, "content": None}]],
        [[[1, 2], [3]]],
        [[[]]],
    ]


def _fuzz_requests(rng: random.Random, base: str):
    fields = list(FIELD_NAMES)
    values = _hostile_values(rng)
    for _ in range(150):
        body = group(rng.choice([1, 2, 4]), rng.randint(1, 4))
        for _ in range(rng.randint(1, 3)):
            body[rng.choice(fields)] = rng.choice(values)
        if rng.random() < 0.2:
            body.pop(rng.choice(["tokens", "masks", "scores"]), None)
        data = json.dumps(body).encode()
        headers = {"Content-Type": "application/json"}
        if rng.random() < 0.3:
            data = gzip.compress(data)
            headers["Content-Encoding"] = "gzip"
            if rng.random() < 0.3:
                cut = rng.randint(0, len(data))
                data = data[:cut] + bytes(rng.randrange(256) for _ in range(rng.randint(0, 20)))
        path = rng.choice(["/scored_data", "/scored_data_list"])
        if path == "/scored_data_list":
            data = b"[" + data + b"]" if "Content-Encoding" not in headers else data
        yield "POST", path, data, headers
    for _ in range(60):
        junk = bytes(rng.randrange(256) for _ in range(rng.randint(0, 200)))
        path = rng.choice(
            ["/scored_data", "/scored_data_list", "/register", "/register-env", "/disconnect-env",
             "/batch/ack", "/batch/replay", "/status-env", "/batch", "/info", "/%00", "/inspect/recent?limit=-1",
             "/inspect/recent?env_id=abc", "/../../etc/passwd"]
        )  # fmt: skip
        method = rng.choice(["GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD"])
        headers = rng.choice(
            [
                {},
                {"Content-Type": "application/json"},
                {"Content-Type": "text/plain"},
                {"Content-Encoding": "gzip"},
                {"Content-Encoding": "gzip, br"},
                {"Content-Type": "application/json; charset=\u00ff"},
            ]
        )
        yield method, path, junk, headers
    for _ in range(40):
        reg = registration()
        reg[rng.choice(list(reg))] = rng.choice(_hostile_values(rng))
        yield "POST", "/register", json.dumps(reg).encode(), {"Content-Type": "application/json"}
        env = env_registration()
        env[rng.choice(list(env))] = rng.choice(_hostile_values(rng))
        yield "POST", "/register-env", json.dumps(env).encode(), {"Content-Type": "application/json"}
        yield "GET", "/status-env", json.dumps({"env_id": rng.choice(_hostile_values(rng))}).encode(), {}
        yield "POST", "/disconnect-env", json.dumps({"env_id": rng.choice(_hostile_values(rng))}).encode(), {}
        yield "POST", "/batch/ack", json.dumps({"batch_id": rng.choice(_hostile_values(rng))}).encode(), {}


def test_fuzzed_hostile_requests_never_get_a_5xx(surl):
    register(surl, batch_size=4, max_token_len=64)
    get(surl, "/batch")
    register_env(surl, group_size=2)
    rng = random.Random(20240601)
    session = requests.Session()
    statuses = {}
    for method, path, data, headers in _fuzz_requests(rng, surl):
        response = session.request(method, f"{surl}{path}", data=data, headers=headers, timeout=TIMEOUT)
        statuses[response.status_code] = statuses.get(response.status_code, 0) + 1
        assert response.status_code < 500 or response.status_code == 503, (
            method,
            path,
            data[:200],
            response.text,
        )
        if response.status_code == 503:
            assert "Retry-After" in response.headers
            get(surl, "/batch")  # make room again
    assert get(surl, "/health").status_code == 200
    assert any(400 <= s < 500 for s in statuses)
