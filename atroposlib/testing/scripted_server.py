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
on a plain ``vllm serve``).

``launch_scripted_server`` runs uvicorn in a background thread of the calling process, or, with
``in_subprocess=True``, as ``python -m atroposlib.testing.scripted_server`` (then ``respond`` must be
an importable ``"module:function"`` string and ``tokenizer`` a directory). Command line::

    python -m atroposlib.testing.scripted_server --port 8123 --tokenizer DIR \\
        [--response TEXT ...] [--respond-fn module:function] [--delay-s 0.05] [--model-name NAME]
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import importlib
import itertools
import os
import signal
import socket
import subprocess
import sys
import threading
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Union

import orjson
import requests
from fastapi import FastAPI, Request
from fastapi.responses import Response

Respond = Callable[[Any, int], str]


def scripted_logprob(token_id: int, position: int) -> float:
    """The logprob the scripted server reports for ``token_id`` at output ``position`` (in (-1, 0))."""
    return -(((int(token_id) * 7 + position * 13) % 97) + 1) / 100.0


class ByteTokenizer:
    """Fallback tokenizer: UTF-8 bytes are tokens 0..255, 256 is the end-of-text token."""

    eos_token_id = 256
    all_special_ids = [256]

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        return list(text.encode("utf-8"))

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        text = bytes(t for t in ids if 0 <= t < 256).decode("utf-8", errors="replace")
        if not skip_special_tokens and 256 in ids:
            text += "<|end|>"
        return text

    def render_chat(self, messages: list[dict]) -> str:
        return "".join(f"{m.get('role')}: {m.get('content') or ''}\n" for m in messages) + "assistant: "


def load_tokenizer(tokenizer: Any) -> Any:
    """A tokenizer object from an object, a directory/name (``AutoTokenizer``), or None (bytes)."""
    if tokenizer is None:
        return ByteTokenizer()
    if isinstance(tokenizer, (str, Path)):
        from atroposlib.utils.hf_tokenizers import load_hf_tokenizer

        return load_hf_tokenizer(str(tokenizer), flag="--tokenizer")
    return tokenizer


@dataclass
class Generation:
    """One scripted choice."""

    text: str
    token_ids: list[int]
    logprobs: list[float]
    finish_reason: str


class BadRequest(ValueError):
    """The request body is invalid (answered with HTTP 400)."""


