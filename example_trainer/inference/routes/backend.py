"""What a server does behind the shared routes: the :class:`InferenceBackend` protocol."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from fastapi import APIRouter, Request
from fastapi.responses import Response

from example_trainer.inference.routes.bodies import WeightGroupBody

#: ``app.state`` attribute holding the app's backend.
STATE_KEY = "inference_backend"


class InferenceBackend(Protocol):
    """The engine side of ``/generate`` and of the weight and adapter routes.

    Methods raise :class:`~example_trainer.inference.routes.errors.ApiError` for refusals the client must
    see with a status code, and :class:`~example_trainer.inference.weight_refresh.CheckpointError` for
    weights that do not fit the served model (answered with a 400).
    """

    @property
    def update_count(self) -> int:
        """How many times the served weights changed since the server started."""
        ...

    async def generate(self, body: Any, request: Request) -> Response:
        """The reply to a ``/generate`` JSON ``body`` (``request`` is the raw request, for cancellation)."""
        ...

    async def update_weights(self, checkpoint: Path, pause_mode: str) -> float:
        """Serve the weights of the checked checkpoint directory; returns the seconds it took."""
        ...

    async def shared_manifest(self) -> dict[str, Any]:
        """Handles to the served parameters (:mod:`example_trainer.inference.shared_weights`)."""
        ...

    async def join_weight_group(self, group: WeightGroupBody) -> None:
        """Join the trainer's weight-broadcast group (:mod:`example_trainer.inference.weight_broadcast`)."""
        ...

    async def receive_weights(self, tensors: list[dict[str, Any]], pause_mode: str) -> float:
        """Receive one broadcast of ``tensors`` and serve them; returns the seconds it took."""
        ...

    async def load_adapter(self, adapter_path: str, adapter_name: str | None) -> dict[str, Any]:
        """Serve the LoRA adapter in the existing directory ``adapter_path``; the reply's fields after
        ``status`` and ``adapter_path`` (``adapter_name`` first)."""
        ...

    async def unload_adapter(self) -> dict[str, Any]:
        """Serve the base weights again; the reply's fields after ``status`` (``previous_adapter`` first)."""
        ...


def backend_of(request: Request) -> InferenceBackend:
    """The backend of the app serving ``request`` (set with :func:`install_backend`)."""
    return getattr(request.app.state, STATE_KEY)


def install_backend(app: Any, backend: InferenceBackend) -> None:
    """Make ``backend`` the one the shared routes of ``app`` call."""
    setattr(app.state, STATE_KEY, backend)


#: One route: ``(method, path, handler)``; the handler takes the request and returns the reply.
Route = tuple[str, str, Callable[..., Awaitable[Any]]]


def router_of(routes: Sequence[Route], dependencies: Sequence[Any] = ()) -> APIRouter:
    """An ``APIRouter`` serving ``routes``, each guarded by ``dependencies`` (e.g. an API-key check)."""
    router = APIRouter(dependencies=list(dependencies))
    for method, path, handler in routes:
        router.add_api_route(path, handler, methods=[method])
    return router
