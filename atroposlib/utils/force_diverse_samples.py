"""Sample completions that start with different first tokens, to widen a group's exploration."""

from __future__ import annotations

import asyncio
import logging
import math
import random
from typing import Any

logger = logging.getLogger(__name__)

TOP_LOGPROBS = 20
# vLLM/SGLang chat extension: continue the trailing assistant message instead of opening a new turn.
CONTINUE_FINAL_MESSAGE = {"continue_final_message": True, "add_generation_prompt": False}


def _field(obj: Any, name: str) -> Any:
    return obj.get(name) if isinstance(obj, dict) else getattr(obj, name)


def first_token_candidates(completion: Any) -> list[tuple[str, float]]:
    """``(token, logprob)`` pairs of the first generated token's ``top_logprobs`` in a chat completion.

    Raises:
        ValueError: the completion carries no token logprobs.
    """
    try:
        choice = _field(completion, "choices")[0]
        entries = _field(_field(choice, "logprobs"), "content")
        top = _field(entries[0], "top_logprobs")
        candidates = [(_field(t, "token"), float(_field(t, "logprob"))) for t in top]
    except (AttributeError, IndexError, KeyError, TypeError) as exc:
        raise ValueError(f"completion has no first-token top_logprobs: {exc!r}") from exc
    if not candidates:
        raise ValueError("completion has an empty top_logprobs list")
    seen: set[str] = set()
    unique = []
    for token, logprob in candidates:
        if token not in seen:
            seen.add(token)
            unique.append((token, logprob))
    return unique


def sample_distinct_tokens(
    candidates: list[tuple[str, float]], k: int, temperature: float, rng: random.Random
) -> list[str]:
    """Draw up to ``k`` distinct tokens without replacement, with probability ∝ ``exp(logprob / T)``.

    ``temperature <= 0`` takes the ``k`` most likely tokens.
    """
    if temperature <= 0:
        return [t for t, _ in sorted(candidates, key=lambda c: -c[1])[:k]]
    pool = list(candidates)
    top = max(lp for _, lp in pool)
    weights = [math.exp((lp - top) / temperature) for _, lp in pool]
    chosen: list[str] = []
    while pool and len(chosen) < k:
        total = sum(weights)
        idx = rng.choices(range(len(pool)), weights=weights)[0] if total > 0 else rng.randrange(len(pool))
        chosen.append(pool.pop(idx)[0])
        weights.pop(idx)
    return chosen


def _message_text(completion: Any, index: int = 0) -> str:
    message = _field(_field(completion, "choices")[index], "message")
    return _field(message, "content") or ""


async def generate_with_diverse_first_tokens(
    self: Any,
    messages: list[dict],
    prefill: str = "",
    n: int = 8,
    max_tokens: int = 4096,
    temperature: float = 1.0,
    *,
    rng: random.Random | None = None,
) -> list[str]:
    """Generate ``n`` completions whose first tokens differ.

    One request with ``max_tokens=1, logprobs=True, top_logprobs=20`` (greedy) reads the distribution of
    the first token after ``prefill``; up to ``n`` distinct tokens are sampled from it (temperature
    ``temperature``) and each is continued by its own request (``max_tokens - 1`` tokens), through the
    chat API with the partial assistant message continued. If fewer than ``n`` distinct tokens are
    available, or the server returns no logprobs, the remainder is sampled normally in one ``n``-request.

    ``self`` is an environment (its ``server`` is used) or directly a server object offering
    ``chat_completion``. Returns the completion texts, each starting with its first token and not
    including ``prefill``.
    """
    server = getattr(self, "server", self)
    rng = rng or random.Random()
    n = max(int(n), 0)
    if n == 0:
        return []

    def with_prefill(text: str) -> tuple[list[dict], dict]:
        if not text:
            return list(messages), {}
        return list(messages) + [{"role": "assistant", "content": text}], {
            "extra_body": dict(CONTINUE_FINAL_MESSAGE)
        }

    probe_messages, probe_extra = with_prefill(prefill)
    first_tokens: list[str] = []
    try:
        probe = await server.chat_completion(
            messages=probe_messages,
            n=1,
            max_tokens=1,
            temperature=0.0,
            logprobs=True,
            top_logprobs=TOP_LOGPROBS,
            **probe_extra,
        )
        first_tokens = sample_distinct_tokens(first_token_candidates(probe), n, temperature, rng)
    except ValueError as exc:
        logger.warning("diverse first tokens unavailable (%s); sampling %d completions normally", exc, n)

    async def continue_from(token: str) -> str:
        cont_messages, extra = with_prefill(prefill + token)
        completion = await server.chat_completion(
            messages=cont_messages, n=1, max_tokens=max(max_tokens - 1, 1), temperature=temperature, **extra
        )
        return token + _message_text(completion)

    results = list(await asyncio.gather(*(continue_from(t) for t in first_tokens)))
    missing = n - len(results)
    if missing > 0:
        completion = await server.chat_completion(
            messages=probe_messages, n=missing, max_tokens=max_tokens, temperature=temperature, **probe_extra
        )
        choices = _field(completion, "choices")
        results.extend(_message_text(completion, i) for i in range(len(choices)))
    return results
