"""A pass-through proxy between the trainer and ``run-api`` that hands out batches only up to a given step.

The fault run injects each fault at a chosen trained step. A trainer on the tiny model trains a queued batch in
a few tens of milliseconds, so watching its log and acting "at step 5" is a race it usually loses. Behind this
gate the trainer gets a batch for step ``s`` only while ``s <= limit``; beyond it, ``GET /batch`` answers
``{"batch": null}`` (what the API answers while no batch can be formed) without reaching the API, so the API forms
no batch either and the trainer waits as it would for slow environments. Every other request, and ``GET /batch``
within the limit, is forwarded unchanged; an API that does not answer gives 502, which the trainer retries.

Steps count the way the trainer does: ``next_step`` is the step the next handed-out batch trains, set by the
caller when a trainer (re)starts (a resumed trainer's first batch trains the step after its checkpoint).
"""

from __future__ import annotations

import http.server
import json
import threading

import httpx

#: Request headers not forwarded (the proxy speaks for itself on these).
_HOP_HEADERS = {"host", "content-length", "connection", "accept-encoding", "transfer-encoding"}


class BatchGate:
    """A threaded HTTP proxy on 127.0.0.1 in front of ``upstream`` (the API's base URL)."""

    def __init__(self, upstream: str, limit: int = 0) -> None:
        self.upstream = upstream.rstrip("/")
        self.limit = limit  #: the last step the trainer may be handed a batch for
        self.next_step = 1  #: the step the next batch handed out trains
        self._lock = threading.Lock()
        self._client = httpx.Client(timeout=60.0)
        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._server.server_address[1]}"

    def start(self) -> BatchGate:
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()
        self._client.close()

    def allow(self, step: int) -> None:
        """Let the trainer train up to ``step`` (never lowers the limit)."""
        with self._lock:
            self.limit = max(self.limit, step)

    def restart_at(self, next_step: int) -> None:
        """A trainer (re)starts: its first batch trains ``next_step``."""
        with self._lock:
            self.next_step = next_step

    # --- forwarding -------------------------------------------------------------------------------
    def forward(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes, str]:
        """(status, body, content type) of the API's answer, or of the gate's own for a held batch."""
        if method == "GET" and path.split("?", 1)[0] == "/batch":
            with self._lock:  # one batch request at a time, so that the step count stays exact
                if self.next_step > self.limit:
                    return 200, b'{"batch": null}', "application/json"
                status, data, ctype = self._send(method, path, headers, body)
                if status == 200 and _carries_batch(data):
                    self.next_step += 1
                return status, data, ctype
        return self._send(method, path, headers, body)

    def _send(self, method: str, path: str, headers: dict[str, str], body: bytes) -> tuple[int, bytes, str]:
        kept = {k: v for k, v in headers.items() if k.lower() not in _HOP_HEADERS}
        try:
            resp = self._client.request(method, self.upstream + path, headers=kept, content=body or None)
        except httpx.HTTPError as exc:
            return 502, json.dumps({"detail": f"upstream: {exc}"}).encode(), "application/json"
        return resp.status_code, resp.content, resp.headers.get("content-type", "application/json")

    def _handler(self) -> type[http.server.BaseHTTPRequestHandler]:
        gate = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def _relay(self) -> None:
                length = int(self.headers.get("content-length") or 0)
                body = self.rfile.read(length) if length else b""
                status, data, ctype = gate.forward(self.command, self.path, dict(self.headers), body)
                self.send_response(status)
                self.send_header("content-type", ctype)
                self.send_header("content-length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            do_GET = do_POST = do_PUT = do_DELETE = _relay

            def log_message(self, format: str, *args: object) -> None:  # noqa: A002 (the base class's name)
                pass

        return Handler


def _carries_batch(data: bytes) -> bool:
    try:
        return bool(json.loads(data).get("batch"))
    except (ValueError, AttributeError):
        return False
