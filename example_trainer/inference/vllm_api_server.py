"""The trainer's vLLM inference server: vLLM's OpenAI server plus the Atropos routes.

Run it as a module (the ``vllm`` console script does not work with every vLLM build)::

    python -m example_trainer.inference.vllm_api_server --model Qwen/Qwen2.5-1.5B-Instruct --port 9001

It serves everything ``python -m vllm.entrypoints.openai.api_server`` serves (``/v1/completions``,
``/v1/chat/completions``, ``/v1/models``, ``/tokenize``, ``/metrics``, ...) and adds:

* ``GET /health`` (200, empty body; 503 once the engine is dead) and ``GET /health_generate``;
* ``POST /generate``: token ids or text in, completions with per-token logprobs out (the route that
  ``server_type: vllm`` environments use for training data);
* ``/bridge/*``: engine state (pause/resume, sleep/wake, debug) and ``POST /bridge/update_weights``,
  which reloads the weights from a checkpoint directory in place, without a restart;
* ``/lora/status``, ``/lora/load``, ``/lora/unload``: the active LoRA adapter that ``/generate`` and
  OpenAI requests naming the base model use;
* ``GET /bridge/shared_weights`` (server started with ``ATROPOS_SHARED_WEIGHTS=1``): handles to the
  workers' own parameters for ``--weight-bridge-mode shared_vllm`` (:mod:`example_trainer.inference.shared_weights`);
* ``POST /bridge/init_weight_group``, ``POST /bridge/receive_weights``: weights broadcast by the trainer
  straight into the workers (:mod:`example_trainer.inference.weight_broadcast`), without a checkpoint on disk.

Every flag of vLLM's OpenAI server is accepted; the defaults differ in ``--port`` (9001) and
``--log-level`` also accepts lower case (``info``), as the original server did. Bad requests get a
4xx answer in vLLM's error format ``{"error": {"message", "type", "code"}}``, never a 500.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
import time
import uuid
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from pathlib import Path
from typing import Any, Literal, TypeVar

from fastapi import APIRouter, Depends, FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field, ValidationError
from starlette.middleware import Middleware

from example_trainer.inference.weight_refresh import (
    PAUSE_MODES,
    WORKER_EXTENSION,
    CheckpointError,
    check_compatible,
    reload_weights_in_place,
    validate_checkpoint_dir,
)

DEFAULT_PORT = 9001
#: Keys of a ``/generate`` body that are not sampling parameters.
_NON_SAMPLING_KEYS = ("prompt", "stream")
#: The OpenAI routes whose ``model`` field is redirected to the active LoRA adapter.
_LORA_REDIRECT_PATHS = ("/v1/completions", "/v1/chat/completions")


class BadRequest(ValueError):
    """A client error in a request body; the message is returned to the client with a 400."""


class ApiError(Exception):
    """An HTTP error answered as ``{"error": {"message", "type", "param", "code"}}`` (vLLM's shape).

    Unlike vLLM's own handler, the message is not sanitised: paths and names stay in it, so
    the trainer's log says exactly which checkpoint or adapter was refused.
    """

    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message


async def _api_error_handler(_request: Request, exc: ApiError) -> JSONResponse:
    error = {"message": exc.message, "type": HTTPStatus(exc.status_code).phrase, "param": None}
    return JSONResponse({"error": {**error, "code": exc.status_code}}, status_code=exc.status_code)


def _validation_message(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "body"
        parts.append(f"{loc}: {err['msg']}")
    return "invalid body: " + "; ".join(parts)


# ----------------------------------------------------------------------------------------------
# /generate: pure request parsing and response formatting
# ----------------------------------------------------------------------------------------------


@dataclass
class GenerateRequest:
    """A validated ``/generate`` body: the engine prompt, stream flag and sampling parameters."""

    prompt: str | dict[str, list[int]]
    stream: bool
    sampling_params: Any  # vllm.SamplingParams


def _parse_token_ids(value: Any, vocab_size: int | None) -> list[int]:
    if not isinstance(value, list) or not value:
        raise BadRequest("'prompt_token_ids' must be a non-empty list of integers")
    for tok in value:
        if isinstance(tok, bool) or not isinstance(tok, int):
            raise BadRequest(f"'prompt_token_ids' must hold integers, got {tok!r}")
        if tok < 0 or (vocab_size is not None and tok >= vocab_size):
            raise BadRequest(f"token id {tok} is outside the vocabulary [0, {vocab_size})")
    return list(value)


def parse_generate_request(body: Any, *, vocab_size: int | None = None) -> GenerateRequest:
    """Validate a ``/generate`` JSON body and build its :class:`vllm.SamplingParams`.

    ``prompt`` is a string, ``{"prompt_token_ids": [int, ...]}`` or a bare list of token ids;
    ``stream`` is an optional bool; every other key is passed to ``SamplingParams``. Token ids
    must lie in ``[0, vocab_size)`` when ``vocab_size`` is given. Non-stream requests return
    only the final output; stream requests return cumulative outputs.

    Raises:
        BadRequest: with a message naming the offending field.
    """
    from vllm.exceptions import VLLMError
    from vllm.sampling_params import RequestOutputKind, SamplingParams

    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    if "prompt" not in body:
        raise BadRequest("missing required field 'prompt'")
    raw_prompt = body["prompt"]
    prompt: str | dict[str, list[int]]
    if isinstance(raw_prompt, str):
        if not raw_prompt:
            raise BadRequest("'prompt' must not be empty")
        prompt = raw_prompt
    elif isinstance(raw_prompt, dict):
        unknown = set(raw_prompt) - {"prompt_token_ids"}
        if unknown or "prompt_token_ids" not in raw_prompt:
            raise BadRequest("'prompt' as an object must be {\"prompt_token_ids\": [int, ...]}")
        prompt = {"prompt_token_ids": _parse_token_ids(raw_prompt["prompt_token_ids"], vocab_size)}
    elif isinstance(raw_prompt, list):
        prompt = {"prompt_token_ids": _parse_token_ids(raw_prompt, vocab_size)}
    else:
        raise BadRequest("'prompt' must be a string, a list of token ids or {\"prompt_token_ids\": [...]}")

    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest("'stream' must be a boolean")
    params = {k: v for k, v in body.items() if k not in _NON_SAMPLING_KEYS}
    params["output_kind"] = RequestOutputKind.CUMULATIVE if stream else RequestOutputKind.FINAL_ONLY
    try:
        sampling_params = SamplingParams(**params)
    except (TypeError, ValueError, VLLMError) as exc:
        raise BadRequest(f"invalid sampling parameters: {exc}") from exc
    return GenerateRequest(prompt=prompt, stream=stream, sampling_params=sampling_params)


def _position_logprobs(position: Mapping[int, Any] | None, chosen: int | None) -> dict[str, float] | None:
    """``{token_id: logprob}`` for one position, the chosen token first (clients read item 0)."""
    if position is None:
        return None
    out: dict[str, float] = {}
    if chosen is not None and chosen in position:
        out[str(chosen)] = float(position[chosen].logprob)
    for tok, lp in position.items():
        out.setdefault(str(tok), float(lp.logprob))
    return out


def format_generate_response(final_output: Any, sampling_params: Any, prompt_text: str) -> dict[str, Any]:
    """The non-stream ``/generate`` reply for one finished :class:`vllm.RequestOutput`.

    Always ``{"text": [...], "prompt": str, "finish_reasons": [...]}``. When ``logprobs`` was
    requested it adds ``"logprobs"`` (per output, per generated position, a one-element list
    holding ``{token_id: logprob}`` with the sampled token first), ``"prompt_token_ids"`` and
    ``"token_ids"`` (per output). When ``prompt_logprobs`` was requested it adds
    ``"prompt_logprobs"``: per prompt position ``{token_id: logprob}`` with the prompt's own token
    first, ``null`` for the first position.
    """
    outputs = list(final_output.outputs)
    reply: dict[str, Any] = {
        "text": [o.text for o in outputs],
        "prompt": prompt_text,
        "finish_reasons": [o.finish_reason for o in outputs],
    }
    if sampling_params.logprobs is not None:
        reply["logprobs"] = [
            [[_position_logprobs(pos, tok)] for pos, tok in zip(o.logprobs or [], o.token_ids, strict=False)]
            for o in outputs
        ]
        reply["prompt_token_ids"] = list(final_output.prompt_token_ids or [])
        reply["token_ids"] = [list(o.token_ids) for o in outputs]
    if sampling_params.prompt_logprobs is not None:
        prompt_ids = list(final_output.prompt_token_ids or [])
        reply["prompt_logprobs"] = [
            _position_logprobs(pos, prompt_ids[i] if i < len(prompt_ids) else None)
            for i, pos in enumerate(final_output.prompt_logprobs or [])
        ]
    return reply


def stream_chunk(request_output: Any, prompt_text: str) -> bytes:
    """One NDJSON line of a streamed ``/generate``: ``{"text": [prompt + text so far, ...]}``."""
    texts = [prompt_text + o.text for o in request_output.outputs]
    return (json.dumps({"text": texts}) + "\n").encode()


# ----------------------------------------------------------------------------------------------
# LoRA helpers
# ----------------------------------------------------------------------------------------------


def read_adapter_config(adapter_dir: str | Path) -> dict[str, Any]:
    """The summary ``{r, lora_alpha, target_modules, base_model}`` of a PEFT adapter directory.

    Raises:
        FileNotFoundError: the directory does not exist.
        BadRequest: it has no readable ``adapter_config.json``.
    """
    path = Path(adapter_dir)
    if not path.is_dir():
        raise FileNotFoundError(f"adapter directory not found: {adapter_dir}")
    cfg_path = path / "adapter_config.json"
    try:
        cfg = json.loads(cfg_path.read_text())
    except FileNotFoundError as exc:
        raise BadRequest(f"not a LoRA adapter directory (no adapter_config.json): {adapter_dir}") from exc
    except (OSError, ValueError) as exc:
        raise BadRequest(f"unreadable adapter_config.json in {adapter_dir}: {exc}") from exc
    if not isinstance(cfg, dict):
        raise BadRequest(f"adapter_config.json in {adapter_dir} is not a JSON object")
    return {
        "r": cfg.get("r"),
        "lora_alpha": cfg.get("lora_alpha"),
        "target_modules": cfg.get("target_modules"),
        "base_model": cfg.get("base_model_name_or_path"),
    }


def list_adapter_dirs(log_dir: str | Path) -> list[str]:
    """Names of the subdirectories of ``log_dir`` that contain an ``adapter_config.json``."""
    root = Path(log_dir)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir() and (p / "adapter_config.json").exists())


# ----------------------------------------------------------------------------------------------
# Server state and routes
# ----------------------------------------------------------------------------------------------


@dataclass
class BridgeState:
    """Mutable per-server state behind the ``/bridge`` and ``/lora`` routes."""

    update_count: int = 0
    last_update_time: float = 0.0
    last_checkpoint_dir: str | None = None
    active_lora: Any = None  # vllm.lora.request.LoRARequest
    active_lora_path: str | None = None
    lora_load_count: int = 0
    update_lock: asyncio.Lock = field(default_factory=asyncio.Lock)


class LoraLoadBody(BaseModel):
    model_config = ConfigDict(extra="ignore")
    adapter_path: str
    adapter_name: str | None = None


class UpdateWeightsBody(BaseModel):
    model_config = ConfigDict(extra="forbid")
    checkpoint_dir: str
    pause_mode: str = "wait"


class WeightGroupBody(BaseModel):
    """``POST /bridge/init_weight_group``: where the trainer hosts the weight group's rendezvous."""

    model_config = ConfigDict(extra="forbid")
    host: str
    port: int = Field(ge=1, le=65535)
    world_size: int = Field(ge=2)
    rank: int = Field(ge=1)
    backend: Literal["gloo", "nccl"] = "gloo"
    timeout: float = Field(600.0, gt=0)


class ReceiveWeightsBody(BaseModel):
    """``POST /bridge/receive_weights``: the tensors of the broadcast that follows, in order."""

    model_config = ConfigDict(extra="forbid")
    tensors: list[dict[str, Any]] = Field(min_length=1)
    pause_mode: str = "wait"


def checkpoint_to_load(checkpoint_dir: str) -> Path:
    """The checked checkpoint directory of an update request: ``ApiError(404)`` when it does not exist,
    ``ApiError(400)`` when it is not a loadable checkpoint."""
    try:
        return validate_checkpoint_dir(checkpoint_dir)
    except FileNotFoundError as exc:
        raise ApiError(404, str(exc)) from exc
    except CheckpointError as exc:
        raise ApiError(400, str(exc)) from exc


def _engine(request: Request) -> Any:
    engine = getattr(request.app.state, "engine_client", None)
    if engine is None:
        raise ApiError(503, "engine not initialized")
    return engine


def _bridge(request: Request) -> BridgeState:
    return request.app.state.atropos_bridge


def _api_keys(request: Request) -> list[str]:
    args = getattr(request.app.state, "args", None)
    keys = list(getattr(args, "api_key", None) or [])
    if not keys and os.environ.get("VLLM_API_KEY"):
        keys = [os.environ["VLLM_API_KEY"]]
    return [k for k in keys if k]


async def require_api_key(request: Request) -> None:
    """When the server has ``--api-key`` (or ``VLLM_API_KEY``), require that bearer token."""
    keys = _api_keys(request)
    if not keys:
        return
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or token not in keys:
        raise ApiError(401, "missing or invalid bearer token")


async def _json_body(request: Request) -> Any:
    try:
        return await request.json()
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"request body is not valid JSON: {exc}") from exc


