"""The env's API client against a scripted HTTP endpoint: backpressure, retries, 4xx, spill file, gzip, auth.

The endpoint is a small aiohttp app on loopback that answers from a script of statuses (a stand-in for the
trajectory API, which is outside the unit under test; the real API is exercised in test_serve.py).
"""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest
from aiohttp import web

from atroposlib.envs.serve import api_client
from atroposlib.envs.serve.api_client import (
    ApiRejected,
    ApiUnavailable,
    TrajectoryApiClient,
    encode_body,
    parse_retry_after,
)
from atroposlib.envs.serve.jsonl_sink import UnsentGroupsFile, read_unsent_groups
from atroposlib.testing.api_process import free_port


class ScriptedApi:
    """Answers POST /scored_data[_list] with the next scripted (status, headers, body); then 200."""

    def __init__(self):
        self.script: list[tuple[int, dict, str]] = []
        self.received: list[dict] = []
        self.app = web.Application()
        self.app.router.add_post("/scored_data", self.handle)
        self.app.router.add_post("/scored_data_list", self.handle)
        self.app.router.add_get("/status-env", self.status)
        self.app.router.add_post("/register-env", self.handle)

    async def handle(self, request: web.Request) -> web.Response:
        raw = await request.read()  # aiohttp inflates gzip request bodies itself
        self.received.append(
            {"path": request.path, "headers": dict(request.headers), "raw": raw, "json": json.loads(raw)}
        )
        if self.script:
            status, headers, text = self.script.pop(0)
            return web.Response(status=status, headers=headers, text=text)
        return web.json_response({"status": "received"})

    async def status(self, request: web.Request) -> web.Response:
        body = await request.json()  # the env id travels as a JSON body on this GET
        self.received.append({"path": request.path, "json": body, "headers": dict(request.headers)})
        return web.json_response({"current_step": 0, "queue_size": 0, "env_id_seen": body["env_id"]})


@pytest.fixture
async def scripted_api():
    api = ScriptedApi()
    runner = web.AppRunner(api.app)
    await runner.setup()
    port = free_port()
    site = web.TCPSite(runner, "127.0.0.1", port)
    await site.start()
    api.url = f"http://127.0.0.1:{port}"
    yield api
    await runner.cleanup()


def make_client(url, tmp_path, **kw):
    kw.setdefault("send_attempts", 3)
    kw.setdefault("max_backoff", 0.05)
    return TrajectoryApiClient(
        url, unsent=UnsentGroupsFile(tmp_path / "unsent.jsonl"), label="test-env", **kw
    )


GROUP = {"tokens": [[1, 2]], "masks": [[-100, 2]], "scores": [1.0], "env_id": 3}


async def test_backpressure_resends_the_same_body_until_accepted(scripted_api, tmp_path, caplog):
    caplog.set_level("INFO")
    scripted_api.script = [
        (503, {"Retry-After": "0.05"}, "full"),
        (503, {}, "full"),
        (503, {"Retry-After": "0"}, ""),
    ]
    client = make_client(scripted_api.url, tmp_path, send_attempts=1)
    outcome = await client.send_scored_data(GROUP)
    await client.close()
    assert outcome.delivered and outcome.response == {"status": "received"}
    assert len(scripted_api.received) == 4
    assert len({r["raw"] for r in scripted_api.received}) == 1  # byte-identical resends
    assert client.stats["backpressure_waits"] == 1 and client.stats["delivered"] == 1
    assert any("API queue is full (503)" in r.getMessage() for r in caplog.records)
    assert any("accepted the group after" in r.getMessage() for r in caplog.records)
    assert not (tmp_path / "unsent.jsonl").exists()


async def test_server_errors_are_retried_then_spilled(scripted_api, tmp_path):
    scripted_api.script = [(500, {}, "boom"), (502, {}, "bad gateway")]
    client = make_client(scripted_api.url, tmp_path)
    outcome = await client.send_scored_data(GROUP)
    assert outcome.delivered and len(scripted_api.received) == 3
    scripted_api.script = [(500, {}, "boom")] * 3
    outcome = await client.send_scored_data([GROUP, GROUP])
    await client.close()
    assert not outcome.delivered and client.stats["failed"] == 1
    assert outcome.spilled_to == tmp_path / "unsent.jsonl"
    (record,) = list(read_unsent_groups(outcome.spilled_to))
    assert record["endpoint"] == "/scored_data_list"
    assert record["payload"] == [GROUP, GROUP]
    assert "500" in record["reason"]


