"""generate_with_diverse_first_tokens against a scripted chat server object returning real OpenAI types."""

from __future__ import annotations

import math
import random
from collections import Counter

import pytest
from openai.types.chat import ChatCompletion

from atroposlib.utils.force_diverse_samples import (
    first_token_candidates,
    generate_with_diverse_first_tokens,
    sample_distinct_tokens,
)

TOP = [(" The", -0.1), (" A", -1.0), (" We", -2.0), (" Let", -2.5), (" So", -3.0), (" First", -4.0)]


def completion(contents: list[str], top: list[tuple[str, float]] | None = None) -> ChatCompletion:
    choices = []
    for i, content in enumerate(contents):
        logprobs = None
        if top is not None:
            entries = [{"token": t, "logprob": lp, "bytes": None} for t, lp in top]
            logprobs = {
                "content": [
                    {"token": top[0][0], "logprob": top[0][1], "bytes": None, "top_logprobs": entries}
                ]
            }
        choices.append(
            {
                "index": i,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
                "logprobs": logprobs,
            }
        )
    return ChatCompletion.model_validate(
        {"id": "x", "object": "chat.completion", "created": 0, "model": "m", "choices": choices}
    )


class ScriptedChatServer:
    """Answers the 1-token probe with ``top`` logprobs and every continuation with a fixed suffix."""

    def __init__(self, top=TOP, probe_has_logprobs=True):
        self.top = top
        self.probe_has_logprobs = probe_has_logprobs
        self.calls: list[dict] = []

    async def chat_completion(self, **kwargs):
        self.calls.append(kwargs)
        if kwargs.get("max_tokens") == 1 and kwargs.get("logprobs"):
            return completion([self.top[0][0]], self.top if self.probe_has_logprobs else None)
        n = kwargs.get("n", 1)
        last = kwargs["messages"][-1]
        tag = last["content"] if last["role"] == "assistant" else "fresh"
        return completion([f" rest-after[{tag}]-{i}" for i in range(n)])


class Env:
    def __init__(self, server):
        self.server = server


MESSAGES = [{"role": "user", "content": "Tell me a story."}]


async def test_returns_n_completions_with_distinct_first_tokens():
    server = ScriptedChatServer()
    out = await generate_with_diverse_first_tokens(
        Env(server), MESSAGES, n=4, max_tokens=32, rng=random.Random(0)
    )
    assert isinstance(out, list) and len(out) == 4
    first = [o.split(" rest-after")[0] for o in out]
    assert len(set(first)) == 4 and set(first) <= {t for t, _ in TOP}
    for text, token in zip(out, first, strict=True):
        assert text == f"{token} rest-after[{token}]-0"

    probe, *continuations = server.calls
    assert probe["max_tokens"] == 1 and probe["logprobs"] is True and probe["top_logprobs"] == 20
    assert probe["temperature"] == 0.0 and probe["messages"] == MESSAGES and "extra_body" not in probe
    for call in continuations:
        assert call["max_tokens"] == 31 and call["n"] == 1 and call["temperature"] == 1.0
        assert call["messages"][:-1] == MESSAGES and call["messages"][-1]["role"] == "assistant"
        assert call["extra_body"] == {"continue_final_message": True, "add_generation_prompt": False}


async def test_prefill_is_continued_and_not_returned():
    server = ScriptedChatServer()
    out = await generate_with_diverse_first_tokens(
        server, MESSAGES, prefill="<think>", n=2, rng=random.Random(1)
    )
    probe = server.calls[0]
    assert probe["messages"][-1] == {"role": "assistant", "content": "<think>"}
    assert probe["extra_body"]["continue_final_message"] is True
    for text in out:
        assert not text.startswith("<think>")
        token = text.split(" rest-after")[0]
        assert text.endswith(f"rest-after[<think>{token}]-0")


async def test_fewer_candidates_than_n_are_filled_by_normal_sampling():
    server = ScriptedChatServer(top=TOP[:2])
    out = await generate_with_diverse_first_tokens(server, MESSAGES, n=5, rng=random.Random(0))
    assert len(out) == 5
    assert sorted(o.split(" rest-after")[0] for o in out[:2]) == sorted(t for t, _ in TOP[:2])
    assert out[2:] == [" rest-after[fresh]-0", " rest-after[fresh]-1", " rest-after[fresh]-2"]
    assert server.calls[-1]["n"] == 3


async def test_missing_logprobs_fall_back_to_plain_sampling(caplog):
    server = ScriptedChatServer(probe_has_logprobs=False)
    out = await generate_with_diverse_first_tokens(server, MESSAGES, n=3)
    assert out == [" rest-after[fresh]-0", " rest-after[fresh]-1", " rest-after[fresh]-2"]
    assert "diverse first tokens unavailable" in caplog.text


async def test_zero_samples():
    server = ScriptedChatServer()
    assert await generate_with_diverse_first_tokens(server, MESSAGES, n=0) == []
    assert server.calls == []


def test_first_token_candidates_deduplicates_and_validates():
    c = completion(["x"], [("a", -1.0), ("a", -2.0), ("b", -0.5)])
    assert first_token_candidates(c) == [("a", -1.0), ("b", -0.5)]
    with pytest.raises(ValueError):
        first_token_candidates(completion(["x"]))
    assert first_token_candidates(
        {"choices": [{"logprobs": {"content": [{"top_logprobs": [{"token": "t", "logprob": -1}]}]}}]}
    ) == [("t", -1.0)]


def test_sample_distinct_tokens_follows_the_tempered_distribution():
    rng = random.Random(123)
    counts = Counter(sample_distinct_tokens(TOP, 1, 1.0, rng)[0] for _ in range(4000))
    total = sum(math.exp(lp) for _, lp in TOP)
    assert counts[" The"] / 4000 == pytest.approx(math.exp(-0.1) / total, abs=0.03)
    assert counts[" A"] / 4000 == pytest.approx(math.exp(-1.0) / total, abs=0.03)
    picked = sample_distinct_tokens(TOP, 10, 1.0, rng)
    assert sorted(picked) == sorted(t for t, _ in TOP)
    assert sample_distinct_tokens(TOP, 2, 0.0, rng) == [" The", " A"]