_Body = TypeVar("_Body", bound=BaseModel)


async def _parsed_body(request: Request, model: type[_Body]) -> _Body:
    """The JSON body validated as ``model``; ``ApiError(400)`` naming the bad field (or the JSON error)."""
    try:
        return model.model_validate(await _json_body(request))
    except ValidationError as exc:
        raise ApiError(400, _validation_message(exc)) from exc


def _prompt_text(engine: Any, final_output: Any) -> str:
    if final_output.prompt:
        return final_output.prompt
    tokenizer = getattr(engine, "tokenizer", None)
    if tokenizer is None or not final_output.prompt_token_ids:
        return ""
    return tokenizer.decode(final_output.prompt_token_ids)


def _vocab_size(engine: Any) -> int | None:
    try:
        return int(engine.model_config.get_vocab_size())
    except Exception:  # noqa: BLE001 - only used for validation
        return None


def build_atropos_router() -> APIRouter:
    """The Atropos routes; they read ``app.state.engine_client`` and ``app.state.atropos_bridge``."""
    from vllm.entrypoints.serve.utils.api_utils import with_cancellation
    from vllm.exceptions import VLLMError
    from vllm.v1.engine.exceptions import EngineDeadError

    router = APIRouter()
    auth = [Depends(require_api_key)]

    @router.get("/health_generate")
    async def health_generate(request: Request) -> Response:
        from vllm import SamplingParams

        engine = _engine(request)
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

    @router.post("/generate", dependencies=auth)
    async def generate(request: Request) -> Response:
        engine = _engine(request)
        body = await _json_body(request)
        try:
            parsed = parse_generate_request(body, vocab_size=_vocab_size(engine))
        except BadRequest as exc:
            raise ApiError(400, str(exc)) from exc
        return await _run_generate(
            engine=engine, parsed=parsed, lora_request=_bridge(request).active_lora, raw_request=request
        )

    @with_cancellation
    async def _run_generate(
        *, engine: Any, parsed: GenerateRequest, lora_request: Any, raw_request: Request
    ) -> Response:
        # with_cancellation cancels this task when the client disconnects; the engine then aborts
        # the request, so an abandoned generation stops using the engine.
        request_id = f"generate-{uuid.uuid4().hex}"
        results = engine.generate(
            parsed.prompt, parsed.sampling_params, request_id, lora_request=lora_request
        )
        try:
            first = await anext(results)
        except EngineDeadError as exc:
            raise ApiError(503, f"the inference engine is dead: {exc}") from exc
        except (ValueError, TypeError, VLLMError) as exc:
            raise ApiError(400, str(exc)) from exc
        except StopAsyncIteration as exc:
            raise ApiError(500, "engine returned no output") from exc

        if parsed.stream:
            prompt_text = _prompt_text(engine, first)

            async def stream() -> AsyncIterator[bytes]:
                yield stream_chunk(first, prompt_text)
                async for out in results:
                    yield stream_chunk(out, prompt_text)

            return StreamingResponse(stream(), media_type="application/x-ndjson")

        final = first
        try:
            async for out in results:
                final = out
        except EngineDeadError as exc:
            raise ApiError(503, f"the inference engine is dead: {exc}") from exc
        reply = format_generate_response(final, parsed.sampling_params, _prompt_text(engine, final))
        return JSONResponse(reply)

    @router.get("/bridge/info", dependencies=auth)
    async def bridge_info(request: Request) -> dict[str, Any]:
        engine = _engine(request)
        state = _bridge(request)
        return {
            "enabled": True,
            "shared_weights": _shared(),
            "update_count": state.update_count,
            "last_update_time": state.last_update_time,
            "model_name": str(engine.model_config.model),
            "device": _device_name(),
        }

    @router.get("/bridge/state_dict_info", dependencies=auth)
    async def bridge_state_dict_info(request: Request) -> dict[str, Any]:
        engine = _engine(request)
        return {
            "model": str(engine.model_config.model),
            "dtype": str(engine.model_config.dtype),
            "shared_weights_enabled": _shared(),
        }

    @router.post("/bridge/pause", dependencies=auth)
    async def bridge_pause(request: Request, mode: str = "keep") -> dict[str, str]:
        if mode not in PAUSE_MODES:
            raise ApiError(400, f"mode must be one of {list(PAUSE_MODES)}")
        engine = _engine(request)
        if not hasattr(engine, "pause_generation"):
            return {"status": "not_supported"}
        await engine.pause_generation(mode=mode, clear_cache=mode != "keep")
        return {"status": "paused"}

    @router.post("/bridge/resume", dependencies=auth)
    async def bridge_resume(request: Request) -> dict[str, str]:
        engine = _engine(request)
        if not hasattr(engine, "resume_generation"):
            return {"status": "not_supported"}
        await engine.resume_generation()
        return {"status": "resumed"}

    @router.get("/bridge/is_paused", dependencies=auth)
    async def bridge_is_paused(request: Request) -> dict[str, bool]:
        engine = _engine(request)
        paused = await engine.is_paused() if hasattr(engine, "is_paused") else False
        return {"paused": bool(paused)}

    @router.post("/bridge/sleep", dependencies=auth)
    async def bridge_sleep(request: Request, level: int = 1) -> dict[str, str]:
        if level not in (0, 1, 2):
            raise ApiError(400, "level must be 0, 1 or 2")
        await _engine(request).sleep(level)
        return {"status": "sleeping"}

    @router.post("/bridge/wake_up", dependencies=auth)
    async def bridge_wake_up(request: Request) -> dict[str, str]:
        await _engine(request).wake_up()
        return {"status": "awake"}

    @router.get("/bridge/is_sleeping", dependencies=auth)
    async def bridge_is_sleeping(request: Request) -> dict[str, bool]:
        return {"sleeping": bool(await _engine(request).is_sleeping())}

    @router.post("/bridge/update_weights", dependencies=auth)
    async def bridge_update_weights(request: Request) -> dict[str, Any]:
        parsed = await _parsed_body(request, UpdateWeightsBody)
        if parsed.pause_mode not in PAUSE_MODES:
            raise ApiError(400, f"pause_mode must be one of {list(PAUSE_MODES)}")
        checkpoint = checkpoint_to_load(parsed.checkpoint_dir)
        engine = _engine(request)
        state = _bridge(request)
        extension = getattr(engine.vllm_config.parallel_config, "worker_extension_cls", "")
        if extension != WORKER_EXTENSION:
            raise ApiError(
                501,
                f"in-place weight updates need --worker-extension-cls {WORKER_EXTENSION} "
                f"(this server runs {extension or 'none'}); restart the server on the checkpoint instead",
            )
        try:
            check_compatible(checkpoint, _served_config(engine), _served_model_dir(engine))
        except CheckpointError as exc:
            raise ApiError(400, str(exc)) from exc
        async with state.update_lock:
            try:
                seconds = await reload_weights_in_place(engine, checkpoint, pause_mode=parsed.pause_mode)
            except CheckpointError as exc:
                raise ApiError(400, str(exc)) from exc
            state.update_count += 1
            state.last_update_time = time.time()
            state.last_checkpoint_dir = str(checkpoint)
        return {
            "status": "updated",
            "checkpoint_dir": str(checkpoint),
            "seconds": seconds,
            "update_count": state.update_count,
        }

    @router.get("/bridge/shared_weights", dependencies=auth)
    async def bridge_shared_weights(request: Request) -> dict[str, Any]:
        from example_trainer.inference.shared_weights import shared_weights_requested

        engine = _engine(request)
        if not shared_weights_requested(os.environ):
            raise ApiError(
                409, "this server does not share its weights: start it with ATROPOS_SHARED_WEIGHTS=1"
            )
        _require_extension(engine)
        manifests = await engine.collective_rpc("atropos_share_weights")
        if len(manifests) != 1:
            raise ApiError(
                501, f"shared weights need one worker (tensor/pipeline parallel 1), got {len(manifests)}"
            )
        return manifests[0]

    @router.post("/bridge/init_weight_group", dependencies=auth)
    async def bridge_init_weight_group(request: Request) -> dict[str, Any]:
        parsed = await _parsed_body(request, WeightGroupBody)
        engine = _engine(request)
        _require_extension(engine)
        await engine.collective_rpc("atropos_join_weight_group", kwargs=parsed.model_dump())
        return {"status": "joined", "rank": parsed.rank, "world_size": parsed.world_size}

    @router.post("/bridge/receive_weights", dependencies=auth)
    async def bridge_receive_weights(request: Request) -> dict[str, Any]:
        parsed = await _parsed_body(request, ReceiveWeightsBody)
        if parsed.pause_mode not in PAUSE_MODES:
            raise ApiError(400, f"pause_mode must be one of {list(PAUSE_MODES)}")
        engine = _engine(request)
        _require_extension(engine)
        state = _bridge(request)
        async with state.update_lock:
            start = time.perf_counter()
            await engine.pause_generation(mode=parsed.pause_mode, clear_cache=parsed.pause_mode != "keep")
            try:
                await engine.collective_rpc("atropos_receive_weights", kwargs={"tensors": parsed.tensors})
                await engine.reset_prefix_cache()
            finally:
                await engine.resume_generation()
            state.update_count += 1
            state.last_update_time = time.time()
        return {
            "status": "updated",
            "seconds": time.perf_counter() - start,
            "update_count": state.update_count,
        }

    @router.get("/bridge/debug", dependencies=auth)
    async def bridge_debug(request: Request) -> dict[str, Any]:
        from vllm import __version__ as vllm_version

        engine = getattr(request.app.state, "engine_client", None)
        info: dict[str, Any] = {
            "engine_type": type(engine).__name__ if engine is not None else None,
            "vllm_version": vllm_version,
            "patches_applied": False,
            "shared_weights_env": os.environ.get("VLLM_ENABLE_SHARED_WEIGHTS", "0"),
            "num_inference_nodes": os.environ.get("NUM_INFERENCE_NODES", "unset"),
            "logdir": os.environ.get("LOGDIR", "unset"),
        }
        if engine is not None:
            info["model_config"] = {
                "model": str(engine.model_config.model),
                "dtype": str(engine.model_config.dtype),
            }
        return info

    @router.get("/bridge/list_endpoints", dependencies=auth)
    async def list_endpoints(request: Request) -> dict[str, Any]:
        endpoints = [
            {"path": route.path, "methods": sorted(route.methods)}
            for route in request.app.routes
            if getattr(route, "methods", None) and getattr(route, "path", None)
        ]
        return {"endpoints": endpoints}

    @router.get("/lora/status", dependencies=auth)
    async def lora_status(request: Request) -> dict[str, Any]:
        state = _bridge(request)
        active = state.active_lora
        return {
            "lora_available": _lora_enabled(request),
            "active_adapter_path": state.active_lora_path,
            "active_adapter_name": active.lora_name if active is not None else None,
            "active_adapter_id": active.lora_int_id if active is not None else None,
            "load_count": state.lora_load_count,
            "available_adapters": list_adapter_dirs(os.environ.get("LOGDIR", ".")),
        }

    @router.post("/lora/load", dependencies=auth)
    async def lora_load(request: Request) -> dict[str, Any]:
        parsed = await _parsed_body(request, LoraLoadBody)
        try:
            adapter_config = read_adapter_config(parsed.adapter_path)
        except FileNotFoundError as exc:
            raise ApiError(404, f"Adapter not found: {parsed.adapter_path}") from exc
        except BadRequest as exc:
            raise ApiError(400, str(exc)) from exc
        if not _lora_enabled(request):
            raise ApiError(400, "LoRA is not enabled: start the server with --enable-lora")
        state = _bridge(request)
        name = parsed.adapter_name or f"adapter_{state.lora_load_count}"
        lora_request = await _register_adapter(request, name, str(Path(parsed.adapter_path).resolve()))
        state.active_lora = lora_request
        state.active_lora_path = parsed.adapter_path
        state.lora_load_count += 1
        return {
            "status": "ok",
            "adapter_path": parsed.adapter_path,
            "adapter_name": name,
            "adapter_id": lora_request.lora_int_id,
            "load_count": state.lora_load_count,
            "adapter_config": adapter_config,
        }

    @router.post("/lora/unload", dependencies=auth)
    async def lora_unload(request: Request) -> dict[str, Any]:
        state = _bridge(request)
        previous = state.active_lora
        previous_path = state.active_lora_path
        state.active_lora = None
        state.active_lora_path = None
        return {
            "status": "ok",
            "previous_adapter": previous_path,
            "previous_name": previous.lora_name if previous is not None else None,
        }

    return router


