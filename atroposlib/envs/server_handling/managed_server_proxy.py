"""An OpenAI-compatible HTTP proxy over ``ManagedServer`` sessions.

External programs (agents, tool frameworks) talk plain OpenAI to ``{proxy}/{uuid}/v1`` while the
proxy records training-ready nodes per session. Routes:

=========================================  ==============================================================
``POST /sessions/create``                  ``{tool_parser?, track_tree?, base_url?}`` -> ``{uuid, model_name, ...}``
``POST /{uuid}/v1/chat/completions``       OpenAI chat request -> ChatCompletion JSON plus ``"nodes"``
``POST /{uuid}/v1/completions``            OpenAI completion request -> Completion JSON plus ``"nodes"``
``POST /{uuid}/v1/logprobs``               ``{messages|prompt|input_ids, top_k}`` -> prompt logprobs
``POST /{uuid}/v1/chat/completions/render`` the rendered prompt text and token ids (no generation)
``GET /{uuid}/nodes``                      the session's nodes
``DELETE /{uuid}``                         end the session
``GET /sessions``, ``GET /servers``        listings; ``POST /setup`` replaces the backend servers
``GET /v1/models``, ``GET /health``        model list and liveness
=========================================  ==============================================================

Calls within one session are serialised (multi-turn extension needs the previous turn's node);
sessions idle for longer than ``session_ttl_s`` are dropped. Errors use OpenAI's error shape: 400/404
for bad requests, 502 when the backend failed, 503 when no backend is healthy.

Run standalone: ``python -m atroposlib.envs.server_handling.managed_server_proxy --config servers.json
--port 9100`` with ``servers.json`` = ``{"model_name": ..., "tokenizer_name"?: ..., "servers":
[{"base_url": ..., "server_type": "vllm", "api_key"?: ...}, ...]}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import logging
import sys
import time
import uuid as uuid_lib
from dataclasses import dataclass, field
from typing import Any, Optional, Union

from fastapi import APIRouter, FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from pydantic import BaseModel, ConfigDict, ValidationError

from atroposlib.envs.server_handling.errors import ServerUnavailableError
from atroposlib.envs.server_handling.managed_server import DummyManagedServer, ManagedServer
from atroposlib.envs.server_handling.openai_server import OpenAIServer
from atroposlib.envs.server_handling.server_baseline import APIServerConfig
from atroposlib.envs.server_handling.server_manager import ServerManager

logger = logging.getLogger(__name__)


class ChatMessage(BaseModel):
    model_config = ConfigDict(extra="allow")
    role: str
    content: Optional[Union[str, list[dict[str, Any]]]] = None
    tool_calls: Optional[list[dict[str, Any]]] = None
    tool_call_id: Optional[str] = None
    name: Optional[str] = None


class ChatCompletionProxyRequest(BaseModel):
    """An OpenAI chat request; unknown keys (top_p, seed, split ...) are passed to the backend."""

    model_config = ConfigDict(extra="allow")
    messages: list[ChatMessage]
    max_tokens: int = 1024
    temperature: float = 1.0
    n: int = 1
    stop: Optional[Union[str, list[str]]] = None
    tools: Optional[list[dict[str, Any]]] = None
    tool_choice: Optional[Any] = None


class CompletionProxyRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    prompt: str
    max_tokens: int = 1024
    temperature: float = 1.0
    n: int = 1
    stop: Optional[Union[str, list[str]]] = None


class LogprobsProxyRequest(BaseModel):
    model_config = ConfigDict(extra="allow")
    messages: Optional[list[ChatMessage]] = None
    prompt: Optional[str] = None
    input_ids: Optional[list[int]] = None
    top_k: int = 1


class SessionCreateRequest(BaseModel):
    tool_parser: str = "hermes"
    track_tree: bool = False
    base_url: Optional[str] = None


class ServerSpec(BaseModel):
    model_config = ConfigDict(extra="ignore")
    base_url: str
    server_type: str = "vllm"
    api_key: str = ""
    num_max_requests_at_once: int = 512
    num_requests_for_eval: int = 64
    timeout: int = 1200


class ProxyConfig(BaseModel):
    """The ``--config`` / ``POST /setup`` document."""

    model_name: str
    tokenizer_name: Optional[str] = None
    servers: list[ServerSpec]

    def server_configs(self) -> list[APIServerConfig]:
        return [
            APIServerConfig(
                model_name=self.model_name,
                tokenizer_name=self.tokenizer_name or "none",
                **spec.model_dump(),
            )
            for spec in self.servers
        ]


@dataclass
class SessionState:
    uuid: str
    managed_server: Any
    model_name: str
    tool_parser: str
    base_url: Optional[str] = None
    created_at: float = field(default_factory=time.time)
    last_accessed: float = field(default_factory=time.time)
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    translator: Any = None


class _ProxyError(Exception):
    def __init__(self, status: int, message: str, kind: str = "invalid_request_error"):
        super().__init__(message)
        self.status = status
        self.message = message
        self.kind = kind


def openai_error(status_code: int, message: str, error_type: str = "invalid_request_error") -> JSONResponse:
    """An error answer in OpenAI's shape."""
    return JSONResponse(
        status_code=status_code,
        content={"error": {"message": message, "type": error_type, "code": status_code}},
    )


