"""Shared base for backends that speak the OpenAI ``/v1`` chat and completions API.

:class:`OpenAICompatibleServer` implements chat and text completions through the ``openai`` client
(one client per event loop, no client-side retries: :class:`APIServer` owns the retry policy),
handles servers that ignore the ``n`` parameter, and probes health with a cheap ``GET``.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any, Optional

import openai
from openai.types.chat.chat_completion import ChatCompletion
from openai.types.completion import Completion

from atroposlib.envs.server_handling.http import HTTPClient, root_url
from atroposlib.envs.server_handling.server_baseline import APIServer, APIServerConfig, ReasoningConfig

logger = logging.getLogger(__name__)

#: Placeholder key for servers that need none (the openai client refuses to start without one).
PLACEHOLDER_API_KEY = "EMPTY"


def effective_api_key(config: APIServerConfig) -> str:
    """The configured key, else ``$OPENAI_API_KEY``, else a placeholder (local servers need none)."""
    return config.api_key or os.environ.get("OPENAI_API_KEY") or PLACEHOLDER_API_KEY


def merge_choices(responses: list[Any]) -> Any:
    """Concatenate the choices of several responses into the first one, renumbering ``index``."""
    merged = responses[0]
    for extra in responses[1:]:
        merged.choices.extend(extra.choices)
    for i, choice in enumerate(merged.choices):
        choice.index = i
    return merged


class OpenAICompatibleServer(APIServer):
    """An :class:`APIServer` whose chat/completion calls go to an OpenAI-compatible ``/v1`` API."""

    def __init__(self, config: APIServerConfig, reasoning_config: Optional[ReasoningConfig] = None):
        super().__init__(config, reasoning_config=reasoning_config)
        self.http = HTTPClient(api_key=config.api_key or None, timeout=float(config.timeout))
        self._openai_client: Optional[openai.AsyncOpenAI] = None
        self._openai_loop: Optional[asyncio.AbstractEventLoop] = None

    # -- clients -----------------------------------------------------------------------------------
    @property
    def openai(self) -> openai.AsyncOpenAI:
        """The ``openai.AsyncOpenAI`` client for the running event loop."""
        try:
            loop: Optional[asyncio.AbstractEventLoop] = asyncio.get_running_loop()
        except RuntimeError:
            loop = None
        if self._openai_client is None or (loop is not None and self._openai_loop is not loop):
            self._openai_client = openai.AsyncOpenAI(
                api_key=effective_api_key(self.config),
                base_url=self.config.base_url or None,
                timeout=float(self.config.timeout),
                max_retries=0,
            )
            self._openai_loop = loop
        return self._openai_client

    @property
    def root_url(self) -> str:
        """Server root (``base_url`` without its trailing ``/v1``)."""
        return root_url(self.config.base_url)

    def _effective_base_url(self) -> str:
        return str(self.openai.base_url).rstrip("/")

    # -- health ------------------------------------------------------------------------------------
    async def check_server_status_task(self, chat_completion: bool = True):
        await self._health_check_loop()

    async def _probe_health(self) -> bool:
        """``GET {base_url}/models``: any answer below 500 means the server is up (no tokens spent)."""
        status = await self.http.get_status(
            f"{self._effective_base_url()}/models", timeout=self.health_probe_timeout
        )
        return status < 500

    # -- n handling ----------------------------------------------------------------------------------
    async def _create_with_n(self, create, kwargs: dict[str, Any]):
        """Call ``create(**kwargs)`` and make sure ``n`` choices come back.

        If the server ignores ``n`` (one choice for n > 1) the remaining ``n - 1`` requests are sent
        in parallel and ``n_kwarg_is_ignored`` is remembered; any other count is a ``ValueError``.
        """
        n = int(kwargs.get("n") or 1)
        if self.config.n_kwarg_is_ignored:
            single = {k: v for k, v in kwargs.items() if k != "n"}
            if n <= 1:
                return await create(**single)
            return merge_choices(list(await asyncio.gather(*[create(**single) for _ in range(n)])))
        response = await create(**kwargs)
        got = len(response.choices)
        if got == n:
            return response
        if got != 1:
            raise ValueError(f"Expected 1 or {n} completions from {self.config.base_url}, got {got}")
        logger.warning(
            "%s ignores the n kwarg; sending %d separate requests from now on", self._describe(), n
        )
        self.config.n_kwarg_is_ignored = True
        single = {k: v for k, v in kwargs.items() if k != "n"}
        rest = await asyncio.gather(*[create(**single) for _ in range(n - 1)])
        return merge_choices([response, *rest])

    async def _chat_completion_wrapper(self, **kwargs) -> ChatCompletion:
        if kwargs.get("model") is None:
            raise ValueError("model is required for a chat completion")
        if kwargs.get("messages") is None:
            raise ValueError("messages are required for a chat completion")
        return await self._create_with_n(self.openai.chat.completions.create, kwargs)

    async def _completion_wrapper(self, **kwargs) -> Completion:
        if kwargs.get("model") is None:
            raise ValueError("model is required for a completion")
        if kwargs.get("prompt") is None:
            raise ValueError("prompt is required for a completion")
        return await self._create_with_n(self.openai.completions.create, kwargs)

    async def close(self) -> None:
        await super().close()
        await self.http.close()
        client, self._openai_client = self._openai_client, None
        if client is not None and self._openai_loop is asyncio.get_running_loop():
            try:
                await client.close()
            except Exception:  # closing is best effort
                pass