def _require_extension(engine: Any) -> None:
    extension = getattr(engine.vllm_config.parallel_config, "worker_extension_cls", "")
    if extension != WORKER_EXTENSION:
        raise ApiError(
            501,
            f"this route needs --worker-extension-cls {WORKER_EXTENSION} (this server runs {extension or 'none'})",
        )


def _served_config(engine: Any) -> dict[str, Any] | None:
    try:
        return engine.model_config.hf_config.to_dict()
    except AttributeError:
        return None


def _served_model_dir(engine: Any) -> Path | None:
    path = Path(str(engine.model_config.model))
    return path if path.is_dir() else None


def _shared() -> bool:
    from example_trainer.inference.shared_weights import shared_weights_requested

    return shared_weights_requested(os.environ)


def _device_name() -> str:
    try:
        import torch

        return "cuda" if torch.cuda.is_available() else "cpu"
    except ImportError:  # pragma: no cover - torch ships with vLLM
        return "cpu"


def _lora_enabled(request: Request) -> bool:
    engine = getattr(request.app.state, "engine_client", None)
    return engine is not None and getattr(engine.vllm_config, "lora_config", None) is not None


async def _register_adapter(request: Request, name: str, path: str) -> Any:
    """Load (or reload in place) adapter ``name`` from ``path`` through vLLM's model registry.

    Registering it there makes it addressable as ``model=<name>`` on the OpenAI routes and
    validates it in the engine now rather than at the first generation.
    """
    from vllm.entrypoints.serve.engine.protocol import ErrorResponse
    from vllm.entrypoints.serve.lora.protocol import LoadLoRAAdapterRequest

    models = request.app.state.openai_serving_models
    result = await models.load_lora_adapter(
        LoadLoRAAdapterRequest(lora_name=name, lora_path=path, load_inplace=True)
    )
    if isinstance(result, ErrorResponse):
        code = result.error.code if 400 <= result.error.code < 500 else 400
        raise ApiError(code, f"could not load adapter: {result.error.message}")
    # Prefix-cache entries computed with a previous adapter under the same id must not be reused.
    await _engine(request).reset_prefix_cache()
    return models.lora_requests[name]


