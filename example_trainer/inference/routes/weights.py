"""The routes that change the served weights without a restart.

* ``POST /bridge/update_weights`` ``{"checkpoint_dir", "pause_mode"?}``: load a checkpoint directory in place;
  404 when it does not exist, 400 when it is not a checkpoint of the served model.
* ``GET /bridge/shared_weights``: handles to the served parameters (409 when the server does not share them).
* ``POST /bridge/init_weight_group`` and ``POST /bridge/receive_weights``: join the trainer's broadcast group,
  then receive its tensors.

Replies: ``{"status": "updated", ["checkpoint_dir",] "seconds", "update_count"}`` and
``{"status": "joined", "rank", "world_size"}``.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request

from example_trainer.inference.routes.backend import Route, backend_of, router_of
from example_trainer.inference.routes.bodies import ReceiveWeightsBody, UpdateWeightsBody, WeightGroupBody
from example_trainer.inference.routes.errors import ApiError, check_pause_mode, parsed_body
from example_trainer.inference.weight_refresh import CheckpointError, validate_checkpoint_dir


def checkpoint_to_load(checkpoint_dir: str) -> Path:
    """The checked checkpoint directory of an update request: ``ApiError(404)`` when it does not exist,
    ``ApiError(400)`` when it is not a loadable checkpoint."""
    try:
        return validate_checkpoint_dir(checkpoint_dir)
    except FileNotFoundError as exc:
        raise ApiError(404, str(exc)) from exc
    except CheckpointError as exc:
        raise ApiError(400, str(exc)) from exc


def updated_reply(seconds: float, update_count: int, checkpoint: Path | None = None) -> dict[str, Any]:
    """The reply to a weight update that took ``seconds`` and made ``update_count`` updates in all."""
    reply: dict[str, Any] = {"status": "updated"}
    if checkpoint is not None:
        reply["checkpoint_dir"] = str(checkpoint)
    return {**reply, "seconds": seconds, "update_count": update_count}


async def update_weights(request: Request) -> dict[str, Any]:
    """``POST /bridge/update_weights``."""
    parsed = await parsed_body(request, UpdateWeightsBody)
    check_pause_mode(parsed.pause_mode)
    checkpoint = checkpoint_to_load(parsed.checkpoint_dir)
    backend = backend_of(request)
    try:
        seconds = await backend.update_weights(checkpoint, parsed.pause_mode)
    except CheckpointError as exc:
        raise ApiError(400, str(exc)) from exc
    return updated_reply(seconds, backend.update_count, checkpoint)


async def shared_weights(request: Request) -> dict[str, Any]:
    """``GET /bridge/shared_weights``."""
    return await backend_of(request).shared_manifest()


async def init_weight_group(request: Request) -> dict[str, Any]:
    """``POST /bridge/init_weight_group``."""
    parsed = await parsed_body(request, WeightGroupBody)
    await backend_of(request).join_weight_group(parsed)
    return {"status": "joined", "rank": parsed.rank, "world_size": parsed.world_size}


async def receive_weights(request: Request) -> dict[str, Any]:
    """``POST /bridge/receive_weights``."""
    parsed = await parsed_body(request, ReceiveWeightsBody)
    check_pause_mode(parsed.pause_mode)
    backend = backend_of(request)
    try:
        seconds = await backend.receive_weights(parsed.tensors, parsed.pause_mode)
    except CheckpointError as exc:
        raise ApiError(400, str(exc)) from exc
    return updated_reply(seconds, backend.update_count)


ROUTES: tuple[Route, ...] = (
    ("POST", "/bridge/update_weights", update_weights),
    ("GET", "/bridge/shared_weights", shared_weights),
    ("POST", "/bridge/init_weight_group", init_weight_group),
    ("POST", "/bridge/receive_weights", receive_weights),
)


def weights_router(dependencies: Sequence[Any] = ()) -> APIRouter:
    """The weight routes, guarded by ``dependencies`` (e.g. the API-key check)."""
    return router_of(ROUTES, dependencies)
