"""Staleness bounded before generation: the trainer registers ``max_staleness``, ``GET /info`` serves it,
and an environment that generates faster than the trainer trains waits instead of running ahead."""

from __future__ import annotations

import asyncio

import requests

from atroposlib.envs.serve.scheduling import offpolicy_window
from tests.envs.serve.test_runtime_loop import make_env


def test_offpolicy_window():
    assert offpolicy_window(3, None) == 3
    assert offpolicy_window(3, 0) == 1 and offpolicy_window(3, 1) == 2 and offpolicy_window(2, 5) == 2
    assert offpolicy_window(0, 1) == 2  # the staleness bound applies even with the queue limit off
    assert offpolicy_window(-1, None) == -1


def _register(api, max_staleness=None) -> None:
    body = {
        "wandb_group": "g", "wandb_project": "p", "batch_size": 4, "max_token_len": 512,
        "checkpoint_dir": "", "save_checkpoint_interval": -1, "starting_step": 0, "num_steps": 1000,
    }  # fmt: skip
    if max_staleness is not None:
        body["max_staleness"] = max_staleness
    requests.post(f"{api.url}/register", json=body, headers=api.headers(), timeout=10).raise_for_status()


async def _staleness_of_trained_groups(api, env, steps: int, step_time: float) -> list[int]:
    """A trainer slower than the environment: one batch every ``step_time`` s; each group's staleness is the
    trainer's step minus the step its rollout started at."""
    task = asyncio.create_task(env.env_manager())
    staleness: list[int] = []
    step = 0
    try:
        while step < steps:
            await asyncio.sleep(step_time)
            reply = await asyncio.to_thread(
                requests.get, f"{api.url}/batch", headers=api.headers(), timeout=10
            )
            batch = reply.json().get("batch")
            if batch:
                staleness += [step - g["group_overrides"]["policy_step"] for g in batch]
                step += 1
    finally:
        env.request_shutdown("test done")
        await task
    return staleness


async def test_registered_bound_reaches_the_env_and_keeps_rollouts_fresh(api, tiny_model_dir, tmp_path):
    _register(api, max_staleness=1)
    info = requests.get(f"{api.url}/info", headers=api.headers(), timeout=10).json()
    assert info == {"batch_size": 4, "max_token_len": 512, "max_staleness": 1}
    requests.get(f"{api.url}/batch", headers=api.headers(), timeout=10)  # the trainer has started
    env = make_env(
        tiny_model_dir, tmp_path, rollout_server_url=api.url, max_batches_offpolicy=6, rollout_delay=0.01
    )
    staleness = await _staleness_of_trained_groups(api, env, steps=8, step_time=0.3)
    assert env.config.max_staleness == 1  # adopted from /info
    assert len(staleness) == 16 and max(staleness) <= 1
    # the environment waited for the trainer: it generated at most two batches beyond those trained
    assert env.groups_sent_total <= 16 + 2 * 2 + env.max_num_workers


async def test_without_a_bound_a_fast_environment_runs_ahead(api, tiny_model_dir, tmp_path):
    """The same run without the bound: groups are trained several steps after they started (what the
    bound prevents; the trainer's --max-staleness alone would generate them and then drop them)."""
    _register(api)
    requests.get(f"{api.url}/batch", headers=api.headers(), timeout=10)
    env = make_env(
        tiny_model_dir, tmp_path, rollout_server_url=api.url, max_batches_offpolicy=6, rollout_delay=0.01
    )
    staleness = await _staleness_of_trained_groups(api, env, steps=8, step_time=0.3)
    assert env.config.max_staleness is None
    assert max(staleness) > 1