class ActiveLoraMiddleware:
    """Send OpenAI completion requests that name the base model to the active LoRA adapter.

    After ``/lora/load`` an environment keeps using the base model's name and still samples
    from the adapter, just as ``/generate`` does. Requests naming another model (or an adapter)
    pass through untouched.
    """

    def __init__(self, app: Any, fastapi_app: FastAPI) -> None:
        self.app = app
        self.fastapi_app = fastapi_app

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        state: BridgeState | None = getattr(self.fastapi_app.state, "atropos_bridge", None)
        if (
            scope["type"] != "http"
            or scope.get("method") != "POST"
            or state is None
            or state.active_lora is None
            or scope["path"].removeprefix(scope.get("root_path", "")) not in _LORA_REDIRECT_PATHS
        ):
            await self.app(scope, receive, send)
            return
        chunks = []
        more = True
        while more:
            message = await receive()
            if message["type"] != "http.request":
                break
            chunks.append(message.get("body", b""))
            more = message.get("more_body", False)
        body = b"".join(chunks)
        body = self._rewrite(body, state)
        sent = False

        async def replay() -> dict[str, Any]:
            nonlocal sent
            if not sent:
                sent = True
                return {"type": "http.request", "body": body, "more_body": False}
            return await receive()

        if any(k == b"content-length" for k, _ in scope.get("headers", [])):
            headers = [(k, v) for k, v in scope["headers"] if k != b"content-length"]
            headers.append((b"content-length", str(len(body)).encode()))
            scope = {**scope, "headers": headers}
        await self.app(scope, replay, send)

    def _rewrite(self, body: bytes, state: BridgeState) -> bytes:
        try:
            payload = json.loads(body)
        except ValueError:
            return body  # let the route report the bad JSON
        if not isinstance(payload, dict):
            return body
        models = getattr(self.fastapi_app.state, "openai_serving_models", None)
        model = payload.get("model")
        if model is not None and (models is None or not models.is_base_model(model)):
            return body
        payload["model"] = state.active_lora.lora_name
        return json.dumps(payload).encode()


