"""``run-api --env-heartbeat-seconds``: an environment that stops talking to the API (hung, SIGSTOP) stops
holding back the batches its ``min_batch_allocation`` reserves, and is owed its share again once it polls."""

from __future__ import annotations

import time

import requests

from atroposlib.testing.api_process import launch_api

REGISTRATION = {
    "wandb_group": "g", "wandb_project": "p", "batch_size": 4, "max_token_len": 64, "checkpoint_dir": "ck",
    "save_checkpoint_interval": -1, "starting_step": 0, "num_steps": 10,
}  # fmt: skip


def _group(env_id: int, marker: int) -> dict:
    return {
        "tokens": [[marker], [marker]],
        "masks": [[marker], [marker]],
        "scores": [0.0, 1.0],
        "env_id": env_id,
    }


def test_a_silent_env_stops_holding_back_batches():
    with launch_api(["--store", "memory", "--env-heartbeat-seconds", "1.5"]) as api:
        post = lambda path, body: requests.post(f"{api.url}{path}", json=body, timeout=10).json()  # noqa: E731
        batch = lambda: requests.get(f"{api.url}/batch", timeout=10).json()["batch"]  # noqa: E731
        status = lambda env_id: requests.get(f"{api.url}/status-env", json={"env_id": env_id}, timeout=10)  # noqa: E731
        post("/register", REGISTRATION)
        batch()
        for name in ("busy", "hung"):
            env = {"max_token_length": 64, "desired_name": name, "weight": 1.0, "group_size": 2,
                   "min_batch_allocation": 0.5}  # fmt: skip
            assert post("/register-env", env)["status"] == "success"
        post("/scored_data_list", [_group(0, 1), _group(0, 2)])
        assert batch() is None  # "hung" is owed half of every batch
        deadline = time.monotonic() + 30
        served = None
        while served is None and time.monotonic() < deadline:
            assert status(0).status_code == 200  # "busy" keeps polling; "hung" says nothing
            served = batch()
            time.sleep(0.2)
        assert served is not None and len(served) == 2
        assert status(1).status_code == 200  # heard from again
        post("/scored_data_list", [_group(0, 3), _group(0, 4)])
        assert batch() is None
