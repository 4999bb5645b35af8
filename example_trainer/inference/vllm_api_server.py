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

Every flag of vLLM's OpenAI server is accepted; ``--port`` defaults to 9001 and ``--log-level`` also
accepts lower case (``info``). Bad requests get a 4xx answer in vLLM's error format
``{"error": {"message", "type", "code"}}``, never a 500.

The routes live in :mod:`example_trainer.inference.routes` (shared with the hf server) over
:class:`~example_trainer.inference.vllm_backend.VllmBackend`; this module assembles the app and runs it.
compat: the names this module exported before the split (``parse_generate_request``, ``ApiError``,
``BridgeState`` ...) are re-exported here, since ``example_trainer.vllm_api_server`` is a public path.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter, Depends, FastAPI
from starlette.middleware import Middleware

from example_trainer.inference.lora_redirect import ActiveLoraMiddleware
from example_trainer.inference.routes.backend import install_backend
from example_trainer.inference.routes.bodies import (
    LoraLoadBody,
    ReceiveWeightsBody,
    UpdateWeightsBody,
    WeightGroupBody,
)
from example_trainer.inference.routes.engine import engine_control_router, engine_info_router
from example_trainer.inference.routes.errors import ApiError, BadRequest, api_error_handler
from example_trainer.inference.routes.generate import generate_router
from example_trainer.inference.routes.lora import list_adapter_dirs, lora_router, read_adapter_config
from example_trainer.inference.routes.weights import checkpoint_to_load, weights_router
from example_trainer.inference.vllm_backend import BridgeState, VllmBackend, require_api_key
from example_trainer.inference.vllm_protocol import (
    GenerateRequest,
    format_generate_response,
    parse_generate_request,
    stream_chunk,
)
from example_trainer.inference.weight_refresh import WORKER_EXTENSION

__all__ = [
    "DEFAULT_PORT",
    "ActiveLoraMiddleware",
    "ApiError",
    "BadRequest",
    "BridgeState",
    "GenerateRequest",
    "LoraLoadBody",
    "ReceiveWeightsBody",
    "UpdateWeightsBody",
    "VllmBackend",
    "WeightGroupBody",
    "build_atropos_router",
    "build_server_app",
    "checkpoint_to_load",
    "format_generate_response",
    "list_adapter_dirs",
    "main",
    "make_parser",
    "normalize_argv",
    "parse_generate_request",
    "read_adapter_config",
    "require_api_key",
    "run_server",
    "stream_chunk",
]

DEFAULT_PORT = 9001


def build_atropos_router() -> APIRouter:
    """Every route the server adds to vLLM's OpenAI app; they call the backend in ``app.state``
    (:func:`~example_trainer.inference.routes.backend.install_backend`), behind the API-key check."""
    auth = [Depends(require_api_key)]
    router = APIRouter()
    router.include_router(engine_info_router(auth))
    router.include_router(generate_router(auth))
    router.include_router(engine_control_router(auth))
    router.include_router(weights_router(auth))
    router.include_router(lora_router(auth))
    return router


# ----------------------------------------------------------------------------------------------
# CLI and startup
# ----------------------------------------------------------------------------------------------


def normalize_argv(argv: Sequence[str]) -> list[str]:
    """Accept ``--log-level info`` (lower case; compat: the spelling Atropos scripts use) for vLLM's
    upper-case choices.

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
    backend = VllmBackend(app.state)
    install_backend(app, backend)
    app.state.atropos_bridge = backend.state  # read by ActiveLoraMiddleware
    app.add_exception_handler(ApiError, api_error_handler)
    app.include_router(build_atropos_router())
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
