"""EnvRunner holds an environment: it drives the env's groups to the API through the env's own hooks.

The trajectory API is an in-process fake standing in for ``TrajectoryApiClient``: the trainer advances one
step per delivered group, so ``serve`` runs to ``total_steps`` and stops by itself.
"""

from __future__ import annotations

import asyncio
import logging
from typing import Any, Optional

from atroposlib.envs.cli.process import ProcessRunner
from atroposlib.envs.serve.api_client import SendOutcome
from atroposlib.envs.serve.runtime import EnvRunner
from tests.envs.serve.test_runtime_loop import make_env
from tests.helpers.sample_envs import CountingEnv


class FakeApi:
    """The calls ``EnvRunner`` makes on its API client; one delivered group = one trainer step."""

    def __init__(self, batch_size: int = 2) -> None:
        self.batch_size = batch_size
        self.step = 0
        self.payloads: list[Any] = []
        self.disconnected: list[int] = []
        self.label = "env"

    async def register_env(self, registration: dict[str, Any]) -> dict[str, Any]:
        self.registration = registration
        return {"status": "success", "env_id": 7, "wandb_name": "counting_7", "starting_step": 0}

    async def info(self) -> dict[str, Any]:
        return {"batch_size": self.batch_size, "max_token_len": 512}

    async def status_env(self, env_id: int) -> dict[str, Any]:
        return {"current_step": self.step, "queue_size": 0, "self_queue_size": 0, "max_group_size": 2}

    async def send_scored_data(self, payload: Any) -> SendOutcome:
        self.payloads.append(payload)
        self.step += 1
        return SendOutcome(delivered=True)

    async def disconnect_env(self, env_id: int) -> dict[str, Any]:
        self.disconnected.append(env_id)
        return {"status": "success"}

    async def close(self) -> None:
        pass


class RecordingEnv(CountingEnv):
    """Overrides the runtime hooks an environment may override, recording each call."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.calls: list[str] = []
        self.logged: list[dict] = []

    async def handle_send_to_api(self, scored_data: Any, item: Any = None, *args: Any, **kwargs: Any) -> int:
        self.calls.append(f"handle_send_to_api({item})")
        scored_data["group_overrides"] = {"tagged_by_env": True}
        return await super().handle_send_to_api(scored_data, item, *args, **kwargs)

    async def wandb_log(self, wandb_metrics: Optional[dict] = None) -> None:
        metrics = dict(wandb_metrics or {})
        metrics["train/custom"] = 1.0
        self.logged.append(metrics)
        await super().wandb_log(metrics)

    async def add_train_workers(self) -> None:
        self.calls.append("add_train_workers")
        await super().add_train_workers()


async def test_runner_drives_one_group_from_collect_to_the_api(tiny_model_dir, tmp_path):
    env = make_env(tiny_model_dir, tmp_path)
    runner = EnvRunner(env)
    assert env.runner is runner
    api = FakeApi()
    runner.sender._api = api
    runner.env_id = 7
    await env.setup()
    item_uuid = runner.pool.launch(3)
    (worker,) = runner.pool.workers
    group = await asyncio.wait_for(worker, 10)  # outside a serve run the worker finishes inline
    assert group["scores"] == [1.0, -0.99]  # CountingEnv: "4" is right, "5" is wrong
    (payload,) = api.payloads
    assert payload["env_id"] == 7 and payload["tokens"] == group["tokens"]
    assert payload["group_overrides"] == {"policy_step": 0}
    assert item_uuid not in runner.pool.running_items
    # the env's runtime attributes are the runner's state
    assert runner.sender.groups_sent_total == env.groups_sent_total == 1
    assert env.items_sent_this_step == runner.items_sent_this_step == 1
    assert env.completion_lengths is runner.wandb.completion_lengths and len(env.completion_lengths) == 2
    env.curr_step = 5
    assert runner.curr_step == 5


async def test_serve_calls_the_env_overrides(tiny_model_dir, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="atroposlib.envs.base")
    env = make_env(tiny_model_dir, tmp_path, cls=RecordingEnv, total_steps=3, max_num_workers=1)
    api = FakeApi()
    env.runner.sender._api = api
    env.runner.status_interval = 0.01
    await asyncio.wait_for(env.env_manager(), 30)
    assert api.registration["desired_name"] == "counting"
    assert env.env_id == 7 and env.wandb_prepend == "counting_7" and env.max_token_len == 512
    assert len(api.payloads) >= 3 and api.disconnected == [7]
    # every delivered group went through the env's handle_send_to_api override, item by item
    sends = [c for c in env.calls if c.startswith("handle_send_to_api")]
    assert sends[: len(api.payloads)] == [f"handle_send_to_api({i})" for i in range(len(api.payloads))]
    assert all(p["group_overrides"]["tagged_by_env"] for p in api.payloads)
    assert "add_train_workers" in env.calls
    # step changes called the env's wandb_log override, whose super() reached the runner's reporter
    assert env.logged and all(m["train/custom"] == 1.0 for m in env.logged)
    assert 'rollout stats {"step": ' in caplog.text  # written by the base wandb_log


async def test_process_runner_uses_the_env_runner_sender(tiny_model_dir, tmp_path):
    out = tmp_path / "groups.jsonl"
    env = make_env(tiny_model_dir, tmp_path, cls=RecordingEnv, data_path_to_save_groups=str(out))
    await ProcessRunner(env, n_groups=2, group_size=2).run()
    assert env.calls == ["handle_send_to_api(0)", "handle_send_to_api(1)"]
    assert env.runner.sender.groups_accepted_total == 2 and env.curr_step == 2
    assert len(out.read_text().splitlines()) == 2
    assert env.runner.sender.jsonl_writer.closed
    assert len(env.logged) == 2  # one wandb_log per accepted group, through the override
