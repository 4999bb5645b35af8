"""HTTP routes of the trajectory API (FastAPI), and the app that serves them.

``app`` is the module-level application that ``run-api`` (and ``uvicorn atroposlib.api:app``)
serves; :func:`create_app` builds one for a given :class:`~atroposlib.api.config.ApiConfig`. The
routes live on two module-level routers: :data:`router` (compat: atroposlib 0.4.0's endpoints,
paths, fields and status strings) and :data:`additions` (acknowledgement, inspection, health,
metrics). Behaviour lives in :mod:`atroposlib.api.state`; request bodies are decoded by
:mod:`atroposlib.api.decode`.

Status codes other than 200 and 422:

- 400 ``Invalid gzip payload`` (text/plain) for corrupt or truncated gzip bodies;
- 401 without the bearer key when one is configured;
- 404 for an unknown env id on ``/status-env`` and an unknown batch id on ``/batch/ack``;
- 409 for ``/status-env`` before registration or after a reset;
- 413 for bodies over ``max_body_bytes`` / inflating past ``max_inflated_bytes``;
- 415 for a non-JSON ``Content-Type`` on a JSON route;
- 422 (FastAPI's ``{"detail": [...]}``) for every malformed or unacceptable group;
- 503 with ``Retry-After`` when the queue is full or the store fails (retry the same payload later).
"""

from __future__ import annotations

import inspect
import logging
import time
from collections.abc import Callable
from contextlib import asynccontextmanager
from typing import Any

from fastapi import APIRouter, FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.middleware.gzip import GZipMiddleware
from fastapi.responses import PlainTextResponse
from fastapi.routing import APIRoute
from starlette.responses import Response
from starlette.routing import request_response

from atroposlib.api import inspection
from atroposlib.api.auth import ApiKeyMiddleware
from atroposlib.api.config import ApiConfig
from atroposlib.api.decode import decode_group, decode_group_list, decode_model
from atroposlib.api.errors import InvalidRequest, small_input
from atroposlib.api.ingest import admit, serve_batch
from atroposlib.api.limits import RequestBodyMiddleware
from atroposlib.api.logs import event
from atroposlib.api.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from atroposlib.api.metrics import ApiMetrics
from atroposlib.api.records import NotRegistered, QueueFull, UnknownBatch, UnknownEnv
from atroposlib.api.responses import json_response, raw_json_response
from atroposlib.api.schemas import BatchAck, EnvIdentifier, RegisterEnv, Registration, ScoredData
from atroposlib.api.state import TrajectoryState
from atroposlib.api.store import STORAGE_ERRORS, MemoryStore, SqliteStore, Store

logger = logging.getLogger("atroposlib.api")

#: Routes whose request body is JSON (a non-JSON Content-Type gets 415).
JSON_BODY_PATHS = (
    "/register",
    "/register-env",
    "/disconnect-env",
    "/scored_data",
    "/scored_data_list",
    "/status-env",
    "/batch/ack",
)


class RequestRoute(APIRoute):
    """A FastAPI route whose endpoint, if it takes only the :class:`Request`, is called with it directly.

    Such an endpoint reads and checks its own body and returns a :class:`Response`, so FastAPI's
    parameter resolution has nothing to do; skipping it takes a noticeable share of the CPU time
    of a small request. The route is still documented in the OpenAPI schema (``openapi_extra``),
    and the app's middleware and exception handlers apply as to any route. Endpoints with other
    parameters are served by FastAPI as usual.
    """

    def __init__(self, path: str, endpoint: Callable[..., Any], **kwargs: Any):
        super().__init__(path, endpoint, **kwargs)
        if _takes_only_request(endpoint):
            self.app = request_response(endpoint)


def _takes_only_request(endpoint: Callable[..., Any]) -> bool:
    parameters = list(inspect.signature(endpoint).parameters.values())
    return len(parameters) == 1 and parameters[0].annotation in (Request, "Request")


router = APIRouter(route_class=RequestRoute)
additions = APIRouter(route_class=RequestRoute)


def _body(schema: dict[str, Any]) -> dict[str, Any]:
    """OpenAPI request body for routes that read and validate their JSON body themselves."""
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


def _state(request: Request) -> TrajectoryState:
    return request.app.state.trajectory


def _metrics(request: Request) -> ApiMetrics:
    return request.app.state.metrics


# ---------------------------------------------------------------------------------- compatible routes


@router.get("/")
async def root() -> Response:
    return json_response({"message": "AtroposLib API"})


@router.post("/register", openapi_extra=_body(Registration.model_json_schema()))
async def register(request: Request) -> Response:
    """Register the trainer (the first call initialises the run); answers a new 128-bit ``uuid``."""
    registration = decode_model(Registration, await request.body())
    state = _state(request)
    was_registered = state.meta.registered
    requester = state.register(registration)
    if not was_registered:
        meta = state.meta
        event(
            logger,
            logging.INFO,
            "trainer registered",
            batch_size=meta.batch_size,
            max_token_len=meta.max_token_len,
            starting_step=meta.step,
            wandb_group=meta.wandb_group,
            wandb_project=meta.wandb_project,
        )
    return json_response({"uuid": requester})