def _nodes_of(managed: Any) -> list[dict[str, Any]]:
    state = managed.get_state()
    nodes = state.get("nodes")
    if nodes is None:
        nodes = list(state.get("sequences", {}).values())
    return [node.model_dump() for node in nodes]


@dataclass
class ProxyState:
    """What the proxy's routes share: the backends, the tokenizer and the open sessions."""

    server_manager: ServerManager
    tokenizer: Any
    model_name: str
    session_ttl_s: float
    sessions: dict[str, SessionState] = field(default_factory=dict)

    def select_server(self, base_url: Optional[str]) -> Any:
        """The backend at ``base_url``, else the least busy healthy one (404/503 otherwise)."""
        if base_url is not None:
            try:
                return self.server_manager._server_by_url(base_url)
            except ValueError as exc:
                raise _ProxyError(404, str(exc)) from exc
        chosen = self.server_manager._select(True)
        if chosen is None:
            healthy = [s for s in self.server_manager.servers if s.server_healthy]
            if not healthy:
                raise _ProxyError(503, "no healthy backend server", "server_error")
            chosen = healthy[0]
        return chosen

    def session(self, session_uuid: str) -> SessionState:
        """The open session ``session_uuid`` (404 otherwise); marks it used."""
        session = self.sessions.get(session_uuid)
        if session is None:
            raise _ProxyError(404, f"session {session_uuid} not found")
        session.last_accessed = time.time()
        return session

    def sweep(self) -> None:
        """Drop the sessions idle for longer than ``session_ttl_s``."""
        cutoff = time.time() - self.session_ttl_s
        for key in [k for k, s in self.sessions.items() if s.last_accessed < cutoff]:
            self.sessions.pop(key, None)


async def _run(session: SessionState, call):
    """``call()`` under the session's lock, its failures turned into proxy errors."""
    async with session.lock:
        try:
            return await call()
        except _ProxyError:
            raise
        except ServerUnavailableError as exc:
            raise _ProxyError(503, str(exc), "server_error") from exc
        except NotImplementedError as exc:
            raise _ProxyError(501, str(exc), "not_implemented") from exc
        except (ValueError, TypeError) as exc:
            raise _ProxyError(400, str(exc)) from exc
        except Exception as exc:
            logger.exception("backend call failed")
            raise _ProxyError(502, f"backend call failed: {exc}", "server_error") from exc


def _base_url(server: Any) -> Optional[str]:
    return getattr(getattr(server, "config", None), "base_url", None)


def _proxy(request: Request) -> ProxyState:
    return request.app.state.proxy


#: The proxy's routes (mounted by :func:`create_app`).
router = APIRouter()


@router.get("/health")
async def health(request: Request):
    proxy = _proxy(request)
    servers = proxy.server_manager.servers
    return {
        "status": "ok",
        "model": proxy.model_name,
        "sessions": len(proxy.sessions),
        "servers": len(servers),
        "healthy_servers": sum(1 for s in servers if s.server_healthy),
    }


@router.get("/v1/models")
async def list_models(request: Request):
    model = {
        "id": _proxy(request).model_name,
        "object": "model",
        "created": int(time.time()),
        "owned_by": "atropos",
    }
    return {"object": "list", "data": [model]}


@router.post("/setup")
async def setup(request: Request):
    proxy = _proxy(request)
    try:
        config = ProxyConfig.model_validate(await request.json())
        configs = config.server_configs()
    except (ValidationError, ValueError) as exc:
        raise _ProxyError(400, f"invalid setup document: {exc}") from exc
    if configs:
        proxy.server_manager.servers = ServerManager(configs=configs).servers
    proxy.model_name = config.model_name
    return {"status": "ok", "servers": len(proxy.server_manager.servers), "model_name": config.model_name}


