"""The trajectory API: ``from atroposlib.api import app`` is the server's ASGI application.

The app is imported lazily so that ``atroposlib.api.utils`` (the batching functions) can be
used without importing FastAPI.
"""

from __future__ import annotations

from typing import Any

__all__ = ["app"]


def __getattr__(name: str) -> Any:
    if name == "app":
        from atroposlib.api.server import app

        return app
    raise AttributeError(f"module 'atroposlib.api' has no attribute {name!r}")
