"""Shared base for backends that speak the OpenAI ``/v1`` chat and completions API.

:class:`OpenAICompatibleServer` sends chat and text completions as plain JSON over a pooled
``aiohttp`` session and returns ``openai`` response objects (``ChatCompletion``/``Completion``); HTTP
and transport failures are raised as the ``openai`` exceptions the client would raise
(``openai.BadRequestError``, ``openai.APIConnectionError`` ...). This costs about a tenth of the CPU of
the ``openai`` client per request, which matters for environments running hundreds of rollouts at
once. Streaming requests (``stream=True``) go through the ``openai`` client, available as
``server.openai``. There are no client-side retries: :class:`APIServer` owns the retry policy. The
class also handles servers that ignore ``n`` and probes health with a cheap ``GET``.
"""

from __future__ import annotations

import asyncio
import logging
import os
from typing import Any, Optional

import aiohttp
import httpx
import openai
import orjson
from openai.types.chat.chat_completion import ChatCompletion
from openai.types.completion import Completion
from pydantic import ValidationError

from atroposlib.envs.server_handling.errors import BackendHTTPError
from atroposlib.envs.server_handling.http import HTTPClient, root_url
from atroposlib.envs.server_handling.server_baseline import APIServer, APIServerConfig, ReasoningConfig

logger = logging.getLogger(__name__)

#: Placeholder key for servers that need none (the openai client refuses to start without one).
PLACEHOLDER_API_KEY = "EMPTY"


def effective_api_key(config: APIServerConfig) -> str:
    """The configured key, else ``$OPENAI_API_KEY``, else a placeholder (local servers need none)."""
    return config.api_key or os.environ.get("OPENAI_API_KEY") or PLACEHOLDER_API_KEY


#: ``create()`` options of the openai client that are not part of the request body.
CLIENT_OPTIONS = frozenset({"extra_headers", "extra_query", "extra_body", "timeout"})

_STATUS_ERRORS: dict[int, type[openai.APIStatusError]] = {
    400: openai.BadRequestError,
    401: openai.AuthenticationError,
    403: openai.PermissionDeniedError,
    404: openai.NotFoundError,
    409: openai.ConflictError,
    422: openai.UnprocessableEntityError,
    429: openai.RateLimitError,
}

DEFAULT_OPENAI_BASE_URL = "https://api.openai.com/v1"


def as_openai_error(exc: BaseException, url: str) -> BaseException:
    """The ``openai`` exception the official client raises for the same failure (else ``exc``)."""
    request = httpx.Request("POST", url)
    if isinstance(exc, BackendHTTPError):
        try:
            body: Any = orjson.loads(exc.body) if exc.body else None
        except orjson.JSONDecodeError:
            body = exc.body
        response = httpx.Response(exc.status, request=request, content=exc.body.encode())
        cls = _STATUS_ERRORS.get(exc.status)
        if cls is None:
            cls = openai.InternalServerError if exc.status >= 500 else openai.APIStatusError
        return cls(f"Error code: {exc.status} - {body}", response=response, body=body)
    if isinstance(exc, (asyncio.TimeoutError, TimeoutError, aiohttp.ServerTimeoutError)):
        return openai.APITimeoutError(request=request)
    if isinstance(exc, aiohttp.ClientError):
        return openai.APIConnectionError(message=f"Connection error: {exc}", request=request)
    return exc


# Sentinel types of the openai client meaning "parameter not given" (Omit is absent from older releases).
_NOT_GIVEN_TYPES = tuple(t for t in (getattr(openai, "NotGiven", None), getattr(openai, "Omit", None)) if t)


def _request_body(kwargs: dict[str, Any]) -> dict[str, Any]:
    body = {
        k: v for k, v in kwargs.items() if k not in CLIENT_OPTIONS and not isinstance(v, _NOT_GIVEN_TYPES)
    }
    extra = kwargs.get("extra_body")
    if isinstance(extra, dict):
        body.update(extra)
    return body


def parse_response(model_cls: Any, data: Any) -> Any:
    """Validate an answer into ``model_cls``; off-spec answers are built leniently like the client does."""
    try:
        return model_cls.model_validate(data)
    except ValidationError:
        if not isinstance(data, dict):
            raise
        return model_cls.construct(**data)


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
        return (self.config.base_url or os.environ.get("OPENAI_BASE_URL") or DEFAULT_OPENAI_BASE_URL).rstrip(
            "/"
        )

    async def _post_openai(self, path: str, model_cls: Any, kwargs: dict[str, Any]) -> Any:
        """POST an OpenAI request body to ``{base_url}/{path}`` and parse the answer into ``model_cls``."""
        url = f"{self._effective_base_url()}/{path}"
        headers = {
            "Authorization": f"Bearer {effective_api_key(self.config)}",
            **(kwargs.get("extra_headers") or {}),
        }
        timeout = kwargs.get("timeout")
        try:
            data = await self.http.post_json(
                url,
                _request_body(kwargs),
                timeout=float(timeout) if isinstance(timeout, (int, float)) else None,
                headers=headers,
                params=kwargs.get("extra_query") or None,
            )
        except (BackendHTTPError, aiohttp.ClientError, asyncio.TimeoutError) as exc:
            raise as_openai_error(exc, url) from exc
        return parse_response(model_cls, data)

    async def _chat_create(self, **kwargs) -> ChatCompletion:
        if kwargs.get("stream"):
            return await self.openai.chat.completions.create(**kwargs)
        return await self._post_openai("chat/completions", ChatCompletion, kwargs)

    async def _completion_create(self, **kwargs) -> Completion:
        if kwargs.get("stream"):
            return await self.openai.completions.create(**kwargs)
        return await self._post_openai("completions", Completion, kwargs)

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
        return await self._create_with_n(self._chat_create, kwargs)

    async def _completion_wrapper(self, **kwargs) -> Completion:
        if kwargs.get("model") is None:
            raise ValueError("model is required for a completion")
        if kwargs.get("prompt") is None:
            raise ValueError("prompt is required for a completion")
        return await self._create_with_n(self._completion_create, kwargs)

    async def close(self) -> None:
        await super().close()
        await self.http.close()
        client, self._openai_client = self._openai_client, None
        if client is not None and self._openai_loop is asyncio.get_running_loop():
            try:
                await client.close()
            except Exception:  # closing is best effort
                pass
