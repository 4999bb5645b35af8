"""A small OpenAI-flavoured HTTP server for tests, run as a subprocess on a loopback port.

Routes: ``GET /ok`` (JSON), ``GET /error`` (500, text body), ``GET /notjson`` (200, text body),
``GET /v1/models`` (one model, ``stub-model``), ``POST /v1/chat/completions`` (replies
``"echo: <last user message>"`` to each of ``n`` choices).
"""

from __future__ import annotations

import contextlib
import json
import subprocess
import sys
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

MODEL = "stub-model"


class Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):  # keep test output quiet
        pass

    def _send(self, status: int, body: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        if self.path == "/ok":
            self._send(200, b'{"ok": true, "items": [1, 2]}', "application/json")
        elif self.path == "/error":
            self._send(500, b"server exploded", "text/plain")
        elif self.path == "/notjson":
            self._send(200, b"plain words", "text/plain")
        elif self.path == "/v1/models":
            body = {"object": "list", "data": [{"id": MODEL, "object": "model", "owned_by": "test"}]}
            self._send(200, json.dumps(body).encode(), "application/json")
        else:
            self._send(404, b'{"error": "not found"}', "application/json")

    def do_POST(self):
        length = int(self.headers.get("Content-Length", 0))
        request = json.loads(self.rfile.read(length) or b"{}")
        if self.path != "/v1/chat/completions":
            self._send(404, b'{"error": "not found"}', "application/json")
            return
        last_user = next((m["content"] for m in reversed(request["messages"]) if m["role"] == "user"), "")
        choices = [
            {
                "index": i,
                "message": {"role": "assistant", "content": f"echo: {last_user}"},
                "finish_reason": "stop",
                "logprobs": None,
            }
            for i in range(int(request.get("n", 1)))
        ]
        body = {
            "id": "chatcmpl-stub",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": request.get("model", MODEL),
            "choices": choices,
            "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2},
        }
        self._send(200, json.dumps(body).encode(), "application/json")


@contextlib.contextmanager
def run_stub():
    """Start the stub on a free port; yield its base URL (``http://127.0.0.1:PORT``)."""
    from atroposlib.testing.api_process import free_port

    port = free_port()
    proc = subprocess.Popen([sys.executable, __file__, str(port)])
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                urllib.request.urlopen(f"{url}/ok", timeout=1).read()
                break
            except OSError:
                if proc.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("http stub did not start") from None
                time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


if __name__ == "__main__":
    ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), Handler).serve_forever()