class ScriptedBackend:
    """The server's state and response logic, independent of HTTP.

    Args:
        respond: ``respond(prompt_or_messages, index) -> str``.
        responses: fixed answers, consumed in order and cycled (exclusive with ``respond``).
        tokenizer: tokenizer object, directory, or None (bytes).
        model_name: reported model name.
        delay_s: fixed latency added to every generation request, seconds.
        max_log: how many requests the log keeps (oldest dropped first).
    """

    def __init__(
        self,
        respond: Optional[Respond] = None,
        responses: Optional[Sequence[str]] = None,
        tokenizer: Any = None,
        model_name: str = "scripted-model",
        delay_s: float = 0.0,
        max_log: int = 10000,
        trl_logprobs: bool = True,
    ):
        if respond is not None and responses:
            raise ValueError("pass either respond or responses, not both")
        self._respond = respond
        self._responses = list(responses) if responses else None
        self._counter = itertools.count()
        self.tokenizer = load_tokenizer(tokenizer)
        self.model_name = model_name
        self.delay_s = float(delay_s)
        self.trl_logprobs = trl_logprobs
        self.healthy = True
        self.ignore_n = False
        self.generate_route_enabled = True
        self.requests: collections.deque[dict[str, Any]] = collections.deque(maxlen=max_log)
        self._failures: collections.deque[int] = collections.deque()
        self._lock = threading.Lock()

    # -- knobs and log ---------------------------------------------------------------------------
    def control(
        self,
        fail_next: int = 0,
        fail_status: int = 500,
        healthy: Optional[bool] = None,
        delay_s: Optional[float] = None,
        ignore_n: Optional[bool] = None,
        generate_route: Optional[bool] = None,
    ) -> None:
        """Queue ``fail_next`` failures with ``fail_status``; set health, latency, whether ``n`` is
        ignored (one choice per request, like some providers) and whether ``POST /generate`` exists
        (404 when False, like a plain ``vllm serve``)."""
        with self._lock:
            self._failures.extend([int(fail_status)] * int(fail_next))
        if healthy is not None:
            self.healthy = bool(healthy)
        if delay_s is not None:
            self.delay_s = float(delay_s)
        if ignore_n is not None:
            self.ignore_n = bool(ignore_n)
        if generate_route is not None:
            self.generate_route_enabled = bool(generate_route)

    def take_failure(self) -> Optional[int]:
        with self._lock:
            return self._failures.popleft() if self._failures else None

    def log(self, path: str, body: Any) -> None:
        self.requests.append({"path": path, "body": body, "time": time.time()})

    # -- text and tokens ---------------------------------------------------------------------------
    def text_for(self, prompt: Any, index: int) -> str:
        if self._respond is not None:
            return str(self._respond(prompt, index))
        if self._responses:
            return self._responses[next(self._counter) % len(self._responses)]
        return "This is a scripted response."

    def encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        ids = self.tokenizer.encode(text, add_special_tokens=add_special_tokens)
        return list(ids["input_ids"] if isinstance(ids, dict) else ids)

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=skip_special_tokens)

    def render_chat(self, messages: list[dict]) -> str:
        if isinstance(self.tokenizer, ByteTokenizer):
            return self.tokenizer.render_chat(messages)
        if getattr(self.tokenizer, "chat_template", None):
            return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
        return "".join(f"{m.get('role')}: {m.get('content') or ''}\n" for m in messages)

    def token_text(self, token_id: int) -> str:
        return self.decode([token_id], skip_special_tokens=False)

    def generate(self, prompt: Any, n: int, max_tokens: Optional[int], stop: Any = None) -> list[Generation]:
        """``n`` scripted choices for ``prompt`` (messages or text)."""
        stops = [stop] if isinstance(stop, str) else list(stop or [])
        eos = getattr(self.tokenizer, "eos_token_id", None)
        out = []
        for index in range(n):
            text = self.text_for(prompt, index)
            stopped_by_string = False
            for s in stops:
                if s and s in text:
                    text = text[: text.index(s)]
                    stopped_by_string = True
            ids = self.encode(text)
            if eos is not None and not stopped_by_string:
                ids.append(int(eos))
            finish = "stop"
            if max_tokens is not None and len(ids) > int(max_tokens):
                ids = ids[: int(max_tokens)]
                finish = "length"
            out.append(
                Generation(
                    text=self.decode(ids, skip_special_tokens=True),
                    token_ids=ids,
                    logprobs=[scripted_logprob(t, j) for j, t in enumerate(ids)],
                    finish_reason=finish,
                )
            )
        return out

    def prompt_logprobs(self, prompt_ids: list[int], k: int) -> list[Optional[dict[str, Any]]]:
        """vLLM-style prompt logprobs: None for the first position, then ``{id: {logprob, rank, decoded_token}}``."""
        result: list[Optional[dict[str, Any]]] = [None]
        for pos in range(1, len(prompt_ids)):
            entry = {}
            for j in range(max(1, k)):
                tid = prompt_ids[pos] + j
                entry[str(tid)] = {
                    "logprob": scripted_logprob(tid, pos) - j,
                    "rank": j + 1,
                    "decoded_token": "",
                }
            result.append(entry)
        return result

    # -- request handlers (pure: body -> answer dict) ----------------------------------------------
    def _n(self, body: dict) -> int:
        n = body.get("n")
        n = 1 if n is None else n
        if not isinstance(n, int) or isinstance(n, bool) or n < 1:
            raise BadRequest(f"n must be a positive integer, got {n!r}")
        return 1 if self.ignore_n else n

    @staticmethod
    def _max_tokens(body: dict) -> Optional[int]:
        value = body.get("max_tokens", body.get("max_completion_tokens"))
        if value is not None and (not isinstance(value, int) or value < 0):
            raise BadRequest(f"max_tokens must be a non-negative integer, got {value!r}")
        return value

    def chat_completions(self, body: dict) -> dict:
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            raise BadRequest("messages must be a non-empty list")
        n = self._n(body)
        prompt_ids = self.encode(self.render_chat(messages), add_special_tokens=False)
        gens = self.generate(messages, n, self._max_tokens(body), body.get("stop"))
        choices = []
        for i, g in enumerate(gens):
            choice: dict[str, Any] = {
                "index": i,
                "message": {"role": "assistant", "content": g.text},
                "finish_reason": g.finish_reason,
                "logprobs": None,
            }
            if body.get("logprobs"):
                choice["logprobs"] = {
                    "content": [
                        {"token": self.token_text(t), "logprob": lp, "bytes": None, "top_logprobs": []}
                        for t, lp in zip(g.token_ids, g.logprobs, strict=True)
                    ]
                }
            if body.get("return_token_ids"):
                choice["token_ids"] = g.token_ids
            choices.append(choice)
        answer = {
            "id": f"chatcmpl-{uuid.uuid4().hex[:12]}",
            "object": "chat.completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": choices,
            "usage": _usage(len(prompt_ids), gens),
        }
        if body.get("return_token_ids"):
            answer["prompt_token_ids"] = prompt_ids
        return answer

    def _prompts(self, prompt: Any) -> list[tuple[str, list[int]]]:
        """``(text, ids)`` per prompt of a completions request (text, ids, or a batch of either)."""
        if isinstance(prompt, str):
            return [(prompt, self.encode(prompt, add_special_tokens=True))]
        if isinstance(prompt, list) and prompt and all(isinstance(t, int) for t in prompt):
            return [(self.decode(prompt, skip_special_tokens=False), list(prompt))]
        if isinstance(prompt, list) and prompt:
            return [item for p in prompt for item in self._prompts(p)]
        raise BadRequest("prompt must be text, a list of token ids, or a non-empty batch of those")

    def completions(self, body: dict) -> dict:
        if "prompt" not in body:
            raise BadRequest("prompt is required")
        n = self._n(body)
        max_tokens = self._max_tokens(body)
        want_logprobs = body.get("logprobs")
        prompt_lp = body.get("prompt_logprobs")
        choices = []
        prompt_total = 0
        all_gens: list[Generation] = []
        for p_index, (text, ids) in enumerate(self._prompts(body["prompt"])):
            prompt_total += len(ids)
            gens = self.generate(text, n, max_tokens, body.get("stop"))
            all_gens.extend(gens)
            for i, g in enumerate(gens):
                choice: dict[str, Any] = {
                    "index": p_index * n + i,
                    "text": g.text,
                    "finish_reason": g.finish_reason,
                    "logprobs": None,
                }
                if want_logprobs is not None and want_logprobs is not False:
                    tokens = [self.token_text(t) for t in g.token_ids]
                    offsets, pos = [], len(text)
                    for tok in tokens:
                        offsets.append(pos)
                        pos += len(tok)
                    top = (
                        [{tok: lp} for tok, lp in zip(tokens, g.logprobs, strict=True)]
                        if isinstance(want_logprobs, int) and want_logprobs > 0
                        else None
                    )
                    choice["logprobs"] = {
                        "tokens": tokens,
                        "token_logprobs": g.logprobs,
                        "top_logprobs": top,
                        "text_offset": offsets,
                    }
                if body.get("return_token_ids"):
                    choice["token_ids"] = g.token_ids
                    choice["prompt_token_ids"] = ids
                if prompt_lp is not None:
                    choice["prompt_logprobs"] = self.prompt_logprobs(ids, int(prompt_lp))
                choices.append(choice)
        return {
            "id": f"cmpl-{uuid.uuid4().hex[:12]}",
            "object": "text_completion",
            "created": int(time.time()),
            "model": self.model_name,
            "choices": choices,
            "usage": _usage(prompt_total, all_gens),
        }

    def generate_route(self, body: dict) -> Any:
        """``POST /generate``: the vLLM token-level contract, or SGLang's shape for SGLang bodies."""
        if "input_ids" in body or "sampling_params" in body:
            return self._sglang_generate(body)
        prompt = body.get("prompt")
        if isinstance(prompt, dict):
            ids = prompt.get("prompt_token_ids")
            if not isinstance(ids, list) or not all(isinstance(t, int) for t in ids):
                raise BadRequest("prompt.prompt_token_ids must be a list of token ids")
            text = self.decode(ids, skip_special_tokens=False)
        elif isinstance(prompt, str):
            text, ids = prompt, self.encode(prompt, add_special_tokens=True)
        else:
            raise BadRequest("prompt must be {'prompt_token_ids': [...]} or text")
        gens = self.generate(text, self._n(body), self._max_tokens(body), body.get("stop"))
        answer: dict[str, Any] = {
            "text": [g.text for g in gens],
            "prompt": text,
            "finish_reasons": [g.finish_reason for g in gens],
            "prompt_token_ids": ids,
            "token_ids": [g.token_ids for g in gens],
        }
        if body.get("logprobs") is not None:
            answer["logprobs"] = [
                [[{str(t): lp}] for t, lp in zip(g.token_ids, g.logprobs, strict=True)] for g in gens
            ]
        if body.get("prompt_logprobs") is not None:
            answer["prompt_logprobs"] = [
                None if entry is None else {k: v["logprob"] for k, v in entry.items()}
                for entry in self.prompt_logprobs(ids, int(body["prompt_logprobs"]))
            ]
        return answer

    def _sglang_generate(self, body: dict) -> Any:
        ids = body.get("input_ids")
        if not isinstance(ids, list) or not all(isinstance(t, int) for t in ids):
            raise BadRequest("input_ids must be a list of token ids")
        params = body.get("sampling_params") or {}
        text = self.decode(ids, skip_special_tokens=False)
        gens = self.generate(text, self._n(params), params.get("max_new_tokens"), params.get("stop"))
        items = []
        for g in gens:
            meta: dict[str, Any] = {
                "finish_reason": {"type": g.finish_reason},
                "prompt_tokens": len(ids),
                "completion_tokens": len(g.token_ids),
            }
            if body.get("return_logprob"):
                meta["output_token_logprobs"] = [
                    [lp, t, None] for t, lp in zip(g.token_ids, g.logprobs, strict=True)
                ]
                k = int(body.get("top_logprobs_num") or 0)
                if k:
                    meta["input_top_logprobs"] = [
                        None
                        if entry is None
                        else [[v["logprob"], int(tid), None] for tid, v in entry.items()]
                        for entry in self.prompt_logprobs(ids, k)
                    ]
            items.append({"text": g.text, "meta_info": meta})
        return items[0] if len(items) == 1 else items

    def trl_generate(self, body: dict) -> dict:
        prompts = body.get("prompts")
        if not isinstance(prompts, list) or not all(isinstance(p, str) for p in prompts):
            raise BadRequest("prompts must be a list of strings")
        n = self._n(body)
        prompt_ids, completion_ids, logprobs = [], [], []
        for prompt in prompts:
            ids = self.encode(prompt, add_special_tokens=True)
            for g in self.generate(prompt, n, self._max_tokens(body) or 16):
                prompt_ids.append(ids)
                completion_ids.append(g.token_ids)
                logprobs.append(g.logprobs)
        answer: dict[str, Any] = {"completion_ids": completion_ids}
        if self.trl_logprobs:
            answer.update({"prompt_ids": prompt_ids, "logprobs": logprobs})
        return answer


def _usage(prompt_tokens: int, gens: list[Generation]) -> dict[str, int]:
    completion = sum(len(g.token_ids) for g in gens)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": prompt_tokens + completion,
    }


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
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self._proc.poll() is not None:
                raise RuntimeError(f"scripted server exited with {self._proc.returncode}")
            try:
                if requests.get(f"{self.root_url}/health", timeout=1).status_code == 200:
                    return self
            except requests.RequestException:
                pass
            time.sleep(0.1)
        self.stop()
        raise RuntimeError(f"scripted server did not start within {timeout} s")

    def stop(self) -> None:
        """Stop the server (thread: graceful; subprocess: SIGTERM to its own pid, then SIGKILL)."""
        if self._uvicorn is not None:
            self._uvicorn.should_exit = True
            if self._thread is not None:
                self._thread.join(timeout=10)
            self._uvicorn = None
        if self._proc is not None and self._proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self._proc.pid, signal.SIGTERM)
            try:
                self._proc.wait(10)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(self._proc.pid, signal.SIGKILL)
                self._proc.wait(10)


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


if __name__ == "__main__":
    main()
