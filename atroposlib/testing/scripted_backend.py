"""The answering side of the scripted inference server: scripted texts as tokens, logprobs and response bodies.

:class:`ScriptedBackend` turns a request body of each supported route (OpenAI chat and completions, vLLM's
``/generate``, SGLang's ``/generate``, TRL's ``/generate/``) into the answer body, without any HTTP: the routes
of :mod:`atroposlib.testing.scripted_server` call it. Texts come from ``respond(prompt, index)`` or a fixed
list; with a Hugging Face tokenizer they are tokenised with it, otherwise UTF-8 bytes are the tokens
(:class:`ByteTokenizer`). Each generated token gets the logprob :func:`scripted_logprob`.
"""

from __future__ import annotations

import collections
import itertools
import threading
import time
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

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
        (404 when False, as on ``vllm serve``, which has no such route)."""
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
            "usage": usage(len(prompt_ids), gens),
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
            "usage": usage(prompt_total, all_gens),
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


def usage(prompt_tokens: int, gens: list[Generation]) -> dict[str, int]:
    completion = sum(len(g.token_ids) for g in gens)
    return {
        "prompt_tokens": prompt_tokens,
        "completion_tokens": completion,
        "total_tokens": prompt_tokens + completion,
    }


__all__ = [
    "BadRequest",
    "ByteTokenizer",
    "Generation",
    "Respond",
    "ScriptedBackend",
    "load_tokenizer",
    "scripted_logprob",
    "usage",
]
