"""Structured logging for ``run-api``: ``key=value`` text lines or one JSON object per line.

Log calls pass their fields as ``extra={"fields": {...}}``; :func:`event` does that for you.
"""

from __future__ import annotations

import json
import logging
import time
from typing import Any

_RESERVED = set(logging.makeLogRecord({}).__dict__)


def event(logger: logging.Logger, level: int, message: str, **fields: Any) -> None:
    """Log ``message`` with structured ``fields``."""
    if logger.isEnabledFor(level):
        logger.log(level, message, extra={"fields": fields})


def _fields(record: logging.LogRecord) -> dict[str, Any]:
    fields = dict(getattr(record, "fields", None) or {})
    for key, value in record.__dict__.items():
        if key not in _RESERVED and key not in ("fields", "message", "color_message"):
            fields.setdefault(key, value)
    return fields


class TextFormatter(logging.Formatter):
    """``2025-01-01T00:00:00Z INFO logger: message key=value ...``"""

    def format(self, record: logging.LogRecord) -> str:
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(record.created))
        parts = [f"{stamp}Z", record.levelname, f"{record.name}:", record.getMessage()]
        for key, value in _fields(record).items():
            text = (
                value
                if isinstance(value, str) and value and " " not in value
                else json.dumps(value, default=str)
            )
            parts.append(f"{key}={text}")
        line = " ".join(parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    """One JSON object per line: ``ts``, ``level``, ``logger``, ``message`` and the fields."""

    def format(self, record: logging.LogRecord) -> str:
        payload = {
            "ts": round(record.created, 6),
            "level": record.levelname.lower(),
            "logger": record.name,
            "message": record.getMessage(),
            **_fields(record),
        }
        if record.exc_info:
            payload["exception"] = self.formatException(record.exc_info)
        return json.dumps(payload, default=str)


def setup_logging(level: str = "info", fmt: str = "text") -> None:
    """Route the root, uvicorn and atroposlib loggers to stderr in the chosen format."""
    handler = logging.StreamHandler()
    handler.setFormatter(JsonFormatter() if fmt == "json" else TextFormatter())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for name in ("uvicorn", "uvicorn.error", "uvicorn.access"):
        logger = logging.getLogger(name)
        logger.handlers[:] = []
        logger.propagate = True
