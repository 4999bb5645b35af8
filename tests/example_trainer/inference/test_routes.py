"""The shared inference routes (example_trainer.inference.routes) over a recording backend, and their pure
functions. The engines behind them are tested in test_hf_generation.py and test_server_routes.py."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from fastapi import Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response
from fastapi.testclient import TestClient

from example_trainer.inference.hf_generation import bearer_guard
from example_trainer.inference.routes.backend import install_backend
from example_trainer.inference.routes.bodies import WeightGroupBody
from example_trainer.inference.routes.engine import bridge_info, debug_info, endpoint_list, lora_status
from example_trainer.inference.routes.errors import (
    ApiError,
    api_error_handler,
    check_pause_mode,
    error_body,
)
from example_trainer.inference.routes.generate import generate_router
from example_trainer.inference.routes.lora import adapter_dir_to_load, lora_router
from example_trainer.inference.routes.weights import checkpoint_to_load, updated_reply, weights_router
from example_trainer.inference.vllm_backend import BridgeState
from example_trainer.inference.weight_refresh import CheckpointError


class RecordingBackend:
    """Records each call; ``fail`` maps a method name to the exception it raises."""

    def __init__(self, fail: dict[str, Exception] | None = None) -> None:
        self.calls: list[tuple[str, tuple[Any, ...]]] = []
        self.fail = fail or {}
        self.update_count = 0

    def _call(self, name: str, *args: Any) -> None:
        self.calls.append((name, args))
        if name in self.fail:
            raise self.fail[name]

    async def generate(self, body: Any, request: Request) -> Response:
        self._call("generate", body)
        return JSONResponse({"text": ["ok"], "echo": body})

    async def update_weights(self, checkpoint: Path, pause_mode: str) -> float:
        self._call("update_weights", checkpoint, pause_mode)
        self.update_count += 1
        return 0.25

    async def shared_manifest(self) -> dict[str, Any]:
        self._call("shared_manifest")
        return {"tensors": []}

    async def join_weight_group(self, group: WeightGroupBody) -> None:
        self._call("join_weight_group", group)

    async def receive_weights(self, tensors: list[dict[str, Any]], pause_mode: str) -> float:
        self._call("receive_weights", tensors, pause_mode)
        self.update_count += 1
        return 0.5

    async def load_adapter(self, adapter_path: str, adapter_name: str | None) -> dict[str, Any]:
        self._call("load_adapter", adapter_path, adapter_name)
        return {"adapter_name": adapter_name, "load_count": 1}

    async def unload_adapter(self) -> dict[str, Any]:
        self._call("unload_adapter")
        return {"previous_adapter": "/a"}


def _client(backend: RecordingBackend, dependencies: list[Any] | None = None) -> TestClient:
    app = FastAPI()
    app.add_exception_handler(ApiError, api_error_handler)
    install_backend(app, backend)
    for factory in (generate_router, weights_router, lora_router):
        app.include_router(factory(dependencies or []))
    return TestClient(app)


@pytest.fixture
def checkpoint(tmp_path: Path) -> Path:
    path = tmp_path / "step_1"
    path.mkdir()
    (path / "model.safetensors").write_bytes(b"")
    return path


def _error(resp: Any, code: int) -> str:
    assert resp.status_code == code, resp.text
    body = resp.json()
    assert set(body) == {"error"} and body["error"]["code"] == code and body["error"]["param"] is None
    return body["error"]["message"]


# --- pure functions ---------------------------------------------------------------------------------------
def test_error_body_is_vllms_shape():
    assert error_body(404, "gone") == {
        "error": {"message": "gone", "type": "Not Found", "param": None, "code": 404}
    }


def test_check_pause_mode_names_the_field():
    assert check_pause_mode("keep") == "keep"
    with pytest.raises(ApiError) as info:
        check_pause_mode("later", field="mode")
    assert (
        info.value.status_code == 400
        and info.value.message == "mode must be one of ['wait', 'keep', 'abort']"
    )


def test_checkpoint_to_load(tmp_path, checkpoint):
    assert checkpoint_to_load(str(checkpoint)) == checkpoint.resolve()
    with pytest.raises(ApiError) as missing:
        checkpoint_to_load(str(tmp_path / "nope"))
    assert missing.value.status_code == 404
    (tmp_path / "empty").mkdir()
    with pytest.raises(ApiError) as empty:
        checkpoint_to_load(str(tmp_path / "empty"))
    assert empty.value.status_code == 400 and "weight files" in empty.value.message


def test_updated_reply_keeps_its_field_order():
    assert list(updated_reply(1.0, 3, Path("/c"))) == ["status", "checkpoint_dir", "seconds", "update_count"]
    assert updated_reply(1.0, 3) == {"status": "updated", "seconds": 1.0, "update_count": 3}


def test_adapter_dir_to_load(tmp_path):
    assert adapter_dir_to_load(str(tmp_path)) == tmp_path
    with pytest.raises(ApiError) as info:
        adapter_dir_to_load(str(tmp_path / "x"))
    assert (info.value.status_code, info.value.message) == (404, f"Adapter not found: {tmp_path / 'x'}")


def test_engine_info_replies():
    engine = SimpleNamespace(model_config=SimpleNamespace(model="/m", dtype="float32"))
    state = BridgeState(update_count=2, last_update_time=5.0)
    assert bridge_info(engine, state, shared=True, device="cpu") == {
        "enabled": True, "shared_weights": True, "update_count": 2, "last_update_time": 5.0,
        "model_name": "/m", "device": "cpu",
    }  # fmt: skip
    debug = debug_info(engine, {"LOGDIR": "/logs"}, "0.1")
    assert debug["engine_type"] == "SimpleNamespace" and debug["logdir"] == "/logs"
    assert (
        debug["model_config"] == {"model": "/m", "dtype": "float32"}
        and debug["num_inference_nodes"] == "unset"
    )
    assert "model_config" not in debug_info(None, {}, "0.1")


def test_endpoint_list_and_lora_status(tmp_path):
    routes = [SimpleNamespace(path="/a", methods={"POST", "GET"}), SimpleNamespace(path="/ws", methods=None)]
    assert endpoint_list(routes) == [{"path": "/a", "methods": ["GET", "POST"]}]
    (tmp_path / "step_3").mkdir()
    (tmp_path / "step_3" / "adapter_config.json").write_text("{}")
    (tmp_path / "other").mkdir()
    state = BridgeState(active_lora=SimpleNamespace(lora_name="a1", lora_int_id=7), active_lora_path="/p")
    assert lora_status(state, lora_available=True, log_dir=str(tmp_path)) == {
        "lora_available": True, "active_adapter_path": "/p", "active_adapter_name": "a1",
        "active_adapter_id": 7, "load_count": 0, "available_adapters": ["step_3"],
    }  # fmt: skip


# --- the routes -------------------------------------------------------------------------------------------
def test_update_weights_route(tmp_path, checkpoint):
    backend = RecordingBackend()
    client = _client(backend)
    resp = client.post(
        "/bridge/update_weights", json={"checkpoint_dir": str(checkpoint), "pause_mode": "keep"}
    )
    assert resp.status_code == 200
    assert resp.json() == {
        "status": "updated", "checkpoint_dir": str(checkpoint.resolve()), "seconds": 0.25, "update_count": 1,
    }  # fmt: skip
    assert backend.calls == [("update_weights", (checkpoint.resolve(), "keep"))]
    assert "not found" in _error(
        client.post("/bridge/update_weights", json={"checkpoint_dir": str(tmp_path / "x")}), 404
    )
    bad_mode = {"checkpoint_dir": str(checkpoint), "pause_mode": "soon"}
    assert _error(client.post("/bridge/update_weights", json=bad_mode), 400).startswith(
        "pause_mode must be one of"
    )
    extra = {"checkpoint_dir": str(checkpoint), "step": 3}
    assert _error(client.post("/bridge/update_weights", json=extra), 400).startswith("invalid body: step:")
    assert len(backend.calls) == 1  # refused requests never reach the engine


def test_a_checkpoint_the_backend_refuses_is_a_400(checkpoint):
    client = _client(RecordingBackend(fail={"update_weights": CheckpointError("wrong shapes")}))
    assert (
        _error(client.post("/bridge/update_weights", json={"checkpoint_dir": str(checkpoint)}), 400)
        == "wrong shapes"
    )


def test_weight_broadcast_routes():
    backend = RecordingBackend()
    client = _client(backend)
    group = {"host": "127.0.0.1", "port": 29500, "world_size": 2, "rank": 1}
    assert client.post("/bridge/init_weight_group", json=group).json() == {
        "status": "joined",
        "rank": 1,
        "world_size": 2,
    }
    assert backend.calls[0][1][0] == WeightGroupBody(**group)
    assert "rank" in _error(client.post("/bridge/init_weight_group", json={**group, "rank": 0}), 400)
    resp = client.post("/bridge/receive_weights", json={"tensors": [{"name": "w"}]})
    assert resp.json() == {"status": "updated", "seconds": 0.5, "update_count": 1}
    assert backend.calls[-1] == ("receive_weights", ([{"name": "w"}], "wait"))
    assert "tensors" in _error(client.post("/bridge/receive_weights", json={"tensors": []}), 400)


def test_shared_weights_route_passes_the_backends_refusal():
    assert _client(RecordingBackend()).get("/bridge/shared_weights").json() == {"tensors": []}
    refusing = RecordingBackend(fail={"shared_manifest": ApiError(409, "not shared")})
    assert _error(_client(refusing).get("/bridge/shared_weights"), 409) == "not shared"


def test_lora_routes(tmp_path):
    backend = RecordingBackend()
    client = _client(backend)
    resp = client.post("/lora/load", json={"adapter_path": str(tmp_path), "adapter_name": "a", "extra": 1})
    assert resp.status_code == 200
    assert list(resp.json().items()) == [
        ("status", "ok"), ("adapter_path", str(tmp_path)), ("adapter_name", "a"), ("load_count", 1),
    ]  # fmt: skip
    missing = str(tmp_path / "none")
    assert (
        _error(client.post("/lora/load", json={"adapter_path": missing}), 404)
        == f"Adapter not found: {missing}"
    )
    assert client.post("/lora/unload").json() == {"status": "ok", "previous_adapter": "/a"}
    assert [name for name, _ in backend.calls] == ["load_adapter", "unload_adapter"]


def test_generate_route_hands_the_json_body_over():
    backend = RecordingBackend()
    client = _client(backend)
    assert client.post("/generate", json={"prompt": "hi"}).json() == {
        "text": ["ok"],
        "echo": {"prompt": "hi"},
    }
    message = _error(client.post("/generate", content=b"{not json"), 400)
    assert message.startswith("request body is not valid JSON")
    assert backend.calls == [("generate", ({"prompt": "hi"},))]


def test_route_dependencies_guard_every_shared_route():
    async def deny() -> None:
        raise ApiError(401, "missing or invalid bearer token")

    backend = RecordingBackend()
    client = _client(backend, [Depends(deny)])
    for path in (
        "/generate",
        "/bridge/update_weights",
        "/bridge/receive_weights",
        "/lora/load",
        "/lora/unload",
    ):
        assert _error(client.post(path, json={}), 401) == "missing or invalid bearer token"
    assert _error(client.get("/bridge/shared_weights"), 401)
    assert backend.calls == []


def test_bearer_guard_leaves_health_open():
    app = FastAPI()
    app.middleware("http")(bearer_guard("sk"))
    app.get("/health")(lambda: Response(status_code=200))
    app.get("/v1/models")(lambda: {"data": []})
    client = TestClient(app)
    assert client.get("/health").status_code == 200
    resp = client.get("/v1/models")
    assert resp.status_code == 401
    assert json.loads(resp.content) == error_body(401, "unauthorized")
    assert client.get("/v1/models", headers={"Authorization": "Bearer sk"}).json() == {"data": []}
