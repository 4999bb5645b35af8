"""Error replies and request-body parsing shared by every inference route."""

from __future__ import annotations

from http import HTTPStatus
from typing import Any, TypeVar

from fastapi import Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ValidationError

from example_trainer.inference.weight_refresh import PAUSE_MODES


class BadRequest(ValueError):
    """A client error in a request body; the message is returned to the client with a 400."""


class ApiError(Exception):
    """An HTTP error answered as ``{"error": {"message", "type", "param", "code"}}`` (vLLM's shape).

    The message is returned as is (paths and names stay in it), so the trainer's log says exactly which
    checkpoint or adapter was refused.
    """

    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.message = message


def error_body(status_code: int, message: str) -> dict[str, Any]:
    """The JSON body of an error reply with ``status_code`` and ``message``."""
    error = {"message": message, "type": HTTPStatus(status_code).phrase, "param": None}
    return {"error": {**error, "code": status_code}}


async def api_error_handler(_request: Request, exc: ApiError) -> JSONResponse:
    """FastAPI exception handler answering an :class:`ApiError` with :func:`error_body`."""
    return JSONResponse(error_body(exc.status_code, exc.message), status_code=exc.status_code)


def validation_message(exc: ValidationError) -> str:
    """``invalid body: <field>: <problem>; ...`` for a pydantic validation error."""
    parts = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"]) or "body"
        parts.append(f"{loc}: {err['msg']}")
    return "invalid body: " + "; ".join(parts)


async def json_body(request: Request) -> Any:
    """The request's JSON body; ``ApiError(400)`` when it is not valid JSON."""
    try:
        return await request.json()
    except (ValueError, UnicodeDecodeError) as exc:
        raise ApiError(400, f"request body is not valid JSON: {exc}") from exc


_Body = TypeVar("_Body", bound=BaseModel)


def validate_body(body: Any, model: type[_Body]) -> _Body:
    """``body`` validated as ``model``; ``ApiError(400)`` naming the bad fields."""
    try:
        return model.model_validate(body)
    except ValidationError as exc:
        raise ApiError(400, validation_message(exc)) from exc


async def parsed_body(request: Request, model: type[_Body]) -> _Body:
    """The JSON body validated as ``model``; ``ApiError(400)`` naming the bad field (or the JSON error)."""
    return validate_body(await json_body(request), model)


def check_pause_mode(mode: str, field: str = "pause_mode") -> str:
    """``mode`` when it is one of the engine's pause modes; ``ApiError(400)`` naming ``field`` otherwise."""
    if mode not in PAUSE_MODES:
        raise ApiError(400, f"{field} must be one of {list(PAUSE_MODES)}")
    return mode