@router.post("/register-env", openapi_extra=_body(RegisterEnv.model_json_schema()))
async def register_env(request: Request) -> Response:
    """Register an environment once the trainer has started (``wait for trainer to start`` before)."""
    env = decode_model(RegisterEnv, await request.body())
    result = _state(request).register_env(env)
    if result["status"] == "success":
        event(
            logger,
            logging.INFO,
            "env registered",
            env_id=result["env_id"],
            name=result["wandb_name"],
            group_size=env.group_size,
            weight=env.weight,
            min_batch_allocation=env.min_batch_allocation,
        )
    return json_response(result)


@router.post("/disconnect-env", openapi_extra=_body(EnvIdentifier.model_json_schema()))
async def disconnect_env(request: Request) -> Response:
    env = decode_model(EnvIdentifier, await request.body())
    result = _state(request).disconnect_env(env.env_id)
    event(logger, logging.INFO, "env disconnect", env_id=env.env_id, result=result["status"])
    return json_response(result)


@router.get("/wandb_info")
async def wandb_info(request: Request) -> Response:
    return json_response(_state(request).wandb_info())


@router.get("/info")
async def info(request: Request) -> Response:
    """The readiness probe: ``batch_size`` and ``max_token_len`` (``-1`` before registration), and
    ``max_staleness`` when the trainer registered one."""
    return json_response(_state(request).info())


@router.get("/batch")
async def get_batch(request: Request) -> Response:
    """The next batch, ``{"batch": null}``, or the not-registered error body (HTTP 200)."""
    return raw_json_response(serve_batch(_state(request), _metrics(request)))


@router.get("/latest_example")
async def latest_example(request: Request) -> Response:
    return raw_json_response(_state(request).latest_example())


@router.post("/scored_data", openapi_extra=_body(ScoredData.model_json_schema()))
async def scored_data(request: Request) -> Response:
    """Queue one scored group (or buffer it until it completes its env's group size)."""
    return await _ingest(request, "one")


@router.post(
    "/scored_data_list",
    openapi_extra=_body({"type": "array", "items": ScoredData.model_json_schema()}),
)
async def scored_data_list(request: Request) -> Response:
    """Queue a list of groups, all or nothing (one bad group rejects the list, naming its index)."""
    return await _ingest(request, "many")


async def _ingest(request: Request, kind: str) -> Response:
    started = time.perf_counter()
    body = await request.body()
    groups = [decode_group(body)] if kind == "one" else decode_group_list(body)
    answer = admit(_state(request), _metrics(request), groups, started, in_list=kind == "many")
    return json_response(answer)


@router.get("/status")
async def status(request: Request) -> Response:
    return json_response(_state(request).status())


@router.get("/status-env", openapi_extra=_body(EnvIdentifier.model_json_schema()))
async def status_env(request: Request) -> Response:
    """Per-env backlog and weight; the env id comes in a JSON body even though this is a GET."""
    env = decode_model(EnvIdentifier, await request.body())
    if env.env_id < 0:
        raise InvalidRequest(
            [
                {
                    "type": "greater_than_equal",
                    "loc": ["body", "env_id"],
                    "msg": "env_id must be >= 0",
                    "input": env.env_id,
                    "ctx": {"ge": 0},
                }
            ]
        )
    return json_response(_state(request).status_env(env.env_id))


@router.get("/reset_data")
async def reset_data(request: Request) -> Response:
    """Drop all queued data and the registration (compat: a GET, as in atroposlib 0.4.0)."""
    state = _state(request)
    dropped = len(state.groups)
    state.reset()
    event(logger, logging.WARNING, "state reset", groups_dropped=dropped)
    return PlainTextResponse("Reset successful")


# ---------------------------------------------------------------------------------- additions


@additions.post("/batch/ack", openapi_extra=_body(BatchAck.model_json_schema()))
async def batch_ack(request: Request) -> Response:
    """Acknowledge a served batch: it will never be replayed."""
    ack = decode_model(BatchAck, await request.body())
    _state(request).acknowledge(ack.batch_id)
    return json_response({"status": "acknowledged"})


@additions.post("/batch/replay")
async def batch_replay(request: Request) -> Response:
    """Serve every unacknowledged batch again (oldest first) before anything new."""
    count = _state(request).replay()
    event(logger, logging.WARNING, "batches requeued", batches=count)
    return json_response({"status": "requeued", "batches": count})


@additions.get("/inspect/recent")
async def inspect_recent(
    request: Request,
    limit: int = Query(32, ge=1, description="Most groups to return (newest first)."),
    env_id: int | None = Query(None, description="Only groups of this env."),
) -> Response:
    """Recently received groups, read-only (never consumes anything)."""
    return raw_json_response(inspection.recent_groups(_state(request), limit, env_id))


