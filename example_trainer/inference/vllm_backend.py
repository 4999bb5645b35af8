"""The vLLM engine behind the shared inference routes (:class:`VllmBackend`) and the server's API-key check.

The backend reads the engine from ``app.state.engine_client`` (set by vLLM's ``init_app_state`` once the
engine runs; 503 before) and keeps the weight and adapter bookkeeping in a :class:`BridgeState`. Weight
routes need the server's worker extension (:data:`~example_trainer.inference.weight_refresh.WORKER_EXTENSION`,
501 without it). vLLM is imported only where it is used, so this module imports without vLLM.
"""

from __future__ import annotations

import asyncio
import os
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from fastapi import Request
from fastapi.responses import JSONResponse, Response, StreamingResponse

from example_trainer.inference.routes.bodies import WeightGroupBody
from example_trainer.inference.routes.errors import ApiError, BadRequest
from example_trainer.inference.routes.lora import read_adapter_config
from example_trainer.inference.vllm_protocol import (
    GenerateRequest,
    format_generate_response,
    parse_generate_request,
    prompt_text,
    stream_chunk,
    vocab_size,
)
from example_trainer.inference.weight_refresh import (
    WORKER_EXTENSION,
    check_compatible,
    reload_weights_in_place,
)


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

    def weights_updated(self, checkpoint: Path | None = None) -> None:
        """Count one more weight update (from ``checkpoint`` when it came from a directory)."""
        self.update_count += 1
        self.last_update_time = time.time()
        if checkpoint is not None:
            self.last_checkpoint_dir = str(checkpoint)


def require_extension(engine: Any, what: str = "this route needs", hint: str = "") -> None:
    """``ApiError(501)`` unless ``engine`` runs the trainer's worker extension."""
    extension = getattr(engine.vllm_config.parallel_config, "worker_extension_cls", "")
    if extension != WORKER_EXTENSION:
        raise ApiError(
            501,
            f"{what} --worker-extension-cls {WORKER_EXTENSION} (this server runs {extension or 'none'}){hint}",
        )


def served_config(engine: Any) -> dict[str, Any] | None:
    """The served model's Hugging Face config as a dict (None when the engine has none)."""
    try:
        return engine.model_config.hf_config.to_dict()
    except AttributeError:
        return None


def served_model_dir(engine: Any) -> Path | None:
    """The served model's local directory (None when it was loaded by hub name)."""
    path = Path(str(engine.model_config.model))
    return path if path.is_dir() else None


def shared_weights_on() -> bool:
    """Whether the server was started to share its weights (``ATROPOS_SHARED_WEIGHTS=1``)."""
    from example_trainer.inference.shared_weights import shared_weights_requested

    return shared_weights_requested(os.environ)


async def _run_generate(
    *, engine: Any, parsed: GenerateRequest, lora_request: Any, raw_request: Request
) -> Response:
    """One ``/generate`` on the engine; run under vLLM's ``with_cancellation``, which cancels it when the client
    disconnects (the engine then aborts the request, so an abandoned generation stops using the engine)."""
    from vllm.exceptions import VLLMError
    from vllm.v1.engine.exceptions import EngineDeadError

    request_id = f"generate-{uuid.uuid4().hex}"
    results = engine.generate(parsed.prompt, parsed.sampling_params, request_id, lora_request=lora_request)
    try:
        first = await anext(results)
    except EngineDeadError as exc:
        raise ApiError(503, f"the inference engine is dead: {exc}") from exc
    except (ValueError, TypeError, VLLMError) as exc:
        raise ApiError(400, str(exc)) from exc
    except StopAsyncIteration as exc:
        raise ApiError(500, "engine returned no output") from exc

    if parsed.stream:
        text = prompt_text(engine, first)

        async def stream() -> AsyncIterator[bytes]:
            yield stream_chunk(first, text)
            async for out in results:
                yield stream_chunk(out, text)

        return StreamingResponse(stream(), media_type="application/x-ndjson")

    final = first
    try:
        async for out in results:
            final = out
    except EngineDeadError as exc:
        raise ApiError(503, f"the inference engine is dead: {exc}") from exc
    return JSONResponse(format_generate_response(final, parsed.sampling_params, prompt_text(engine, final)))