@router.get("/servers")
async def list_servers(request: Request):
    proxy = _proxy(request)
    return {
        "servers": [
            {
                "index": i,
                "base_url": _base_url(s),
                "healthy": bool(getattr(s, "server_healthy", True)),
                "model_name": getattr(getattr(s, "config", None), "model_name", proxy.model_name),
                "server_type": getattr(getattr(s, "config", None), "server_type", "unknown"),
            }
            for i, s in enumerate(proxy.server_manager.servers)
        ]
    }


@router.post("/sessions/create")
async def create_session(body: SessionCreateRequest, request: Request):
    proxy = _proxy(request)
    proxy.sweep()
    server = proxy.select_server(body.base_url)
    if isinstance(server, OpenAIServer):
        managed: Any = DummyManagedServer(
            server=server, tokenizer=proxy.tokenizer, track_tree=body.track_tree
        )
    else:
        managed = ManagedServer(
            server=server, tokenizer=proxy.tokenizer, track_tree=body.track_tree, tool_parser=body.tool_parser
        )
    session = SessionState(
        uuid=str(uuid_lib.uuid4()),
        managed_server=managed,
        model_name=proxy.model_name,
        tool_parser=body.tool_parser,
        base_url=_base_url(server),
    )
    proxy.sessions[session.uuid] = session
    return {
        "uuid": session.uuid,
        "model_name": proxy.model_name,
        "tool_parser": body.tool_parser,
        "base_url": session.base_url,
        "created_at": session.created_at,
    }


@router.get("/sessions")
async def list_sessions(request: Request):
    return {
        "sessions": [
            {
                "uuid": s.uuid,
                "model_name": s.model_name,
                "base_url": s.base_url,
                "created_at": s.created_at,
                "last_accessed": s.last_accessed,
                "num_nodes": len(_nodes_of(s.managed_server)),
            }
            for s in _proxy(request).sessions.values()
        ]
    }


@router.post("/{session_uuid}/v1/chat/completions")
async def chat_completions(session_uuid: str, body: ChatCompletionProxyRequest, request: Request):
    proxy = _proxy(request)
    session = proxy.session(session_uuid)
    if not body.messages:
        raise _ProxyError(400, "messages must not be empty")
    kwargs = body.model_dump(exclude_none=True)
    kwargs["messages"] = [m.model_dump(exclude_none=True) for m in body.messages]
    kwargs.pop("model", None)
    kwargs.pop("stream", None)
    result = await _run(session, lambda: session.managed_server.chat_completion(**kwargs))
    choices = []
    for choice in result.choices:
        message: dict[str, Any] = {"role": choice.message.role, "content": choice.message.content}
        if choice.message.tool_calls:
            message["tool_calls"] = [
                call if isinstance(call, dict) else call.model_dump() for call in choice.message.tool_calls
            ]
        choices.append({"index": choice.index, "message": message, "finish_reason": choice.finish_reason})
    return {
        "id": f"chatcmpl-{uuid_lib.uuid4().hex[:12]}",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": proxy.model_name,
        "choices": choices,
        "nodes": _nodes_of(session.managed_server),
    }


@router.post("/{session_uuid}/v1/completions")
async def completions(session_uuid: str, body: CompletionProxyRequest, request: Request):
    proxy = _proxy(request)
    session = proxy.session(session_uuid)
    kwargs = body.model_dump(exclude_none=True)
    kwargs.pop("model", None)
    kwargs.pop("stream", None)
    result = await _run(session, lambda: session.managed_server.completion(**kwargs))
    return {
        "id": f"cmpl-{uuid_lib.uuid4().hex[:12]}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": proxy.model_name,
        "choices": [
            {"index": c.index, "text": c.text, "finish_reason": c.finish_reason, "logprobs": None}
            for c in result.choices
        ],
        "nodes": _nodes_of(session.managed_server),
    }


@router.post("/{session_uuid}/v1/logprobs")
async def logprobs(session_uuid: str, body: LogprobsProxyRequest, request: Request):
    session = _proxy(request).session(session_uuid)
    kwargs = body.model_dump(exclude_none=True)
    if body.messages is not None:
        kwargs["messages"] = [m.model_dump(exclude_none=True) for m in body.messages]
    if not any(k in kwargs for k in ("messages", "prompt", "input_ids")):
        raise _ProxyError(400, "one of messages, prompt or input_ids is required")
    kwargs.pop("model", None)
    return await _run(session, lambda: session.managed_server.get_logprobs(**kwargs))