@additions.get("/inspect/envs")
async def inspect_envs(request: Request) -> Response:
    return json_response({"envs": inspection.env_records(_state(request))})


@additions.get("/health")
async def health(request: Request) -> Response:
    return json_response(_state(request).health())


@additions.get("/metrics")
async def prometheus_metrics(request: Request) -> Response:
    return Response(_metrics(request).render(), media_type=METRICS_CONTENT_TYPE)


# ---------------------------------------------------------------------------------- the app


def open_store(config: ApiConfig) -> Store:
    """The store ``config`` asks for (raises :class:`~atroposlib.api.store.StoreError`)."""
    if config.store == "memory":
        return MemoryStore()
    return SqliteStore(config.data_dir, synchronous=config.sqlite_synchronous)


def _add_exception_handlers(app: FastAPI, metrics: ApiMetrics, retry_after: int) -> None:
    def reject(reason: str) -> None:
        metrics.rejected.labels(reason=reason).inc()

    def retry_later(detail: str) -> Response:
        return json_response({"detail": detail}, status_code=503, headers={"Retry-After": str(retry_after)})

    @app.exception_handler(InvalidRequest)
    async def _invalid(request: Request, exc: InvalidRequest) -> Response:
        reject(exc.errors[0]["type"] if exc.errors else "invalid")
        return json_response({"detail": exc.errors}, status_code=422)

    @app.exception_handler(QueueFull)
    async def _full(request: Request, exc: QueueFull) -> Response:
        reject("queue_full")
        return retry_later(f"queue full: {exc}")

    for storage_error in STORAGE_ERRORS:

        @app.exception_handler(storage_error)
        async def _storage(request: Request, exc: Exception) -> Response:
            reject("storage_error")
            logger.error("storage error: %s", exc)
            return retry_later(f"storage error, nothing was changed: {exc}")

    @app.exception_handler(RequestValidationError)
    async def _request_invalid(request: Request, exc: RequestValidationError) -> Response:
        # FastAPI's own handler fails on undecodable inputs; report them safely instead.
        reject("invalid_request")
        errors = [
            {**err, "input": small_input(err.get("input"))} if "input" in err else err for err in exc.errors()
        ]
        return json_response({"detail": errors}, status_code=422)

    for exc_type, status_code, reason in (
        (NotRegistered, 409, "not_registered"),
        (UnknownEnv, 404, "unknown_env_id"),
        (UnknownBatch, 404, "unknown_batch_id"),
    ):

        @app.exception_handler(exc_type)
        async def _refused(
            request: Request, exc: Exception, status_code=status_code, reason=reason
        ) -> Response:
            reject(reason)
            return json_response({"detail": str(exc)}, status_code=status_code)


def create_app(config: ApiConfig | None = None, store: Store | None = None) -> FastAPI:
    """Build the API app. ``store`` (already opened) is used if given, else opened at start-up.

    The app owns the store either way and closes it at shutdown.
    """
    config = config or ApiConfig.from_env()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        opened = store if store is not None else open_store(config)
        state = TrajectoryState(
            opened,
            max_queue_sequences=config.max_queue_sequences,
            max_queue_bytes=config.max_queue_bytes,
            max_unacked_batches=config.max_unacked_batches,
            inspect_history=config.inspect_history,
            env_heartbeat_seconds=config.env_heartbeat_seconds,
        )
        app.state.trajectory = state
        event(
            logger,
            logging.INFO,
            "trajectory API ready",
            store=opened.kind,
            data_dir=str(config.data_dir) if opened.kind == "sqlite" else None,
            registered=state.meta.registered,
            step=state.meta.step,
            queue_groups=len(state.queue),
            pending_batches=len(state.stack),
            unacked_batches=len(state.unacked),
            auth=bool(config.api_key),
        )
        try:
            yield
        finally:
            opened.close()
            event(logger, logging.INFO, "trajectory API stopped")

    app = FastAPI(title="AtroposLib API", lifespan=lifespan)
    app.state.config = config
    app.state.trajectory = None
    metrics = ApiMetrics(lambda: app.state.trajectory)
    app.state.metrics = metrics
    _add_exception_handlers(app, metrics, config.retry_after_seconds)

    # Added innermost first: CORS, response gzip, request limits/inflation, then auth.
    app.add_middleware(
        CORSMiddleware, allow_origins=["*"], allow_credentials=True, allow_methods=["*"], allow_headers=["*"]
    )
    app.add_middleware(GZipMiddleware, minimum_size=1000, compresslevel=1)
    app.add_middleware(
        RequestBodyMiddleware,
        max_body_bytes=config.max_body_bytes,
        max_inflated_bytes=config.max_inflated_bytes,
        json_paths=JSON_BODY_PATHS,
        on_reject=lambda reason: metrics.rejected.labels(reason=reason).inc(),
    )
    if config.api_key:
        app.add_middleware(ApiKeyMiddleware, api_key=config.api_key)
    app.include_router(router)
    app.include_router(additions)
    return app


app = create_app()
