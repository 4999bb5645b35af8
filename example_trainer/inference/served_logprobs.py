"""Does the inference server serve the trainer's weights? Its greedy continuation of a prompt, with the logprob of
each generated token, against the same tokens' logprobs under the trainer's model.

The check every weight mode is held to (``scripts/device_check.sh``, ``benchmarks/weight_refresh.py --hand-off``
and the weight-mode tests): after a refresh, the two agree to float rounding.
"""

from __future__ import annotations

from typing import Any

import requests
import torch


def served_greedy_logprobs(
    root_url: str, prompt_ids: list[int], max_tokens: int, timeout: float = 120.0
) -> tuple[list[int], list[float]]:
    """The server's greedy continuation of ``prompt_ids`` (token ids) and its logprob of each of those tokens,
    from ``POST {root_url}/generate``; raises ``requests.HTTPError`` on an error status."""
    body = {
        "prompt": {"prompt_token_ids": prompt_ids},
        "max_tokens": max_tokens,
        "temperature": 0,
        "logprobs": 0,
    }
    reply = requests.post(f"{root_url}/generate", json=body, timeout=timeout)
    reply.raise_for_status()
    data = reply.json()
    return data["token_ids"][0], [float(next(iter(pos[0].values()))) for pos in data["logprobs"][0]]


def model_logprobs(
    model: Any, prompt_ids: list[int], completion_ids: list[int], device: str = "cpu"
) -> list[float]:
    """``log p(completion_ids[i] | prompt_ids + completion_ids[:i])`` under ``model``, in float32, computed in
    eval mode without gradients (the model's mode is restored)."""
    was_training = model.training
    model.eval()
    try:
        with torch.no_grad():
            logits = model(torch.tensor([prompt_ids + completion_ids], device=device)).logits[0].float()
    finally:
        model.train(was_training)
    logp = torch.log_softmax(logits, dim=-1)
    return [float(logp[len(prompt_ids) - 1 + i, tok]) for i, tok in enumerate(completion_ids)]


def served_vs_model(
    root_url: str,
    model: Any,
    prompt_ids: list[int],
    max_tokens: int,
    device: str = "cpu",
    timeout: float = 120.0,
) -> tuple[float, list[int], list[float]]:
    """``(largest |served - model| logprob, generated ids, served logprobs)`` for the server's greedy
    continuation of ``prompt_ids``."""
    ids, served = served_greedy_logprobs(root_url, prompt_ids, max_tokens, timeout)
    mine = model_logprobs(model, prompt_ids, ids, device)
    return max(abs(a - b) for a, b in zip(mine, served, strict=True)), ids, served