@router.post("/{session_uuid}/v1/chat/completions/render")
async def render_prompt(session_uuid: str, body: ChatCompletionProxyRequest, request: Request):
    proxy = _proxy(request)
    session = proxy.session(session_uuid)
    tokenizer = proxy.tokenizer
    messages = [m.model_dump(exclude_none=True) for m in body.messages]
    try:
        if body.tools:
            if session.translator is None:
                from atroposlib.envs.server_handling.tool_call_translator import ToolCallTranslator

                session.translator = ToolCallTranslator(tokenizer=tokenizer, parser_name=session.tool_parser)
            messages = session.translator.convert_messages_for_template(messages)
        template_kwargs: dict[str, Any] = {"tokenize": False, "add_generation_prompt": True}
        if body.tools:
            template_kwargs["tools"] = body.tools
        prompt_text = tokenizer.apply_chat_template(messages, **template_kwargs)
    except Exception as exc:
        raise _ProxyError(400, f"failed to render prompt: {exc}") from exc
    token_ids = list(tokenizer.encode(prompt_text, add_special_tokens=False))
    return {"prompt_text": prompt_text, "token_ids": token_ids, "num_tokens": len(token_ids)}


@router.get("/{session_uuid}/nodes")
async def get_nodes(session_uuid: str, request: Request):
    return {"nodes": _nodes_of(_proxy(request).session(session_uuid).managed_server)}


@router.delete("/{session_uuid}")
async def delete_session(session_uuid: str, request: Request):
    session = _proxy(request).sessions.pop(session_uuid, None)
    if session is None:
        raise _ProxyError(404, f"session {session_uuid} not found")
    session.managed_server.reset()
    return {"status": "deleted", "uuid": session_uuid}


async def _proxy_error(request: Request, exc: _ProxyError):
    return openai_error(exc.status, exc.message, exc.kind)


async def _validation_error(request: Request, exc: RequestValidationError):
    first = exc.errors()[0] if exc.errors() else {}
    where = ".".join(str(p) for p in first.get("loc", ()) if p != "body")
    return openai_error(400, f"invalid request: {where or 'body'}: {first.get('msg', 'malformed')}")


def create_app(
    server_manager: ServerManager, tokenizer: Any, model_name: str = "unknown", session_ttl_s: float = 3600.0
) -> FastAPI:
    """Build the proxy app over ``server_manager``'s backends.

    Args:
        server_manager: the backends (any server types; OpenAI-type ones give placeholder nodes).
        tokenizer: the model's Hugging Face tokenizer (prompt rendering and tokenisation).
        model_name: model name reported in answers.
        session_ttl_s: sessions idle for longer than this are dropped.
    """
    app = FastAPI(title="ManagedServer OpenAI proxy")
    app.state.proxy = ProxyState(server_manager, tokenizer, model_name, session_ttl_s)
    app.add_exception_handler(_ProxyError, _proxy_error)
    app.add_exception_handler(RequestValidationError, _validation_error)
    app.include_router(router)
    return app


def main(argv: Optional[list[str]] = None) -> None:
    """Run the proxy: ``--config servers.json [--host 127.0.0.1] [--port 9100]``."""
    parser = argparse.ArgumentParser(description="OpenAI-compatible proxy over ManagedServer sessions.")
    parser.add_argument(
        "--config", required=True, help="JSON file: {model_name, tokenizer_name?, servers: [...]}"
    )
    parser.add_argument("--port", type=int, default=9100, help="port to listen on (default 9100)")
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--log-level", default="info", help="uvicorn log level")
    args = parser.parse_args(argv)
    try:
        with open(args.config, encoding="utf-8") as handle:
            config = ProxyConfig.model_validate(json.load(handle))
        configs = config.server_configs()
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        print(
            f"managed_server_proxy: error: --config {args.config}: {where}: {first.get('msg')}",
            file=sys.stderr,
        )
        raise SystemExit(2)
    except (OSError, json.JSONDecodeError, ValueError) as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        print(f"managed_server_proxy: error: --config {args.config}: {message}", file=sys.stderr)
        raise SystemExit(2)
    if not configs:
        print("managed_server_proxy: error: the config lists no servers", file=sys.stderr)
        raise SystemExit(2)

    import uvicorn

    from atroposlib.utils.hf_tokenizers import TokenizerLoadError, load_hf_tokenizer

    try:
        tokenizer = load_hf_tokenizer(
            config.tokenizer_name or config.model_name, flag="tokenizer_name in --config"
        )
    except TokenizerLoadError as exc:
        print(f"managed_server_proxy: error: {exc}", file=sys.stderr)
        raise SystemExit(2)
    app = create_app(ServerManager(configs=configs), tokenizer=tokenizer, model_name=config.model_name)
    logger.info("ManagedServer proxy on %s:%d for %d backend(s)", args.host, args.port, len(configs))
    uvicorn.run(app, host=args.host, port=args.port, log_level=args.log_level)


if __name__ == "__main__":
    main()
