"""Client for the ManagedServer OpenAI proxy (:mod:`.managed_server_proxy`).

:class:`ProxyManagedServer` has the ``ManagedServer`` interface (``chat_completion``,
``completion``, ``get_state``, ``reset``, ``get_logprobs``) but the token tracking happens in the
proxy process. Every completion answer from the proxy carries the session's nodes, so
``get_state()`` is current right after each call without another request. Request kwargs are
forwarded as given (``top_p``, ``stop``, ``tools``, ``split`` ...), and tool calls come back in
``message.tool_calls``.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

from openai.types.chat.chat_completion import ChatCompletion
from openai.types.completion import Completion

from atroposlib.envs.server_handling.http import HTTPClient
from atroposlib.envs.server_handling.managed_server import SequenceNode, _message_dicts

logger = logging.getLogger(__name__)


def _jsonable_kwargs(kwargs: dict[str, Any]) -> dict[str, Any]:
    body = dict(kwargs)
    body.pop("model", None)  # the proxy session decides the model
    if "messages" in body:
        body["messages"] = _message_dicts(body["messages"])
    return body


class ProxyManagedServer:
    """One proxy session, used like a ``ManagedServer``.

    Args:
        proxy_url: proxy root, e.g. ``http://localhost:9100``.
        session_uuid: the session id returned by ``POST /sessions/create``.
        model_name: model name for the response objects.
        base_url: the backend server the session is pinned to (informational).
        timeout: per-request timeout, seconds.
    """

    def __init__(
        self,
        proxy_url: str,
        session_uuid: str,
        model_name: str = "unknown",
        base_url: Optional[str] = None,
        timeout: float = 1200.0,
    ):
        self.proxy_url = proxy_url.rstrip("/")
        self.session_uuid = session_uuid
        self.model_name = model_name
        self.base_url = base_url
        self.http = HTTPClient(timeout=timeout)
        self._cached_nodes: list[SequenceNode] = []

    def get_url(self) -> str:
        """OpenAI-compatible base URL of this session (``{proxy}/{uuid}/v1``) for external clients."""
        return f"{self.proxy_url}/{self.session_uuid}/v1"

    def _remember(self, data: dict[str, Any]) -> None:
        nodes = data.pop("nodes", None)
        if nodes is not None:
            self._cached_nodes = [SequenceNode(**node) for node in nodes]

    async def chat_completion(self, **kwargs) -> ChatCompletion:
        """Chat completion through the proxy session; returns an OpenAI ``ChatCompletion``."""
        data = await self.http.post_json(
            f"{self.proxy_url}/{self.session_uuid}/v1/chat/completions", _jsonable_kwargs(kwargs)
        )
        self._remember(data)
        raw_calls = [((c.get("message") or {}).get("tool_calls")) for c in data.get("choices", [])]
        response = ChatCompletion.model_validate(data)
        for choice, calls in zip(response.choices, raw_calls, strict=False):
            if calls:
                # Plain dicts, like the in-process ManagedServer.
                choice.message.tool_calls = calls
        return response

    async def completion(self, **kwargs) -> Completion:
        """Text completion through the proxy session; returns an OpenAI ``Completion``."""
        data = await self.http.post_json(
            f"{self.proxy_url}/{self.session_uuid}/v1/completions", _jsonable_kwargs(kwargs)
        )
        self._remember(data)
        return Completion.model_validate(data)

    async def get_logprobs(self, **kwargs) -> dict[str, Any]:
        """Prompt logprobs through the proxy session (see ``ManagedServer.get_logprobs``)."""
        return await self.http.post_json(
            f"{self.proxy_url}/{self.session_uuid}/v1/logprobs", _jsonable_kwargs(kwargs)
        )

    def get_state(self) -> dict[str, Any]:
        """``{"nodes": [...]}`` as of the last completion answer (or :meth:`fetch_state`)."""
        return {"nodes": list(self._cached_nodes)}

    async def fetch_state(self) -> dict[str, Any]:
        """Fetch the session's nodes from the proxy (also updates :meth:`get_state`)."""
        data = await self.http.get_json(f"{self.proxy_url}/{self.session_uuid}/nodes")
        self._cached_nodes = [SequenceNode(**node) for node in (data or {}).get("nodes", [])]
        return self.get_state()

    def reset(self) -> None:
        """Forget the locally cached nodes (the proxy session is deleted by :meth:`cleanup`)."""
        self._cached_nodes = []

    async def cleanup(self) -> None:
        """Delete the session on the proxy (failures are logged, not raised)."""
        try:
            async with self.http.session().delete(f"{self.proxy_url}/{self.session_uuid}") as response:
                await response.read()
        except Exception as exc:
            logger.warning("could not delete proxy session %s: %r", self.session_uuid, exc)
        finally:
            await self.http.close()

    async def __aenter__(self) -> ProxyManagedServer:
        return self

    async def __aexit__(self, exc_type, exc, tb) -> None:
        await self.cleanup()


async def create_proxy_session(
    proxy_url: str,
    base_url: Optional[str] = None,
    tool_parser: str = "hermes",
    track_tree: bool = False,
    model_name: str = "unknown",
) -> ProxyManagedServer:
    """Create a session on the proxy (optionally pinned to backend ``base_url``) and return its client."""
    body: dict[str, Any] = {"tool_parser": tool_parser, "track_tree": track_tree}
    if base_url:
        body["base_url"] = base_url
    http = HTTPClient(timeout=30.0)
    try:
        data = await http.post_json(f"{proxy_url.rstrip('/')}/sessions/create", body)
    finally:
        await http.close()
    return ProxyManagedServer(
        proxy_url=proxy_url,
        session_uuid=data["uuid"],
        model_name=data.get("model_name", model_name),
        base_url=data.get("base_url"),
    )
