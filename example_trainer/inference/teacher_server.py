"""A teacher for on-policy distillation on a CPU: a Hugging Face model's top-k prompt logprobs behind an
OpenAI-compatible ``/v1/completions`` (echo with logprobs), the route teacher-distillation environments
call on any OpenAI-compatible server (``teacher_logprob_route: echo``)::

    python -m example_trainer.inference.teacher_server --model DIR --port 9003 [--torch-threads 1] [--api-key KEY]

* ``GET /health``: 200 once the model is loaded; ``GET /v1/models``: the served model name.
* ``POST /v1/completions`` with ``echo: true``: ``prompt`` is a list of token ids (or a string, tokenized
  without special tokens); ``logprobs: k`` (0-20) top entries per position; ``max_tokens`` 0 or 1 (1 adds
  one greedy token, as a server that generates would). The answer is OpenAI's text-completion object:
  ``choices[0].logprobs`` has ``tokens``, ``token_logprobs`` (``null`` at position 0) and ``top_logprobs``
  (``{token: logprob}`` per position; keys ``token_id:N`` with ``return_tokens_as_token_ids``, as vLLM
  writes them). Logprobs are the model's raw log-softmax in float32.

Anything else (no ``echo``, ``max_tokens`` > 1, ``n`` > 1, streaming) is refused with a 400 naming it: this
server scores, it does not generate. One request runs at a time (the model is small; requests queue).
"""

from __future__ import annotations

import argparse
import asyncio
import logging
import threading
import time
import uuid
from collections.abc import Sequence
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from example_trainer.inference.routes.errors import ApiError, api_error_handler, json_body

logger = logging.getLogger("atropos-teacher-server")

#: The most top entries per position OpenAI's completions API allows.
MAX_LOGPROBS = 20


class ScoringRequest(BaseModel):
    """The ``/v1/completions`` body this server honours (OpenAI's names)."""

    model_config = ConfigDict(extra="ignore")

    model: str | None = None
    prompt: list[int] | str
    echo: bool = False
    logprobs: int | None = Field(None, ge=0, le=MAX_LOGPROBS)
    max_tokens: int = Field(16, ge=0)
    n: int = Field(1, ge=1)
    stream: bool = False
    return_tokens_as_token_ids: bool = False


class Scorer:
    """The model (float32, eval mode) and the one lock its forward passes take turns on."""

    def __init__(self, model_dir: str) -> None:
        from example_trainer.demo.heldout_eval import load_causal_lm

        self.model, self.tokenizer = load_causal_lm(model_dir)
        self.vocab_size = int(self.model.config.vocab_size)
        self.lock = threading.Lock()

    def score(self, ids: list[int], top_k: int, generate: bool) -> tuple[list[int], list[Any], list[Any]]:
        """``(tokens, token_logprobs, top)``: per position of ``ids`` (plus one greedy token when
        ``generate``) the logprob of the token there (None at 0) and the top ``top_k`` ``(id, logprob)``."""
        import torch

        with self.lock, torch.no_grad():
            logits = self.model(torch.tensor([ids])).logits[0].float()  # [L, V]
            logp = torch.log_softmax(logits, dim=-1)
        tokens = list(ids)
        if generate:
            tokens.append(int(logp[-1].argmax()))
        # position p is predicted by the logits at p - 1
        predicted = logp[: len(tokens) - 1]
        targets = torch.tensor(tokens[1:])
        token_lps = [None] + predicted.gather(1, targets.unsqueeze(1)).squeeze(1).tolist()
        top: list[Any] = [None]
        if top_k > 0:
            values, indices = predicted.topk(top_k, dim=-1)
            top += [
                list(zip(i, v, strict=True)) for i, v in zip(indices.tolist(), values.tolist(), strict=True)
            ]
        else:
            top += [[] for _ in range(len(tokens) - 1)]
        return tokens, token_lps, top


