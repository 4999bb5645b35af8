"""HTTP routes of the trajectory API (FastAPI). Behaviour lives in :mod:`atroposlib.api.state`.

``app`` is the module-level application that ``run-api`` (and ``uvicorn atroposlib.api:app``)
serves; :func:`create_app` builds one for a given :class:`~atroposlib.api.config.ApiConfig`.

Status codes beyond the original's (which answered 500 in these cases):

- 400 ``Invalid gzip payload`` (text/plain) for corrupt or truncated gzip bodies;
- 401 without the bearer key when one is configured;
- 404 for an unknown env id on ``/status-env`` and an unknown batch id on ``/batch/ack``;
- 409 for ``/status-env`` before registration or after a reset;
- 413 for bodies over ``max_body_bytes`` / inflating past ``max_inflated_bytes``;
- 415 for a non-JSON ``Content-Type`` on a JSON route;
- 422 (FastAPI's ``{"detail": [...]}``) for every malformed or unacceptable group;
- 503 with ``Retry-After`` when the queue is full (retry the same payload later).
"""

from __future__ import annotations

import logging
from contextlib import asynccontextmanager
from typing import Any

from fastapi import FastAPI, Query, Request
from fastapi.exceptions import RequestValidationError
from fastapi.middleware.cors import CORSMiddleware
from fastapi.middleware.gzip import GZipMiddleware
from fastapi.responses import JSONResponse, PlainTextResponse
from starlette.responses import Response

from atroposlib.api.auth import ApiKeyMiddleware
from atroposlib.api.config import ApiConfig
from atroposlib.api.decode_pool import DecodePool, default_workers
from atroposlib.api.fastpath import (
    FastPathMiddleware,
    Outcome,
    error_outcome,
    ingest_many,
    ingest_one,
    serve_batch,
)
from atroposlib.api.limits import BodyLimits, RequestBodyMiddleware
from atroposlib.api.logs import event
from atroposlib.api.memory_store import MemoryStore
from atroposlib.api.metrics import CONTENT_TYPE as METRICS_CONTENT_TYPE
from atroposlib.api.metrics import ApiMetrics
from atroposlib.api.responses import json_response, raw_json_response
from atroposlib.api.schemas import BatchAck, EnvIdentifier, RegisterEnv, Registration, ScoredData
from atroposlib.api.state import (
    NotRegistered,
    QueueFull,
    TrajectoryState,
    UnknownBatch,
    UnknownEnv,
)
from atroposlib.api.store import STORAGE_ERRORS, SqliteStore, Store
from atroposlib.api.validation import (
    InvalidRequest,
    decode_model,
    small_input,
)

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


def _body(schema: dict[str, Any]) -> dict[str, Any]:
    """OpenAPI request body for routes that read and validate their JSON body themselves."""
    return {"requestBody": {"required": True, "content": {"application/json": {"schema": schema}}}}


_SCORED_DATA_SCHEMA = _body(ScoredData.model_json_schema())
_SCORED_DATA_LIST_SCHEMA = _body({"type": "array", "items": ScoredData.model_json_schema()})


def open_store(config: ApiConfig) -> Store:
    """The store ``config`` asks for (raises :class:`~atroposlib.api.store.StoreError`)."""
    if config.store == "memory":
        return MemoryStore()
    return SqliteStore(config.data_dir, synchronous=config.sqlite_synchronous)


