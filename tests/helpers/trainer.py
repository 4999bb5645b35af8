"""Builders of scored groups for the trainer tests."""

from __future__ import annotations

import random
from typing import Any

import requests


def make_group(
    n: int = 4,
    lengths: list[int] | None = None,
    prompt_len: int = 3,
    scores: list[float] | None = None,
    seed: int = 0,
    vocab: int = 500,
    **extra: Any,
) -> dict[str, Any]:
    """A 14-key group dict as the API serves it: random tokens, prompt positions masked with -100."""
    rng = random.Random(seed)
    lengths = lengths or [rng.randint(prompt_len + 2, prompt_len + 12) for _ in range(n)]
    tokens = [[rng.randint(5, vocab) for _ in range(length)] for length in lengths]
    masks = [[-100] * prompt_len + seq[prompt_len:] for seq in tokens]
    group: dict[str, Any] = {
        "tokens": tokens,
        "masks": masks,
        "scores": scores if scores is not None else [float(rng.random()) for _ in lengths],
        "advantages": None,
        "ref_logprobs": None,
        "messages": None,
        "generation_params": None,
        "inference_logprobs": None,
        "overrides": None,
        "group_overrides": None,
        "images": None,
        "env_id": None,
        "distill_token_ids": None,
        "distill_logprobs": None,
    }
    group.update(extra)
    return group


def post_groups(url: str, count: int, seed: int, headers=None) -> None:
    """POST ``count`` two-sequence groups; some with rollout logprobs, one with token-level advantages."""
    for i in range(count):
        group = make_group(n=2, seed=seed + i, prompt_len=4, scores=[1.0, 0.0] if i % 2 else [0.0, 1.0])
        if i % 3 == 0:  # some groups carry rollout logprobs, one token-level advantages
            group["inference_logprobs"] = [[1.0] * 4 + [-1.5] * (len(t) - 4) for t in group["tokens"]]
        if i == 1:
            group["advantages"] = [[0.5] * len(t) for t in group["tokens"]]
        resp = requests.post(f"{url}/scored_data", json=group, headers=headers or {}, timeout=10)
        assert resp.status_code == 200, resp.text
