"""A scripted OpenAI-compatible inference server for offline tests and benchmarks.

Environments talk to inference servers over HTTP. To test an environment's scoring, its multi-turn
logic or the whole ``serve``/``process`` loop without a GPU, start this server and point the
environment's ``base_url`` at it. Answers are scripted, token ids and logprobs are consistent with a
real tokenizer, and every request is logged for assertions.

Quick start::

    from atroposlib.testing.scripted_server import launch_scripted_server

    def respond(prompt, index):            # prompt: chat messages (list) or prompt text (str)
        return "The answer is 4. #### 4"   # index: the choice number within the request (0..n-1)

    with launch_scripted_server(respond=respond, tokenizer=tiny_model_dir) as server:
        config = APIServerConfig(base_url=server.base_url, model_name="m", server_type="vllm")
        ...                                # run the code under test
        assert server.requests[0]["path"] == "/generate"

Answers come from ``respond(prompt, index) -> str`` or from a fixed list ``responses`` (each choice
takes the next entry, cycling). With a Hugging Face ``tokenizer`` (object or directory), answers are
tokenised with it, finish with its EOS token ("stop"), are cut at ``max_tokens`` ("length") or at a
``stop`` string, and every generated token gets the logprob :func:`scripted_logprob` (token id,
position), so tests can check exact values. Without a tokenizer UTF-8 bytes are the tokens.

Routes (loopback only):

* ``POST /v1/chat/completions`` - OpenAI chat; ``n``, ``max_tokens``, ``stop``, ``logprobs`` /
  ``top_logprobs``, vLLM's ``return_token_ids``.
* ``POST /v1/completions`` - OpenAI completions; the prompt may be text or token ids (or a batch);
  ``logprobs`` (int), ``return_token_ids`` (``token_ids``/``prompt_token_ids`` per choice) and
  vLLM's ``prompt_logprobs``.
* ``POST /generate`` - the token-level contract of atroposlib 0.4.0's vLLM server: ``{"prompt":
  {"prompt_token_ids": [...]} | text, "logprobs": 0, "n", "max_tokens", "prompt_logprobs"?, ...}`` ->
  ``{"text", "prompt", "finish_reasons", "token_ids", "prompt_token_ids", "logprobs"
  (per choice, per position [{id: logprob}]), "prompt_logprobs"?}``. A body with ``input_ids`` or
  ``sampling_params`` is answered in SGLang's shape (``meta_info.output_token_logprobs`` ...).
* ``POST /generate/`` - TRL ``vllm-serve`` shape (``prompts`` -> ``prompt_ids``, ``completion_ids``,
  ``logprobs``).
* ``GET /v1/models``, ``GET /health`` (503 while marked unhealthy).
* ``GET /_scripted/requests`` and ``POST /_scripted/control`` - the request log and the knobs below.

Knobs (``server.control(...)``, also over HTTP): ``fail_next`` (answer the next N generation
requests with HTTP ``fail_status``, default 500), ``healthy`` (health routes answer 503 when False),
``delay_s`` (fixed latency added to every generation request, for benchmarks), ``ignore_n`` (answer
one choice per request whatever ``n`` says), ``generate_route`` (False: ``/generate`` answers 404, as
on ``vllm serve``, which has no such route).

``launch_scripted_server`` runs uvicorn in a background thread of the calling process, or, with
``in_subprocess=True``, as ``python -m atroposlib.testing.scripted_server`` (then ``respond`` must be
an importable ``"module:function"`` string and ``tokenizer`` a directory). Command line::

    python -m atroposlib.testing.scripted_server --port 8123 --tokenizer DIR \\
        [--response TEXT ...] [--respond-fn module:function] [--delay-s 0.05] [--model-name NAME]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import importlib
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any, Optional, Union

import orjson
import requests
from fastapi import FastAPI, Request
from fastapi.responses import Response

from atroposlib.testing.scripted_backend import BadRequest, Respond, ScriptedBackend, scripted_logprob
from atroposlib.utils.processes import stop_process, wait_until_ok


def _json(content: Any, status: int = 200) -> Response:
    return Response(content=orjson.dumps(content), status_code=status, media_type="application/json")


def _error(status: int, message: str) -> Response:
    kind = "invalid_request_error" if status < 500 else "server_error"
    return _json({"error": {"message": message, "type": kind, "code": status}}, status)


def create_app(backend: ScriptedBackend) -> FastAPI:
    """The FastAPI app serving ``backend`` (thin routes over :class:`ScriptedBackend`)."""
    app = FastAPI(title="scripted inference server")

    async def run(path: str, request: Request, handler: Callable[[dict], Any]):
        try:
            body = await request.json()
        except ValueError:
            return _error(400, "body must be JSON")
        if not isinstance(body, dict):
            return _error(400, "body must be a JSON object")
        backend.log(path, body)
        status = backend.take_failure()
        if status is not None:
            return _error(status, f"scripted failure ({status})")
        if backend.delay_s > 0:
            await asyncio.sleep(backend.delay_s)
        try:
            return _json(handler(body))
        except (BadRequest, ValueError, TypeError) as exc:
            return _error(400, str(exc))

    @app.post("/v1/chat/completions")
    async def chat(request: Request):
        return await run("/v1/chat/completions", request, backend.chat_completions)

    @app.post("/v1/completions")
    async def completions(request: Request):
        return await run("/v1/completions", request, backend.completions)

    @app.post("/generate")
    async def generate(request: Request):
        if not backend.generate_route_enabled:
            return _error(404, "Not Found")
        return await run("/generate", request, backend.generate_route)

    @app.post("/generate/")
    async def trl_generate(request: Request):
        return await run("/generate/", request, backend.trl_generate)

    def health_answer():
        return {"status": "ok"} if backend.healthy else _error(503, "scripted server marked unhealthy")

    @app.get("/health")
    async def health():
        return health_answer()

    @app.get("/health/")
    async def trl_health():
        return health_answer()

    @app.get("/v1/models")
    async def models():
        if not backend.healthy:
            return _error(503, "scripted server marked unhealthy")
        return {
            "object": "list",
            "data": [{"id": backend.model_name, "object": "model", "created": 0, "owned_by": "scripted"}],
        }

    @app.get("/_scripted/requests")
    async def request_log():
        return {"requests": list(backend.requests)}

    @app.post("/_scripted/control")
    async def control(request: Request):
        body = await request.json()
        try:
            backend.control(**body)
        except TypeError as exc:
            return _error(400, str(exc))
        return {"status": "ok"}

    return app


class ScriptedServer:
    """A running scripted server (see :func:`launch_scripted_server`)."""

    def __init__(self, host: str, port: int, backend: Optional[ScriptedBackend] = None):
        self.host = host
        self.port = port
        self.backend = backend
        self._uvicorn = None
        self._thread: Optional[threading.Thread] = None
        self._proc: Optional[subprocess.Popen] = None

    @property
    def root_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    @property
    def base_url(self) -> str:
        """OpenAI-style base URL (``.../v1``)."""
        return f"{self.root_url}/v1"

    @property
    def requests(self) -> list[dict[str, Any]]:
        """Requests received so far, oldest first: ``{"path", "body", "time"}``."""
        if self.backend is not None:
            return list(self.backend.requests)
        return requests.get(f"{self.root_url}/_scripted/requests", timeout=10).json()["requests"]

    def control(self, **knobs: Any) -> None:
        """See :meth:`ScriptedBackend.control` (``fail_next``, ``fail_status``, ``healthy``, ``delay_s``)."""
        if self.backend is not None:
            self.backend.control(**knobs)
        else:
            requests.post(f"{self.root_url}/_scripted/control", json=knobs, timeout=10).raise_for_status()

    # -- lifecycle ---------------------------------------------------------------------------------
    def start_thread(self, sock: socket.socket, timeout: float = 20.0) -> ScriptedServer:
        import uvicorn

        config = uvicorn.Config(
            create_app(self.backend), log_level="warning", lifespan="off", access_log=False
        )
        self._uvicorn = uvicorn.Server(config)
        self._thread = threading.Thread(
            target=self._uvicorn.run, kwargs={"sockets": [sock]}, name="scripted-server", daemon=True
        )
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._uvicorn.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("scripted server thread did not start")
            time.sleep(0.01)
        return self

    def start_process(
        self, argv: list[str], log_path: Optional[Path], timeout: float = 60.0
    ) -> ScriptedServer:
        log = open(log_path, "ab") if log_path else subprocess.DEVNULL  # noqa: SIM115 - owned by the child
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "atroposlib.testing.scripted_server", *argv],
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        finally:
            if log is not subprocess.DEVNULL:
                log.close()
        wait_until_ok(
            self._proc,
            f"{self.root_url}/health",
            name="scripted server",
            timeout=timeout,
            on_failure=self.stop,
        )
        return self

    def stop(self) -> None:
        """Stop the server (thread: graceful; subprocess: SIGTERM to its own pid, then SIGKILL)."""
        if self._uvicorn is not None:
            self._uvicorn.should_exit = True
            if self._thread is not None:
                self._thread.join(timeout=10)
            self._uvicorn = None
        stop_process(self._proc)


def _free_port(host: str) -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind((host, 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def launch_scripted_server(
    respond: Union[Respond, str, None] = None,
    responses: Optional[Sequence[str]] = None,
    tokenizer: Any = None,
    model_name: str = "scripted-model",
    delay_s: float = 0.0,
    *,
    in_subprocess: bool = False,
    port: Optional[int] = None,
    host: str = "127.0.0.1",
    log_path: Union[str, Path, None] = None,
    trl_logprobs: bool = True,
) -> Iterator[ScriptedServer]:
    """Run a scripted server for the ``with`` block and yield it (``.base_url``, ``.requests``).

    Args:
        respond: ``respond(prompt_or_messages, index) -> str``, or ``"module:function"`` naming one.
        responses: fixed answers, used in order and cycled.
        tokenizer: Hugging Face tokenizer object or directory (a directory in subprocess mode).
        model_name: reported model name.
        delay_s: fixed latency per generation request, seconds.
        in_subprocess: run as a separate process (its own GIL; use for benchmarks).
        port: port to listen on (default: a free one).
        host: address to bind (loopback by default).
        log_path: subprocess output file.
        trl_logprobs: whether ``/generate/`` (TRL shape) includes logprobs.
    """
    if in_subprocess:
        if callable(respond):
            raise ValueError("in_subprocess needs respond as a 'module:function' string (or responses)")
        if tokenizer is not None and not isinstance(tokenizer, (str, Path)):
            raise ValueError("in_subprocess needs tokenizer as a directory path")
        port = port or _free_port(host)
        argv = ["--host", host, "--port", str(port), "--model-name", model_name, "--delay-s", str(delay_s)]
        if tokenizer is not None:
            argv += ["--tokenizer", str(tokenizer)]
        if respond is not None:
            argv += ["--respond-fn", str(respond)]
        for text in responses or []:
            argv += ["--response", text]
        if not trl_logprobs:
            argv.append("--no-trl-logprobs")
        server = ScriptedServer(host, port).start_process(argv, Path(log_path) if log_path else None)
    else:
        backend = ScriptedBackend(
            respond=_resolve_respond(respond),
            responses=responses,
            tokenizer=tokenizer,
            model_name=model_name,
            delay_s=delay_s,
            trl_logprobs=trl_logprobs,
        )
        sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port or 0))
        server = ScriptedServer(host, sock.getsockname()[1], backend).start_thread(sock)
    try:
        yield server
    finally:
        server.stop()


def _resolve_respond(respond: Union[Respond, str, None]) -> Optional[Respond]:
    if respond is None or callable(respond):
        return respond
    module_name, _, attr = str(respond).partition(":")
    if not module_name or not attr:
        raise ValueError(f"respond must be 'module:function', got {respond!r}")
    function = getattr(importlib.import_module(module_name), attr)
    if not callable(function):
        raise ValueError(f"{respond!r} is not callable")
    return function


def main(argv: Optional[list[str]] = None) -> None:
    parser = argparse.ArgumentParser(
        description="Scripted OpenAI-compatible inference server (tests, benchmarks)."
    )
    parser.add_argument("--host", default="127.0.0.1", help="address to bind (default 127.0.0.1)")
    parser.add_argument("--port", type=int, default=8123, help="port (default 8123; 0 = a free one)")
    parser.add_argument(
        "--tokenizer", default=None, help="Hugging Face tokenizer directory (default: UTF-8 bytes)"
    )
    parser.add_argument(
        "--response", action="append", default=None, help="a fixed answer (repeatable; cycled)"
    )
    parser.add_argument("--respond-fn", default=None, help="'module:function' computing answers")
    parser.add_argument(
        "--delay-s", type=float, default=0.0, help="fixed latency per generation request, seconds"
    )
    parser.add_argument("--model-name", default="scripted-model", help="reported model name")
    parser.add_argument(
        "--no-trl-logprobs", action="store_true", help="omit logprobs from /generate/ (old TRL)"
    )
    args = parser.parse_args(argv)
    if args.response and args.respond_fn:
        parser.error("use either --response or --respond-fn")
    try:
        backend = ScriptedBackend(
            respond=_resolve_respond(args.respond_fn),
            responses=args.response,
            tokenizer=args.tokenizer,
            model_name=args.model_name,
            delay_s=args.delay_s,
            trl_logprobs=not args.no_trl_logprobs,
        )
    except (ImportError, AttributeError, ValueError, OSError) as exc:
        parser.exit(2, f"scripted_server: error: {exc}\n")

    import uvicorn

    family = socket.AF_INET6 if ":" in args.host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((args.host, args.port))
    except OSError as exc:
        sock.close()
        parser.exit(
            2,
            f"scripted_server: error: cannot listen on {args.host}:{args.port} ({exc.strerror}); pick another --port\n",
        )
    sock.listen(2048)  # connections made right after the line below wait for the server, not fail
    port = sock.getsockname()[1]
    host = f"[{args.host}]" if family == socket.AF_INET6 else args.host
    if args.respond_fn:
        answers = args.respond_fn
    elif args.response:
        answers = f"{len(args.response)} fixed answer(s)"
    else:
        answers = "always the same sentence"
    print(
        f"scripted_server: listening on http://{host}:{port}/v1 (model name {args.model_name!r}, "
        f"answers: {answers}; token ids: {args.tokenizer or 'UTF-8 bytes (no --tokenizer)'}); Ctrl-C stops it",
        flush=True,
    )
    config = uvicorn.Config(create_app(backend), log_level="warning", access_log=False)
    uvicorn.Server(config).run(sockets=[sock])


__all__ = [
    "ScriptedBackend",
    "ScriptedServer",
    "create_app",
    "launch_scripted_server",
    "main",
    "scripted_logprob",
]


if __name__ == "__main__":
    main()