# ----------------------------------------------------------------------------------------------
# CLI and startup
# ----------------------------------------------------------------------------------------------


def normalize_argv(argv: Sequence[str]) -> list[str]:
    """Accept ``--log-level info`` (the original's spelling) for vLLM's upper-case choices.

    The level also becomes uvicorn's access-log level unless ``--uvicorn-log-level`` is given.
    """
    out: list[str] = []
    has_uvicorn_level = any(a == "--uvicorn-log-level" or a.startswith("--uvicorn-log-level=") for a in argv)
    level: str | None = None
    it = iter(argv)
    for arg in it:
        if arg == "--log-level":
            value = next(it, None)
            if value is None:
                out.append(arg)
                break
            level = value
            out += [arg, value.upper()]
        elif arg.startswith("--log-level="):
            level = arg.split("=", 1)[1]
            out.append(f"--log-level={level.upper()}")
        else:
            out.append(arg)
    if (
        level is not None
        and not has_uvicorn_level
        and level.lower() in {"critical", "debug", "error", "info", "warning"}
    ):
        out += ["--uvicorn-log-level", level.lower()]
    return out


def make_parser() -> Any:
    """vLLM's OpenAI server parser (every engine and frontend flag) with Atropos defaults."""
    from vllm.entrypoints.launchers.cli_args import make_arg_parser
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = FlexibleArgumentParser(
        description="vLLM OpenAI-compatible server with the Atropos /generate, /bridge and /lora routes."
    )
    parser = make_arg_parser(parser)
    parser.set_defaults(port=DEFAULT_PORT)
    return parser