class VllmBackend:
    """The :class:`~example_trainer.inference.routes.backend.InferenceBackend` of the vLLM server.

    ``app_state`` is the FastAPI app's ``state``: its ``engine_client`` and ``openai_serving_models`` are
    read at each request.
    """

    def __init__(self, app_state: Any) -> None:
        self._app_state = app_state
        self.state = BridgeState()

    @property
    def engine(self) -> Any:
        """The running engine; ``ApiError(503)`` before it is initialised."""
        engine = getattr(self._app_state, "engine_client", None)
        if engine is None:
            raise ApiError(503, "engine not initialized")
        return engine

    @property
    def update_count(self) -> int:
        return self.state.update_count

    def lora_enabled(self) -> bool:
        """Whether the engine was started with ``--enable-lora``."""
        engine = getattr(self._app_state, "engine_client", None)
        return engine is not None and getattr(engine.vllm_config, "lora_config", None) is not None

    async def generate(self, body: Any, request: Request) -> Response:
        from vllm.entrypoints.serve.utils.api_utils import with_cancellation

        engine = self.engine
        try:
            parsed = parse_generate_request(body, vocab_size=vocab_size(engine))
        except BadRequest as exc:
            raise ApiError(400, str(exc)) from exc
        return await with_cancellation(_run_generate)(
            engine=engine, parsed=parsed, lora_request=self.state.active_lora, raw_request=request
        )

    async def update_weights(self, checkpoint: Path, pause_mode: str) -> float:
        engine = self.engine
        require_extension(
            engine, "in-place weight updates need", "; restart the server on the checkpoint instead"
        )
        check_compatible(checkpoint, served_config(engine), served_model_dir(engine))
        async with self.state.update_lock:
            seconds = await reload_weights_in_place(engine, checkpoint, pause_mode=pause_mode)
            self.state.weights_updated(checkpoint)
        return seconds

    async def shared_manifest(self) -> dict[str, Any]:
        engine = self.engine
        if not shared_weights_on():
            raise ApiError(
                409, "this server does not share its weights: start it with ATROPOS_SHARED_WEIGHTS=1"
            )
        require_extension(engine)
        manifests = await engine.collective_rpc("atropos_share_weights")
        if len(manifests) != 1:
            raise ApiError(
                501, f"shared weights need one worker (tensor/pipeline parallel 1), got {len(manifests)}"
            )
        return manifests[0]

    async def join_weight_group(self, group: WeightGroupBody) -> None:
        engine = self.engine
        require_extension(engine)
        await engine.collective_rpc("atropos_join_weight_group", kwargs=group.model_dump())

    async def receive_weights(self, tensors: list[dict[str, Any]], pause_mode: str) -> float:
        engine = self.engine
        require_extension(engine)
        async with self.state.update_lock:
            start = time.perf_counter()
            await engine.pause_generation(mode=pause_mode, clear_cache=pause_mode != "keep")
            try:
                await engine.collective_rpc("atropos_receive_weights", kwargs={"tensors": tensors})
                await engine.reset_prefix_cache()
            finally:
                await engine.resume_generation()
            self.state.weights_updated()
        return time.perf_counter() - start

    async def load_adapter(self, adapter_path: str, adapter_name: str | None) -> dict[str, Any]:
        try:
            adapter_config = read_adapter_config(adapter_path)
        except FileNotFoundError as exc:
            raise ApiError(404, f"Adapter not found: {adapter_path}") from exc
        except BadRequest as exc:
            raise ApiError(400, str(exc)) from exc
        if not self.lora_enabled():
            raise ApiError(400, "LoRA is not enabled: start the server with --enable-lora")
        state = self.state
        name = adapter_name or f"adapter_{state.lora_load_count}"
        lora_request = await self._register_adapter(name, str(Path(adapter_path).resolve()))
        state.active_lora = lora_request
        state.active_lora_path = adapter_path
        state.lora_load_count += 1
        return {
            "adapter_name": name,
            "adapter_id": lora_request.lora_int_id,
            "load_count": state.lora_load_count,
            "adapter_config": adapter_config,
        }

    async def unload_adapter(self) -> dict[str, Any]:
        previous, previous_path = self.state.active_lora, self.state.active_lora_path
        self.state.active_lora = None
        self.state.active_lora_path = None
        return {
            "previous_adapter": previous_path,
            "previous_name": previous.lora_name if previous is not None else None,
        }

    async def _register_adapter(self, name: str, path: str) -> Any:
        """Load (or reload in place) adapter ``name`` from ``path`` through vLLM's model registry.

        Registering it there makes it addressable as ``model=<name>`` on the OpenAI routes and validates it
        in the engine now rather than at the first generation.
        """
        from vllm.entrypoints.serve.engine.protocol import ErrorResponse
        from vllm.entrypoints.serve.lora.protocol import LoadLoRAAdapterRequest

        models = self._app_state.openai_serving_models
        result = await models.load_lora_adapter(
            LoadLoRAAdapterRequest(lora_name=name, lora_path=path, load_inplace=True)
        )
        if isinstance(result, ErrorResponse):
            code = result.error.code if 400 <= result.error.code < 500 else 400
            raise ApiError(code, f"could not load adapter: {result.error.message}")
        # Prefix-cache entries computed with a previous adapter under the same id must not be reused.
        await self.engine.reset_prefix_cache()
        return models.lora_requests[name]


def _api_keys(request: Request) -> list[str]:
    args = getattr(request.app.state, "args", None)
    keys = list(getattr(args, "api_key", None) or [])
    if not keys and os.environ.get("VLLM_API_KEY"):
        keys = [os.environ["VLLM_API_KEY"]]
    return [k for k in keys if k]


async def require_api_key(request: Request) -> None:
    """When the server has ``--api-key`` (or ``VLLM_API_KEY``), require that bearer token (401 otherwise)."""
    keys = _api_keys(request)
    if not keys:
        return
    scheme, _, token = request.headers.get("authorization", "").partition(" ")
    if scheme.lower() != "bearer" or token not in keys:
        raise ApiError(401, "missing or invalid bearer token")
