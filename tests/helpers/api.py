"""Request builders shared by the API tests."""

from __future__ import annotations

import random
from typing import Any

import requests

TIMEOUT = 30


def registration(**overrides: Any) -> dict[str, Any]:
    body = {
        "wandb_group": "test_group",
        "wandb_project": "test_project",
        "batch_size": 32,
        "max_token_len": 2048,
        "checkpoint_dir": "/tmp/test",
        "save_checkpoint_interval": 100,
        "starting_step": 0,
        "num_steps": 1000,
    }
    body.update(overrides)
    return body


def register(url: str, headers: dict | None = None, **overrides: Any) -> requests.Response:
    return requests.post(f"{url}/register", json=registration(**overrides), headers=headers, timeout=TIMEOUT)


def env_registration(**overrides: Any) -> dict[str, Any]:
    body = {"max_token_length": 2048, "desired_name": "test_env", "weight": 1.0, "group_size": 4}
    body.update(overrides)
    return body


def register_env(url: str, headers: dict | None = None, **overrides: Any) -> requests.Response:
    """``POST /register-env`` with :func:`env_registration` and ``overrides``."""
    return requests.post(
        f"{url}/register-env", json=env_registration(**overrides), headers=headers, timeout=TIMEOUT
    )


def group(sequences: int = 1, length: int = 3, *, start: int = 0, **fields: Any) -> dict[str, Any]:
    """A valid scored group: ``sequences`` rows of ``length`` token ids starting at ``start``."""
    body = {
        "tokens": [[start + i * length + j for j in range(length)] for i in range(sequences)],
        "masks": [[-100] + [start + i * length + j for j in range(1, length)] for i in range(sequences)],
        "scores": [float(i % 2) for i in range(sequences)],
    }
    body.update(fields)
    return body


def post_group(url: str, body: Any, headers: dict | None = None) -> requests.Response:
    return requests.post(f"{url}/scored_data", json=body, headers=headers, timeout=TIMEOUT)


def get(url: str, path: str, **kwargs: Any) -> requests.Response:
    return requests.get(f"{url}{path}", timeout=TIMEOUT, **kwargs)


def preflight(url: str, path: str, origin: str) -> requests.Response:
    """The CORS preflight a browser page on ``origin`` sends before a ``POST`` to ``path``."""
    return requests.options(
        f"{url}{path}",
        headers={"Origin": origin, "Access-Control-Request-Method": "POST"},
        timeout=TIMEOUT,
    )


def random_group(rng: random.Random) -> dict:
    """A random, mostly valid group using every field, with lax-mode variants sprinkled in."""
    n = rng.randint(0, 4)
    length = rng.randint(0, 5)
    tokens = [
        [rng.choice([0, 1, -100, 2**31 - 1, -(2**31), rng.randrange(200_000)]) for _ in range(length)]
        for _ in range(n)
    ]
    group = {
        "tokens": tokens,
        "masks": [list(row) for row in tokens],
        "scores": [rng.choice([0, 1, 0.5, -2.25, 1e-7]) for _ in range(n)],
    }
    options = {
        "advantages": lambda: [[rng.choice([1, 0.25, -3])] * rng.randint(0, 3) for _ in range(n)],
        "ref_logprobs": lambda: [[-0.5] * length for _ in range(n)],
        "inference_logprobs": lambda: [[1.0, -0.1]] * n,
        "messages": lambda: [[{"role": "user", "content": rng.choice(["x", "", ["a"], {"b": 1}])}]] * n,
        "generation_params": lambda: {"temperature": 0.7, "seed": rng.choice([1, 2**70])},
        "overrides": lambda: [{"sft": True}] * n,
        "group_overrides": lambda: {"x": None},
        "images": lambda: rng.choice([None, "img", [1, 2], {"k": [True]}]),
        "env_id": lambda: rng.choice([None, 0, 3]),
        "distill_token_ids": lambda: [[[1, 2]] * length] * n,
        "distill_logprobs": lambda: [[[-0.1, -2]] * length] * n,
        "unknown": lambda: {"dropped": 1},
    }
    for name, make in options.items():
        if rng.random() < 0.4:
            group[name] = make()
    if rng.random() < 0.2 and n and length:
        group["tokens"][0][0] = float(group["tokens"][0][0])  # lax: integral float for an int
    if rng.random() < 0.1:
        group["env_id"] = 1.0
    return group