def build_server_app(args: Any, engine_client: Any, supported_tasks: Any) -> FastAPI:
    """vLLM's OpenAI app with the Atropos routes and the active-adapter redirect mounted."""
    from vllm.entrypoints.launchers.app import build_app

    app = build_app(args, supported_tasks, engine_client.model_config)
    app.state.atropos_bridge = BridgeState()
    app.add_exception_handler(ApiError, _api_error_handler)
    router = build_atropos_router()
    app.include_router(router)
    # vLLM's builder has already assembled the middleware stack; add ours outermost and rebuild
    # it, so that the new exception handler and middleware take effect.
    app.user_middleware.insert(0, Middleware(ActiveLoraMiddleware, fastapi_app=app))
    app.middleware_stack = app.build_middleware_stack()
    return app


async def run_server(args: Any) -> None:
    """Start the engine, then serve HTTP until SIGINT/SIGTERM."""
    import vllm.envs as envs
    from vllm.entrypoints.launchers.api_server.app_state import init_app_state
    from vllm.entrypoints.launchers.api_server.entry import build_async_engine_client
    from vllm.entrypoints.launchers.launcher import serve_http, setup_server
    from vllm.entrypoints.launchers.utils.server_utils import get_uvicorn_log_config

    listen_address, sock = setup_server(args, reuse_port=False)
    # Clients holding keep-alive connections (e.g. environments) must not stall a SIGTERM: the manager
    # would otherwise have to kill the server after its own timeout.
    uvicorn_kwargs: dict[str, Any] = {"timeout_graceful_shutdown": 5}
    log_config = get_uvicorn_log_config(args)
    if log_config is not None:
        uvicorn_kwargs["log_config"] = log_config
    async with build_async_engine_client(args) as engine_client:
        supported_tasks = await engine_client.get_supported_tasks()
        app = build_server_app(args, engine_client, supported_tasks)
        await init_app_state(engine_client, app.state, args, supported_tasks)
        shutdown_task = await serve_http(
            app,
            sock=sock,
            enable_ssl_refresh=args.enable_ssl_refresh,
            host=args.host,
            port=args.port,
            log_level=args.uvicorn_log_level,
            access_log=not args.disable_uvicorn_access_log,
            timeout_keep_alive=envs.VLLM_HTTP_TIMEOUT_KEEP_ALIVE,
            ssl_keyfile=args.ssl_keyfile,
            ssl_certfile=args.ssl_certfile,
            ssl_ca_certs=args.ssl_ca_certs,
            ssl_cert_reqs=args.ssl_cert_reqs,
            ssl_ciphers=args.ssl_ciphers,
            h11_max_incomplete_event_size=args.h11_max_incomplete_event_size,
            h11_max_header_count=args.h11_max_header_count,
            **uvicorn_kwargs,
        )
        del listen_address
    try:
        await shutdown_task
    finally:
        sock.close()


def main(argv: Sequence[str] | None = None) -> None:
    """Parse the command line and run the server (blocking)."""
    import uvloop
    from vllm.entrypoints.launchers.cli_args import validate_parsed_serve_args
    from vllm.entrypoints.serve.utils.api_utils import cli_env_setup
    from vllm.logger import configure_logging_from_args

    cli_env_setup()
    parser = make_parser()
    args = parser.parse_args(normalize_argv(list(sys.argv[1:] if argv is None else argv)))
    if args.model_tag is not None:
        args.model = args.model_tag
    if not args.worker_extension_cls:
        args.worker_extension_cls = WORKER_EXTENSION
    configure_logging_from_args(args)
    validate_parsed_serve_args(args)
    uvloop.run(run_server(args))


if __name__ == "__main__":
    main()
