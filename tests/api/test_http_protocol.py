"""The coalescing HTTP protocol: same bytes on the wire, head and body in one write."""

from __future__ import annotations

import http.client
import json
import socket
from urllib.parse import urlsplit

from atroposlib.api.http_protocol import _HeadHoldingTransport, http_protocol
from tests.api.helpers import TIMEOUT


class _Recorder:
    def __init__(self):
        self.writes: list[bytes] = []
        self.closed = False

    def write(self, data: bytes) -> None:
        self.writes.append(data)

    def close(self) -> None:
        self.closed = True


class _Cycle:
    response_started = False


def test_head_is_held_until_the_first_body_write():
    real, cycle = _Recorder(), _Cycle()
    transport = _HeadHoldingTransport(real, cycle)
    transport.write(b"HTTP/1.1 100 Continue\r\n\r\n")  # before the response: passes through
    cycle.response_started = True
    transport.write(b"HTTP/1.1 200 OK\r\n\r\n")
    assert real.writes == [b"HTTP/1.1 100 Continue\r\n\r\n"]
    transport.write(b"body")
    transport.write(b"more")
    assert real.writes[1:] == [b"HTTP/1.1 200 OK\r\n\r\nbody", b"more"]
    transport.close()  # other attributes are the real transport's
    assert real.closed


def test_large_bodies_follow_the_head_in_a_separate_write():
    real, cycle = _Recorder(), _Cycle()
    transport = _HeadHoldingTransport(real, cycle)
    cycle.response_started = True
    transport.write(b"head")
    big = b"x" * (1 << 20)
    transport.write(big)
    assert real.writes == [b"head", big]


def test_the_server_uses_the_coalescing_protocol():
    assert not isinstance(http_protocol(), str)


def _exchange(sock: socket.socket, request: bytes, method: str = "GET") -> tuple[int, dict, bytes]:
    sock.sendall(request)
    response = http.client.HTTPResponse(sock, method=method)
    response.begin()
    body = response.read()
    return response.status, dict(response.getheaders()), body


def test_keep_alive_head_and_expect_continue_over_one_connection(api):
    parts = urlsplit(api.url)
    host = f"{parts.hostname}:{parts.port}".encode()
    with socket.create_connection((parts.hostname, parts.port), timeout=TIMEOUT) as sock:
        status, headers, body = _exchange(sock, b"GET /info HTTP/1.1\r\nHost: " + host + b"\r\n\r\n")
        assert status == 200 and json.loads(body) == {"batch_size": -1, "max_token_len": -1}
        status, headers, body = _exchange(sock, b"HEAD /info HTTP/1.1\r\nHost: " + host + b"\r\n\r\n", "HEAD")
        assert status in (200, 405) and body == b""
        payload = json.dumps({"tokens": [[1, 2]], "masks": [[1, 2]], "scores": [1.0]}).encode()
        sock.sendall(
            b"POST /scored_data HTTP/1.1\r\nHost: " + host + b"\r\nContent-Type: application/json\r\n"
            b"Expect: 100-continue\r\nContent-Length: " + str(len(payload)).encode() + b"\r\n\r\n"
        )
        assert sock.recv(25) == b"HTTP/1.1 100 Continue\r\n\r\n"
        status, headers, body = _exchange(sock, payload, "POST")
        assert status == 200 and json.loads(body) == {"status": "received"}
        status, headers, body = _exchange(sock, b"GET /status HTTP/1.1\r\nHost: " + host + b"\r\n\r\n")
        assert json.loads(body)["queue_size"] == 1
