"""``POST /generate``: token ids or text in, completions (with per-token logprobs when asked) out.

The body's contract and the reply's shape belong to the backend (vLLM's in
:mod:`example_trainer.inference.vllm_protocol`, the hf server's in :mod:`example_trainer.inference.hf_engine`);
this route reads the JSON and hands it over.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response

from example_trainer.inference.routes.backend import backend_of, router_of
from example_trainer.inference.routes.errors import json_body


async def generate(request: Request) -> Response:
    """``POST /generate``: the backend's reply to the JSON body."""
    return await backend_of(request).generate(await json_body(request), request)


def generate_router(dependencies: Sequence[Any] = ()) -> APIRouter:
    """The ``/generate`` route, guarded by ``dependencies`` (e.g. the API-key check)."""
    return router_of((("POST", "/generate", generate),), dependencies)
