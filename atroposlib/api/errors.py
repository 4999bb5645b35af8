"""Request errors of the trajectory API, in FastAPI's ``422 {"detail": [...]}`` shape.

An error is a dict with ``type``, ``loc`` (starting with ``"body"`` once it is raised),
``msg`` and optionally ``input``/``ctx``, so a rejected group reads like a schema error.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

#: Error inputs larger than this many items are elided from error responses.
MAX_ERROR_INPUT_ITEMS = 64
#: At most this many errors are reported for one request.
MAX_ERRORS = 50


class InvalidRequest(Exception):
    """The request body is unacceptable; ``errors`` are FastAPI-style error dicts."""

    def __init__(self, errors: list[dict[str, Any]]):
        super().__init__(errors[0]["msg"] if errors else "invalid request")
        self.errors = errors[:MAX_ERRORS]


def error(kind: str, loc: Sequence[Any], msg: str, **extra: Any) -> dict[str, Any]:
    """One FastAPI-style error dict."""
    return {"type": kind, "loc": list(loc), "msg": msg, **extra}


def require_body(body: bytes) -> None:
    """Raise the ``Field required`` error for an empty body."""
    if not body:
        raise InvalidRequest([error("missing", ["body"], "Field required", input=None)])


def pydantic_errors(exc: ValidationError, body: bytes) -> list[dict[str, Any]]:
    """The errors of a failed ``model_validate_json(body)``, located under ``"body"``."""
    errors = []
    for err in exc.errors(include_url=False):
        if err["type"] == "json_invalid":
            return [_json_error(body, err)]
        entry = {"type": err["type"], "loc": ["body", *err["loc"]], "msg": err["msg"]}
        if "input" in err:
            entry["input"] = small_input(err["input"])
        ctx = err.get("ctx")
        if ctx:
            entry["ctx"] = {k: (str(v) if isinstance(v, Exception) else v) for k, v in ctx.items()}
        errors.append(entry)
        if len(errors) >= MAX_ERRORS:
            break
    return errors


def _json_error(body: bytes, err: dict[str, Any]) -> dict[str, Any]:
    """FastAPI's shape for undecodable JSON: loc ``["body", <char offset>]``."""
    try:
        json.loads(body)
    except json.JSONDecodeError as exc:
        return error("json_invalid", ["body", exc.pos], "JSON decode error", input={}, ctx={"error": exc.msg})
    except (UnicodeDecodeError, RecursionError, ValueError) as exc:
        return error("json_invalid", ["body", 0], "JSON decode error", input={}, ctx={"error": str(exc)})
    # Valid for Python's parser but not for pydantic's (e.g. lone surrogates, nesting too deep).
    return error("json_invalid", ["body", 0], "JSON decode error", input={}, ctx={"error": err["msg"]})


def small_input(value: Any) -> Any:
    """Elide large inputs so an error response never echoes a whole batch of tokens."""
    if isinstance(value, bytes | bytearray):
        return value[:1000].decode("utf-8", errors="replace")
    if isinstance(value, list | dict) and len(value) > MAX_ERROR_INPUT_ITEMS:
        return f"<{type(value).__name__} of {len(value)} items>"
    if isinstance(value, str) and len(value) > 1000:
        return value[:1000] + "..."
    if isinstance(value, list):
        return [small_input(v) for v in value]
    if isinstance(value, dict):
        return {k: small_input(v) for k, v in value.items()}
    return value