async def test_client_errors_are_logged_counted_and_spilled(scripted_api, tmp_path, caplog):
    detail = {"detail": [{"loc": ["body", "scores"], "msg": "scores must be finite"}]}
    scripted_api.script = [(422, {"Content-Type": "application/json"}, json.dumps(detail))]
    client = make_client(scripted_api.url, tmp_path)
    outcome = await client.send_scored_data(GROUP)
    await client.close()
    assert not outcome.delivered
    assert len(scripted_api.received) == 1  # no pointless retry of a rejected payload
    assert client.stats["rejected"] == 1
    assert any(
        "rejected a group (HTTP 422): body.scores: scores must be finite" in r.getMessage()
        for r in caplog.records
    )
    assert next(read_unsent_groups(tmp_path / "unsent.jsonl"))["payload"] == GROUP


async def test_unreachable_api_is_spilled(tmp_path):
    client = make_client(f"http://127.0.0.1:{free_port()}", tmp_path)
    outcome = await client.send_scored_data(GROUP)
    await client.close()
    assert not outcome.delivered and "ClientConnectorError" in outcome.error
    assert next(read_unsent_groups(tmp_path / "unsent.jsonl"))["payload"] == GROUP


async def test_cancelled_send_is_saved(scripted_api, tmp_path):
    scripted_api.script = [(503, {"Retry-After": "30"}, "")] * 100
    client = make_client(scripted_api.url, tmp_path, max_backoff=30)
    task = asyncio.create_task(client.send_scored_data(GROUP))
    while not scripted_api.received:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await client.close()
    record = next(read_unsent_groups(tmp_path / "unsent.jsonl"))
    assert record["reason"] == "cancelled during shutdown" and record["payload"] == GROUP


async def test_gzip_auth_header_and_status_body(scripted_api, tmp_path, monkeypatch):
    monkeypatch.setenv("ATROPOS_API_KEY", "sekrit")
    client = make_client(scripted_api.url, tmp_path)
    big = {**GROUP, "tokens": [list(range(2000))], "masks": [list(range(2000))]}
    assert (await client.send_scored_data(big)).delivered
    assert (await client.send_scored_data(GROUP)).delivered
    status = await client.status_env(7)
    await client.close()
    first, second, poll = scripted_api.received
    assert first["headers"]["Content-Encoding"] == "gzip" and first["json"] == big
    assert int(first["headers"]["Content-Length"]) < len(json.dumps(big)) / 2
    assert "Content-Encoding" not in second["headers"]
    assert all(r["headers"]["Authorization"] == "Bearer sekrit" for r in scripted_api.received)
    assert poll["json"] == {"env_id": 7} and status["env_id_seen"] == 7


async def test_single_requests_raise_typed_errors(scripted_api, tmp_path):
    scripted_api.script = [(422, {}, '{"detail": "desired_name: field required"}')]
    client = make_client(scripted_api.url, tmp_path)
    with pytest.raises(ApiRejected) as err:
        await client.register_env({"desired_name": None})
    assert err.value.status == 422 and err.value.reason == "desired_name: field required"
    unreachable = make_client(f"http://127.0.0.1:{free_port()}", tmp_path)
    with pytest.raises(ApiUnavailable):
        await unreachable.info()
    await unreachable.close()
    await client.close()


def test_encode_body_and_retry_after():
    body, headers = encode_body({"x": np.arange(3), "y": np.float32(0.5)})
    assert json.loads(body) == {"x": [0, 1, 2], "y": 0.5} and "Content-Encoding" not in headers
    assert parse_retry_after("2") == 2.0
    assert parse_retry_after("100", cap=30) == 30
    assert parse_retry_after("garbage", default=1.5) == 1.5
    assert parse_retry_after(None) == 1.0
    assert parse_retry_after("-3") == 0.05


async def test_resend_tool_delivers_a_spill_file(scripted_api, tmp_path, capsys):
    spill = UnsentGroupsFile(tmp_path / "spill.jsonl")
    spill.append(GROUP, endpoint="/scored_data", reason="test")
    spill.append([GROUP], endpoint="/scored_data_list", reason="test")
    spill.close()
    delivered, failed = await api_client.resend_unsent(tmp_path / "spill.jsonl", scripted_api.url)
    assert (delivered, failed) == (2, 0)
    assert [r["path"] for r in scripted_api.received] == ["/scored_data", "/scored_data_list"]
    assert api_client.main(["resend", str(tmp_path / "missing.jsonl")]) == 2
