"""A light inference server for small models: Hugging Face ``generate`` behind the trainer's ``/generate``.

vLLM is the inference server for real models. For a model of a few million parameters on a laptop CPU its
machinery costs more than the model: several processes, a scheduler that busy-waits on shared-memory
queues, a minute of start-up. This server is one process that loads the model with ``transformers``,
batches the requests that arrive together into one ``generate`` call and answers the routes the
trainer and the environments use::

    python -m example_trainer.inference.hf_generation --model DIR --port 9001 [--torch-threads 1]

* ``GET /health``: 200 once the model is loaded.
* ``POST /generate``: the token-level contract of :mod:`example_trainer.inference.vllm_api_server` (what
  ``server_type: vllm`` environments call): ``{"prompt": {"prompt_token_ids": [...]}`` (or text, or a
  bare id list), ``n``, ``max_tokens``, ``temperature``, ``top_p``, ``top_k``, ``logprobs``,
  ``stop_token_ids``} answered by ``{"text", "prompt", "finish_reasons", "logprobs", "prompt_token_ids",
  "token_ids"}``. Logprobs are the model's raw log-probabilities of the sampled tokens (before
  temperature and top-p), as vLLM reports them by default; a reply that ends with the end-of-sequence
  token includes it in ``token_ids`` with finish reason ``stop``.
* ``POST /bridge/update_weights`` ``{"checkpoint_dir": DIR}``: load a checkpoint of the same
  architecture into a second copy of the weights, which serves every batch started after the reply (a
  batch already running finishes on the old weights; the update does not wait for it).
* ``GET /v1/models``: the served model name.
* ``GET /bridge/shared_weights`` (with ``--shared-weights``): handles to the served parameters, which the
  trainer maps and trains in place (:mod:`example_trainer.inference.shared_weights`; CPU weights move to shared
  memory, CUDA weights are shared through IPC handles); updates then need no route at all.
* ``POST /bridge/init_weight_group`` and ``POST /bridge/receive_weights``: weights broadcast by the trainer
  (:mod:`example_trainer.inference.weight_broadcast`), loaded like a checkpoint but without the disk.
* ``POST /v1/load_lora_adapter`` ``{"lora_name", "lora_path"}`` (checks the adapter) and ``POST /lora/load``
  ``{"adapter_path", "adapter_name"}`` (serves it), ``POST /lora/unload``: a PEFT LoRA adapter, merged into a
  copy of the base weights (:mod:`example_trainer.grpo.lora_merge`), so that ``lora_only`` and ``lora_restart``
  run on this backend too; every request is then answered by the adapted model.

Requests with the same sampling settings that are waiting when a batch starts are generated together
(up to ``--max-batch-sequences`` sequences), so an environment with many groups in flight costs one
forward pass per new token, not one per group. Other sampling parameters (``stop`` strings, ``seed``,
penalties, ``prompt_logprobs``) are refused with a 400 naming them. Bad requests get a 4xx in vLLM's
error format ``{"error": {"message", "type", "code"}}``.

The engine is :class:`~example_trainer.inference.hf_engine.HfGenerator`; ``/generate`` and the weight and
adapter routes are the ones the vLLM server mounts (:mod:`example_trainer.inference.routes`) over
:class:`HfBackend`.
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response

from example_trainer.inference.hf_engine import GenerateParams, HfGenerator, parse_generate_body
from example_trainer.inference.routes.backend import install_backend
from example_trainer.inference.routes.bodies import LoadAdapterBody, WeightGroupBody
from example_trainer.inference.routes.errors import ApiError, api_error_handler, error_body, parsed_body
from example_trainer.inference.routes.generate import generate_router
from example_trainer.inference.routes.lora import lora_router
from example_trainer.inference.routes.weights import weights_router

__all__ = ["DEFAULT_PORT", "GenerateParams", "HfBackend", "HfGenerator", "build_app", "main", "make_parser"]

logger = logging.getLogger("atropos-hf-generation")

DEFAULT_PORT = 9001


class HfBackend:
    """The :class:`~example_trainer.inference.routes.backend.InferenceBackend` of the hf server: ``generator``'s
    blocking calls run in worker threads; prompts longer than ``max_model_len`` with their ``max_tokens`` are
    refused."""

    def __init__(self, generator: HfGenerator, max_model_len: int) -> None:
        self.generator = generator
        self.max_model_len = max_model_len

    @property
    def update_count(self) -> int:
        return self.generator.update_count

    async def generate(self, body: Any, request: Request) -> Response:
        gen = self.generator
        job = parse_generate_body(body, gen.tokenizer, gen.vocab_size, self.max_model_len)
        return JSONResponse(await asyncio.wrap_future(gen.submit(job)))

    async def update_weights(self, checkpoint: Path, pause_mode: str) -> float:
        # A batch already running finishes on the weights it started with: no pause needed.
        return await asyncio.to_thread(self.generator.update_weights, checkpoint)

    async def shared_manifest(self) -> dict[str, Any]:
        if not self.generator.shared_weights:
            raise ApiError(409, "this server was started without --shared-weights")
        return await asyncio.to_thread(self.generator.shared_manifest)

    async def join_weight_group(self, group: WeightGroupBody) -> None:
        await asyncio.to_thread(
            self.generator.receiver.join, group.host, group.port, group.world_size, group.rank, group.backend,
            group.timeout,
        )  # fmt: skip

    async def receive_weights(self, tensors: list[dict[str, Any]], pause_mode: str) -> float:
        return await asyncio.to_thread(self.generator.receive_weights, tensors)

    async def load_adapter(self, adapter_path: str, adapter_name: str | None) -> dict[str, Any]:
        from example_trainer.grpo.lora_merge import AdapterError

        if self.generator.shared_weights:
            raise ApiError(
                409, "a server with --shared-weights serves the trainer's own weights, not adapters"
            )
        try:
            seconds = await asyncio.to_thread(self.generator.load_adapter, Path(adapter_path))
        except AdapterError as exc:
            raise ApiError(400, str(exc)) from None
        return {"adapter_name": adapter_name, "seconds": seconds, "load_count": self.generator.update_count}

    async def unload_adapter(self) -> dict[str, Any]:
        previous = self.generator.adapter
        if previous is not None:
            await asyncio.to_thread(self.generator.load_adapter, None)
        return {"previous_adapter": previous}


def check_adapter(path: str) -> None:
    """``ApiError`` 404/400 unless ``path`` is a LoRA adapter directory this backend can merge."""
    from example_trainer.grpo.lora_merge import AdapterError, adapter_deltas

    if not Path(path).is_dir():
        raise ApiError(404, f"Adapter not found: {path}")
    try:
        adapter_deltas(path)
    except AdapterError as exc:
        raise ApiError(400, str(exc)) from None


def bearer_guard(api_key: str | None, open_paths: Sequence[str] = ("/health",)) -> Any:
    """HTTP middleware answering 401 unless the request carries ``Authorization: Bearer <api_key>``
    (every request passes without a key, and requests for ``open_paths`` always do)."""

    async def guard(request: Request, call_next: Any) -> Response:
        if api_key and request.url.path not in open_paths:
            if request.headers.get("authorization") != f"Bearer {api_key}":
                return JSONResponse(error_body(401, "unauthorized"), status_code=401)
        return await call_next(request)

    return guard


def build_app(
    generator: HfGenerator, served_model_name: str, max_model_len: int, api_key: str | None
) -> FastAPI:
    """The FastAPI app serving ``generator``: ``/health``, ``/v1/models``, ``/v1/load_lora_adapter`` and the
    shared ``/generate``, weight and adapter routes."""
    app = FastAPI(title="atroposlib hf generation server")
    app.add_exception_handler(ApiError, api_error_handler)
    app.middleware("http")(bearer_guard(api_key))
    install_backend(app, HfBackend(generator, max_model_len))

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {
            "object": "list",
            "data": [{"id": served_model_name, "object": "model", "owned_by": "atroposlib", "max_model_len": max_model_len}],
        }  # fmt: skip

    app.include_router(generate_router())
    app.include_router(weights_router())

    @app.post("/v1/load_lora_adapter")
    async def load_lora_adapter(request: Request) -> Response:
        parsed = await parsed_body(request, LoadAdapterBody)
        await asyncio.to_thread(check_adapter, parsed.lora_path)
        return Response(f"Success: LoRA adapter '{parsed.lora_name}' added successfully.", status_code=200)

    app.include_router(lora_router())
    return app


def make_parser() -> argparse.ArgumentParser:
    """The server's command line."""
    parser = argparse.ArgumentParser(
        prog="python -m example_trainer.inference.hf_generation",
        description="Light inference server for small models (Hugging Face generate, /generate contract).",
    )
    parser.add_argument("--model", required=True, help="local model directory")
    parser.add_argument("--served-model-name", default=None, help="name in /v1/models (default: --model)")
    parser.add_argument("--tokenizer", default=None, help="tokenizer directory (default: --model)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument("--max-batch-sequences", type=int, default=1024, help="rows per generate call")
    parser.add_argument("--torch-threads", type=int, default=1, help="torch intra-op threads")
    parser.add_argument(
        "--dtype", default="float32", choices=["float32", "bfloat16", "float16", "auto"],
        help="weights dtype (auto: float32)",
    )  # fmt: skip
    parser.add_argument("--device", default="cpu", help="torch device of the model (cpu, cuda, cuda:N)")
    parser.add_argument(
        "--shared-weights", action="store_true",
        help="let the trainer train the served parameters in place (GET /bridge/shared_weights)",
    )  # fmt: skip
    parser.add_argument("--api-key", default=None, help="bearer token required on every route but /health")
    parser.add_argument("--enforce-eager", action="store_true", help="accepted for vLLM compatibility")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Parse the command line, load the model and serve until interrupted; returns the exit status."""
    args = make_parser().parse_args(argv)
    if not Path(args.model).is_dir():
        print(f"hf_generation: error: --model {args.model} is not a local model directory", flush=True)
        return 2
    if args.torch_threads < 1 or args.max_batch_sequences < 1 or args.max_model_len < 1:
        print("hf_generation: error: --torch-threads, --max-batch-sequences and --max-model-len must be >= 1")
        return 2
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    import torch
    import uvicorn

    torch.set_num_threads(args.torch_threads)
    generator = HfGenerator(
        args.model, args.tokenizer, args.max_batch_sequences, device=args.device,
        dtype="float32" if args.dtype == "auto" else args.dtype, shared_weights=args.shared_weights,
    )  # fmt: skip
    app = build_app(generator, args.served_model_name or args.model, args.max_model_len, args.api_key)
    logger.info("serving %s on http://%s:%d", args.model, args.host, args.port)
    try:
        uvicorn.run(app, host=args.host, port=args.port, log_level="warning", access_log=False)
    finally:
        generator.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