def completion_body(request: ScoringRequest, scorer: Scorer, served_name: str) -> dict[str, Any]:
    """The OpenAI text-completion answer to one scoring request; ``ApiError(400)`` for what is refused."""
    if request.stream:
        raise ApiError(400, "stream: this server answers scoring requests only, not streams")
    if not request.echo:
        raise ApiError(400, "echo: must be true (this server scores prompts, it does not generate)")
    if request.max_tokens > 1 or request.n != 1:
        raise ApiError(
            400, "max_tokens must be 0 or 1 and n 1 (this server scores prompts, it does not generate)"
        )
    ids = request.prompt
    if isinstance(ids, str):
        ids = list(scorer.tokenizer(ids, add_special_tokens=False)["input_ids"])
    if not ids:
        raise ApiError(400, "prompt: empty")
    bad = [t for t in ids if not 0 <= t < scorer.vocab_size]
    if bad:
        raise ApiError(
            400, f"prompt: token id {bad[0]} is outside the vocabulary (0..{scorer.vocab_size - 1})"
        )
    top_k = request.logprobs or 0
    tokens, token_lps, top = scorer.score(ids, top_k, generate=request.max_tokens == 1)

    def name(tid: int) -> str:
        return f"token_id:{tid}" if request.return_tokens_as_token_ids else scorer.tokenizer.decode([tid])

    logprobs = None
    if request.logprobs is not None:
        logprobs = {
            "tokens": [name(t) for t in tokens],
            "token_logprobs": token_lps,
            "top_logprobs": [None if row is None else {name(i): v for i, v in row} for row in top],
            "text_offset": [0] * len(tokens),
        }
    text = scorer.tokenizer.decode(tokens[len(ids) :]) if request.max_tokens == 1 else ""
    return {
        "id": f"cmpl-{uuid.uuid4().hex}",
        "object": "text_completion",
        "created": int(time.time()),
        "model": served_name,
        "choices": [{"index": 0, "text": text, "logprobs": logprobs, "finish_reason": "length"}],
        "usage": {"prompt_tokens": len(ids), "completion_tokens": len(tokens) - len(ids),
                  "total_tokens": len(tokens)},
    }  # fmt: skip


def build_app(scorer: Scorer, served_name: str, api_key: str | None) -> FastAPI:
    """The FastAPI app serving ``scorer``."""
    app = FastAPI(title="atroposlib teacher scoring server")
    app.add_exception_handler(ApiError, api_error_handler)

    @app.middleware("http")
    async def _auth(request: Request, call_next: Any) -> Response:
        if api_key and request.url.path != "/health":
            if request.headers.get("authorization") != f"Bearer {api_key}":
                return await api_error_handler(request, ApiError(401, "unauthorized"))
        return await call_next(request)

    @app.get("/health")
    async def health() -> Response:
        return Response(status_code=200)

    @app.get("/v1/models")
    async def models() -> dict[str, Any]:
        return {"object": "list", "data": [{"id": served_name, "object": "model", "owned_by": "atroposlib"}]}

    @app.post("/v1/completions")
    async def completions(request: Request) -> JSONResponse:
        try:
            body = ScoringRequest.model_validate(await json_body(request))
        except ValidationError as exc:
            err = exc.errors()[0]
            raise ApiError(400, f"{'.'.join(str(p) for p in err['loc']) or 'body'}: {err['msg']}") from None
        return JSONResponse(await asyncio.to_thread(completion_body, body, scorer, served_name))

    return app


def make_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m example_trainer.inference.teacher_server",
        description="Serve a Hugging Face model's top-k prompt logprobs (OpenAI /v1/completions with echo).",
    )
    parser.add_argument("--model", required=True, help="local model directory")
    parser.add_argument("--served-model-name", default=None, help="name in /v1/models (default: --model)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=9003)
    parser.add_argument("--torch-threads", type=int, default=1)
    parser.add_argument("--api-key", default=None, help="bearer token required on every route but /health")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    args = make_parser().parse_args(argv)
    import torch
    import uvicorn

    torch.set_num_threads(args.torch_threads)
    logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s: %(message)s")
    try:
        scorer = Scorer(args.model)
    except OSError as exc:
        print(f"{make_parser().prog}: error: cannot load {args.model}: {exc}", flush=True)
        return 1
    app = build_app(scorer, args.served_model_name or args.model, args.api_key)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
