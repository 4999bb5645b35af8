"""Request builders shared by the API tests."""

from __future__ import annotations

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