def create_app(config: ApiConfig | None = None, store: Store | None = None) -> FastAPI:
    """Build the API app. ``store`` (already opened) is used if given, else opened at start-up.

    The app owns the store either way and closes it at shutdown.
    """
    config = config or ApiConfig.from_env()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        opened = store if store is not None else open_store(config)
        app.state.trajectory = TrajectoryState(
            opened,
            max_queue_sequences=config.max_queue_sequences,
            max_queue_bytes=config.max_queue_bytes,
            max_unacked_batches=config.max_unacked_batches,
            inspect_history=config.inspect_history,
        )
        state = app.state.trajectory
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
            await pool.close()
            opened.close()
            event(logger, logging.INFO, "trajectory API stopped")

    app = FastAPI(title="AtroposLib API", lifespan=lifespan)
    app.state.config = config
    app.state.trajectory = None
    metrics = ApiMetrics(lambda: app.state.trajectory)
    app.state.metrics = metrics
    workers = default_workers() if config.decode_workers is None else config.decode_workers
    pool = DecodePool(workers, config.max_inflated_bytes)
    metrics.watch_decode_pool(pool)

    def reject(reason: str) -> None:
        metrics.rejected.labels(reason=reason).inc()

    # Added innermost first: CORS, response gzip, request limits/inflation, auth, then the fast path.
    app.add_middleware(
        CORSMiddleware,
        allow_origins=["*"],
        allow_credentials=True,
        allow_methods=["*"],
        allow_headers=["*"],
    )
    app.add_middleware(GZipMiddleware, minimum_size=1000, compresslevel=1)
    app.add_middleware(
        RequestBodyMiddleware,
        max_body_bytes=config.max_body_bytes,
        max_inflated_bytes=config.max_inflated_bytes,
        json_paths=JSON_BODY_PATHS,
        on_reject=reject,
    )
    if config.api_key:
        app.add_middleware(ApiKeyMiddleware, api_key=config.api_key)
    # Outermost: answers the hot endpoints without the framework's per-request layers.
    app.add_middleware(
        FastPathMiddleware,
        get_state=lambda: app.state.trajectory,
        metrics=metrics,
        limits=BodyLimits(config.max_body_bytes, config.max_inflated_bytes),
        api_key=config.api_key,
        retry_after=config.retry_after_seconds,
        pool=pool,
    )

    def state_of(request: Request) -> TrajectoryState:
        return request.app.state.trajectory

    # ------------------------------------------------------------------ error mapping

    def to_response(outcome: Outcome) -> Response:
        return Response(
            outcome.body,
            status_code=outcome.status,
            headers={k.decode(): v.decode() for k, v in outcome.headers},
            media_type=outcome.content_type.decode(),
        )

    @app.exception_handler(InvalidRequest)
    async def _invalid(request: Request, exc: InvalidRequest) -> Response:
        return to_response(error_outcome(exc, metrics, config.retry_after_seconds))

    @app.exception_handler(QueueFull)
    async def _full(request: Request, exc: QueueFull) -> Response:
        return to_response(error_outcome(exc, metrics, config.retry_after_seconds))

    for storage_error in STORAGE_ERRORS:

        @app.exception_handler(storage_error)
        async def _storage(request: Request, exc: Exception) -> Response:
            return to_response(error_outcome(exc, metrics, config.retry_after_seconds))

    @app.exception_handler(RequestValidationError)
    async def _request_invalid(request: Request, exc: RequestValidationError) -> Response:
        # FastAPI's own handler crashes on undecodable inputs; report them safely instead.
        reject("invalid_request")
        errors = [
            {**err, "input": small_input(err.get("input"))} if "input" in err else err for err in exc.errors()
        ]
        return json_response({"detail": errors}, status_code=422)

    @app.exception_handler(NotRegistered)
    async def _not_registered(request: Request, exc: NotRegistered) -> Response:
        reject("not_registered")
        return json_response({"detail": str(exc)}, status_code=409)

    @app.exception_handler(UnknownEnv)
    async def _unknown_env(request: Request, exc: UnknownEnv) -> Response:
        reject("unknown_env_id")
        return json_response({"detail": str(exc)}, status_code=404)

    @app.exception_handler(UnknownBatch)
    async def _unknown_batch(request: Request, exc: UnknownBatch) -> Response:
        reject("unknown_batch_id")
        return json_response({"detail": str(exc)}, status_code=404)

    # ------------------------------------------------------------------ the original's routes

    @app.get("/")
    async def root() -> Response:
        return json_response({"message": "AtroposLib API"})

    @app.post("/register", openapi_extra=_body(Registration.model_json_schema()))
    async def register(request: Request) -> Response:
        registration = decode_model(Registration, await request.body())
        state = state_of(request)
        was_registered = state.meta.registered
        requester = state.register(registration)
        if not was_registered:
            event(
                logger,
                logging.INFO,
                "trainer registered",
                batch_size=state.meta.batch_size,
                max_token_len=state.meta.max_token_len,
                starting_step=state.meta.step,
                wandb_group=state.meta.wandb_group,
                wandb_project=state.meta.wandb_project,
            )
        # A 128-bit int: the stdlib encoder (orjson stops at 64 bits).
        return JSONResponse({"uuid": requester})

    @app.post("/register-env", openapi_extra=_body(RegisterEnv.model_json_schema()))
    async def register_env(request: Request) -> Response:
        register_env = decode_model(RegisterEnv, await request.body())
        result = state_of(request).register_env(register_env)
        if result["status"] == "success":
            event(
                logger,
                logging.INFO,
                "env registered",
                env_id=result["env_id"],
                name=result["wandb_name"],
                group_size=register_env.group_size,
                weight=register_env.weight,
                min_batch_allocation=register_env.min_batch_allocation,
            )
        return json_response(result)

    @app.post("/disconnect-env", openapi_extra=_body(EnvIdentifier.model_json_schema()))
    async def disconnect_env(request: Request) -> Response:
        disconnect_env = decode_model(EnvIdentifier, await request.body())
        result = state_of(request).disconnect_env(disconnect_env.env_id)
        event(logger, logging.INFO, "env disconnect", env_id=disconnect_env.env_id, result=result["status"])
        return json_response(result)

    @app.get("/wandb_info")
    async def wandb_info(request: Request) -> Response:
        return json_response(state_of(request).wandb_info())

    @app.get("/info")
    async def info(request: Request) -> Response:
        return json_response(state_of(request).info())

    @app.get("/batch")
    async def get_batch(request: Request) -> Response:
        """The next batch, ``{"batch": null}``, or the not-registered error body (HTTP 200)."""
        return to_response(serve_batch(state_of(request), metrics, config.retry_after_seconds))

    @app.get("/latest_example")
    async def latest_example(request: Request) -> Response:
        return raw_json_response(state_of(request).latest_example())

    @app.post("/scored_data", openapi_extra=_SCORED_DATA_SCHEMA)
    async def scored_data(request: Request) -> Response:
        """Queue one scored group (or buffer it until it completes its env's group size)."""
        body = await request.body()
        return to_response(ingest_one(state_of(request), metrics, body, config.retry_after_seconds))

    @app.post("/scored_data_list", openapi_extra=_SCORED_DATA_LIST_SCHEMA)
    async def scored_data_list(request: Request) -> Response:
        """Queue a list of groups, all or nothing (one bad group rejects the list, naming its index)."""
        body = await request.body()
        return to_response(ingest_many(state_of(request), metrics, body, config.retry_after_seconds))

    @app.get("/status")
    async def status(request: Request) -> Response:
        return json_response(state_of(request).status())

    @app.get("/status-env", openapi_extra=_body(EnvIdentifier.model_json_schema()))
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
        return json_response(state_of(request).status_env(env.env_id))

    @app.get("/reset_data")
    async def reset_data(request: Request) -> Response:
        """Drop all queued data and the registration (a GET, as in the original)."""
        state = state_of(request)
        dropped = len(state.groups)
        state.reset()
        event(logger, logging.WARNING, "state reset", groups_dropped=dropped)
        return PlainTextResponse("Reset successful")

    # ------------------------------------------------------------------ additions

    @app.post("/batch/ack", openapi_extra=_body(BatchAck.model_json_schema()))
    async def batch_ack(request: Request) -> Response:
        """Acknowledge a served batch: it will never be replayed."""
        ack = decode_model(BatchAck, await request.body())
        state_of(request).acknowledge(ack.batch_id)
        return json_response({"status": "acknowledged"})

    @app.post("/batch/replay")
    async def batch_replay(request: Request) -> Response:
        """Serve every unacknowledged batch again (oldest first) before anything new."""
        count = state_of(request).replay()
        event(logger, logging.WARNING, "batches requeued", batches=count)
        return json_response({"status": "requeued", "batches": count})

    @app.get("/inspect/recent")
    async def inspect_recent(
        request: Request,
        limit: int = Query(32, ge=1, description="Most groups to return (newest first)."),
        env_id: int | None = Query(None, description="Only groups of this env."),
    ) -> Response:
        """Recently received groups, read-only (never consumes anything)."""
        return raw_json_response(state_of(request).recent_groups(limit, env_id))

    @app.get("/inspect/envs")
    async def inspect_envs(request: Request) -> Response:
        return json_response({"envs": state_of(request).env_records()})

    @app.get("/health")
    async def health(request: Request) -> Response:
        return json_response(state_of(request).health())

    @app.get("/metrics")
    async def prometheus_metrics() -> Response:
        return Response(metrics.render(), media_type=METRICS_CONTENT_TYPE)

    return app


app = create_app()
