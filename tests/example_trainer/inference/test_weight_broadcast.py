"""The broadcast hand-off's two ends, in one process: the trainer's :class:`WeightBroadcaster` and the server's
:class:`WeightReceiver` over a real gloo group, behind a minimal HTTP shell of the server's two routes.

The contract under test: a hand-off sends the tensors themselves (no copy), so a background hand-off
(``wait=False``) must be waited for (:meth:`WeightBroadcaster.wait_sent`) before the tensors change, and
then delivers exactly the weights of the moment it was asked for.
"""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest
import torch

from example_trainer.inference.weight_broadcast import (
    WeightBroadcaster,
    WeightBroadcastError,
    WeightReceiver,
    bucket_layout,
    tensor_specs,
    unpack,
)


class _ReceivingServer:
    """The server's routes ``/bridge/init_weight_group`` and ``/bridge/receive_weights`` around a real
    :class:`WeightReceiver`; ``delay`` seconds pass before each receive (a busy server), and ``refuse``
    answers the receive with HTTP 500 without taking part in the broadcast."""

    def __init__(self, delay: float = 0.0, refuse: bool = False) -> None:
        self.receiver = WeightReceiver()
        self.received: list[dict[str, torch.Tensor]] = []
        self.delay, self.refuse = delay, refuse
        owner = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self) -> None:  # noqa: N802 - http.server's name
                body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
                if self.path == "/bridge/init_weight_group":
                    owner.receiver.join(
                        body["host"], body["port"], body["world_size"], body["rank"], body["backend"],
                        body["timeout"],
                    )  # fmt: skip
                    return self._answer(200, {"ok": True})
                if owner.refuse:
                    return self._answer(500, {"detail": "refused"})
                time.sleep(owner.delay)
                owner.received.append(
                    {n: t.clone() for n, t in owner.receiver.receive(body["tensors"], "cpu")}
                )
                return self._answer(200, {"ok": True})

            def _answer(self, status: int, body: dict) -> None:
                data = json.dumps(body).encode()
                self.send_response(status)
                self.send_header("Content-Length", str(len(data)))
                self.end_headers()
                self.wfile.write(data)

            def log_message(self, *args) -> None:
                pass

        self.httpd = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://127.0.0.1:{self.httpd.server_address[1]}"
        threading.Thread(target=self.httpd.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()


@pytest.fixture
def make_server():
    servers: list[_ReceivingServer] = []

    def make(**kw) -> _ReceivingServer:
        servers.append(_ReceivingServer(**kw))
        return servers[-1]

    yield make
    for server in servers:
        server.close()


def test_the_receivers_layout_holds_every_tensor_once_in_order():
    named = [
        ("a", torch.arange(6.0).view(2, 3)), ("b", torch.tensor(7, dtype=torch.int64)),
        ("c", torch.ones(4, dtype=torch.bfloat16)), ("d", torch.full((2,), 3.0)),
    ]  # fmt: skip
    specs = tensor_specs(named)
    assert bucket_layout(specs) == [(torch.float32, 8), (torch.int64, 1), (torch.bfloat16, 4)]
    buckets = [torch.zeros(n, dtype=dtype) for dtype, n in bucket_layout(specs)]
    for (_, view), (_, tensor) in zip(unpack(specs, buckets), named, strict=True):
        view.copy_(tensor)
    assert buckets[0].tolist() == [0, 1, 2, 3, 4, 5, 3, 3]
    assert [n for n, _ in unpack(specs, buckets)] == ["a", "b", "c", "d"]
    assert all(torch.equal(v, t) for (_, v), (_, t) in zip(unpack(specs, buckets), named, strict=True))


def test_a_background_hand_off_delivers_the_weights_of_the_moment_it_was_asked_for(make_server):
    """The optimizer waits for the send (as the trainer's pre-hook makes it), so the step taken during the
    hand-off does not leak into it. Without the wait the step would change the weights the broadcast is
    still reading: 64 MB do not fit in the loopback socket buffers while the server is busy."""
    server = make_server(delay=0.5)
    model = torch.nn.Linear(4096, 4096)
    optimizer = torch.optim.SGD(model.parameters(), lr=1.0)
    sender = WeightBroadcaster([server.url], timeout=60)
    optimizer.register_step_pre_hook(lambda *_: sender.wait_sent())
    try:
        model(torch.ones(1, 4096)).sum().backward()
        before = {n: t.clone() for n, t in model.state_dict().items()}
        sender.send(list(model.state_dict().items()), wait=False)
        optimizer.step()  # waits until the weights are sent, then changes them
        sender.wait()
    finally:
        sender.close()
    (got,) = server.received
    assert got.keys() == before.keys()
    assert all(torch.equal(got[n], before[n]) for n in before)
    assert not torch.equal(model.weight, before["weight"])  # the step did change the weights afterwards


def test_a_hand_off_the_server_refuses_releases_the_weights_and_raises(make_server):
    server = make_server(refuse=True)
    model = torch.nn.Linear(8, 8)
    sender = WeightBroadcaster([server.url], timeout=2)
    try:
        sender.send(list(model.state_dict().items()), wait=False)
        sender.wait_sent()  # the broadcast gave up (the group's timeout): the weights may change
        with pytest.raises(WeightBroadcastError, match="HTTP 500"):
            sender.wait()
    finally:
        sender.abandon()
    assert server.received == []
