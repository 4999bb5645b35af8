"""The vLLM engine's own state, for operators and the trainer (vLLM server only).

* ``GET /health_generate``: 200 once a one-token generation succeeds (500 naming the error otherwise);
  no API key needed, like ``/health``.
* ``GET /bridge/info``, ``GET /bridge/state_dict_info``, ``GET /bridge/debug``, ``GET /bridge/list_endpoints``:
  what is served and how.
* ``POST /bridge/pause?mode=keep|wait|abort``, ``POST /bridge/resume``, ``GET /bridge/is_paused``;
  ``POST /bridge/sleep?level=0|1|2``, ``POST /bridge/wake_up``, ``GET /bridge/is_sleeping``.
* ``GET /lora/status``: the active adapter and the adapters found under ``$LOGDIR``.
"""

from __future__ import annotations

import asyncio
import os
import uuid
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from example_trainer.inference.routes.backend import backend_of
from example_trainer.inference.routes.errors import ApiError, check_pause_mode
from example_trainer.inference.routes.lora import list_adapter_dirs
from example_trainer.inference.vllm_backend import BridgeState, VllmBackend, shared_weights_on


def device_name() -> str:
    """``cuda`` when torch sees a GPU, else ``cpu``."""
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:  # pragma: no cover - torch ships with vLLM
        return "cpu"


def bridge_info(engine: Any, state: BridgeState, *, shared: bool, device: str) -> dict[str, Any]:
    """The ``/bridge/info`` reply."""
    return {
        "enabled": True,
        "shared_weights": shared,
        "update_count": state.update_count,
        "last_update_time": state.last_update_time,
        "model_name": str(engine.model_config.model),
        "device": device,
    }


def debug_info(engine: Any, environ: Mapping[str, str], vllm_version: str) -> dict[str, Any]:
    """The ``/bridge/debug`` reply (``engine`` may be None before the engine runs)."""
    info: dict[str, Any] = {
        "engine_type": type(engine).__name__ if engine is not None else None,
        "vllm_version": vllm_version,
        "patches_applied": False,
        "shared_weights_env": environ.get("VLLM_ENABLE_SHARED_WEIGHTS", "0"),
        "num_inference_nodes": environ.get("NUM_INFERENCE_NODES", "unset"),
        "logdir": environ.get("LOGDIR", "unset"),
    }
    if engine is not None:
        info["model_config"] = {
            "model": str(engine.model_config.model),
            "dtype": str(engine.model_config.dtype),
        }
    return info


def endpoint_list(routes: Iterable[Any]) -> list[dict[str, Any]]:
    """``[{"path", "methods"}]`` of the app's routes that have both."""
    return [
        {"path": route.path, "methods": sorted(route.methods)}
        for route in routes
        if getattr(route, "methods", None) and getattr(route, "path", None)
    ]


def lora_status(state: BridgeState, *, lora_available: bool, log_dir: str) -> dict[str, Any]:
    """The ``/lora/status`` reply: the active adapter and the adapter directories under ``log_dir``."""
    active = state.active_lora
    return {
        "lora_available": lora_available,
        "active_adapter_path": state.active_lora_path,
        "active_adapter_name": active.lora_name if active is not None else None,
        "active_adapter_id": active.lora_int_id if active is not None else None,
        "load_count": state.lora_load_count,
        "available_adapters": list_adapter_dirs(log_dir),
    }


def _backend(request: Request) -> VllmBackend:
    backend = backend_of(request)
    assert isinstance(backend, VllmBackend), "the engine routes serve the vLLM backend only"
    return backend


async def _health_generate(request: Request) -> Response:
    from vllm import SamplingParams

    engine = _backend(request).engine
    try:
        async for _ in engine.generate(
            {"prompt_token_ids": [0]}, SamplingParams(max_tokens=1), f"health-{uuid.uuid4().hex}"
        ):
            pass
    except asyncio.CancelledError:
        return Response(status_code=499)
    except Exception as exc:  # noqa: BLE001 - a failing engine is what this route reports
        raise ApiError(500, f"generation failed: {exc}") from exc
    return Response(status_code=200)


def engine_info_router(dependencies: Sequence[Any] = ()) -> APIRouter:
    """``/health_generate`` (unguarded) and the informational routes, guarded by ``dependencies``."""
    router = APIRouter()
    router.add_api_route("/health_generate", _health_generate, methods=["GET"])
    auth = list(dependencies)

    @router.get("/bridge/info", dependencies=auth)
    async def info(request: Request) -> dict[str, Any]:
        backend = _backend(request)
        return bridge_info(backend.engine, backend.state, shared=shared_weights_on(), device=device_name())

    @router.get("/bridge/state_dict_info", dependencies=auth)
    async def state_dict_info(request: Request) -> dict[str, Any]:
        engine = _backend(request).engine
        return {
            "model": str(engine.model_config.model),
            "dtype": str(engine.model_config.dtype),
            "shared_weights_enabled": shared_weights_on(),
        }

    @router.get("/bridge/debug", dependencies=auth)
    async def debug(request: Request) -> dict[str, Any]:
        from vllm import __version__ as vllm_version

        return debug_info(getattr(request.app.state, "engine_client", None), os.environ, vllm_version)

    @router.get("/bridge/list_endpoints", dependencies=auth)
    async def list_endpoints(request: Request) -> dict[str, Any]:
        return {"endpoints": endpoint_list(request.app.routes)}

    @router.get("/lora/status", dependencies=auth)
    async def status(request: Request) -> dict[str, Any]:
        backend = _backend(request)
        return lora_status(
            backend.state, lora_available=backend.lora_enabled(), log_dir=os.environ.get("LOGDIR", ".")
        )

    return router


def engine_control_router(dependencies: Sequence[Any] = ()) -> APIRouter:
    """Pause/resume and sleep/wake of the engine, guarded by ``dependencies``."""
    router = APIRouter(dependencies=list(dependencies))

    @router.post("/bridge/pause")
    async def pause(request: Request, mode: str = "keep") -> dict[str, str]:
        check_pause_mode(mode, field="mode")
        engine = _backend(request).engine
        if not hasattr(engine, "pause_generation"):
            return {"status": "not_supported"}
        await engine.pause_generation(mode=mode, clear_cache=mode != "keep")
        return {"status": "paused"}

    @router.post("/bridge/resume")
    async def resume(request: Request) -> dict[str, str]:
        engine = _backend(request).engine
        if not hasattr(engine, "resume_generation"):
            return {"status": "not_supported"}
        await engine.resume_generation()
        return {"status": "resumed"}

    @router.get("/bridge/is_paused")
    async def is_paused(request: Request) -> dict[str, bool]:
        engine = _backend(request).engine
        paused = await engine.is_paused() if hasattr(engine, "is_paused") else False
        return {"paused": bool(paused)}

    @router.post("/bridge/sleep")
    async def sleep(request: Request, level: int = 1) -> dict[str, str]:
        if level not in (0, 1, 2):
            raise ApiError(400, "level must be 0, 1 or 2")
        await _backend(request).engine.sleep(level)
        return {"status": "sleeping"}

    @router.post("/bridge/wake_up")
    async def wake_up(request: Request) -> dict[str, str]:
        await _backend(request).engine.wake_up()
        return {"status": "awake"}

    @router.get("/bridge/is_sleeping")
    async def is_sleeping(request: Request) -> dict[str, bool]:
        return {"sleeping": bool(await _backend(request).engine.is_sleeping())}

    return router
