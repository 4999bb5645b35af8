"""The serve loop in-process: what may be cancelled, stopping at total_steps, /info handling, re-registration."""

from __future__ import annotations

import asyncio
import logging

import pytest
import requests

from atroposlib.envs.base import ServerBaseline
from atroposlib.testing.api_process import launch_api
from tests.helpers.sample_envs import CountingEnv, CountingEnvConfig
from tests.helpers.serve import Trainer


class GatedSendEnv(CountingEnv):
    """Sending waits for ``send_gate`` (standing in for a slow or backpressured API)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.send_gate = asyncio.Event()
        self.sent: list = []

    async def _send_scored_data_to_api(self, payload):
        await self.send_gate.wait()
        self.sent.append(payload)


def make_env(tiny_model_dir, tmp_path, cls=CountingEnv, **cfg):
    cfg.setdefault("tokenizer_name", str(tiny_model_dir))
    cfg.setdefault("use_wandb", False)
    cfg.setdefault("group_size", 2)
    cfg.setdefault("use_inference", False)
    cfg.setdefault("unsent_groups_path", str(tmp_path / "unsent.jsonl"))
    return cls(CountingEnvConfig(**cfg), ServerBaseline(), testing=True)


async def wait_until(predicate, timeout=10.0):
    deadline = asyncio.get_running_loop().time() + timeout
    while not predicate():
        assert asyncio.get_running_loop().time() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


@pytest.mark.parametrize("in_serve_loop", [True, False])
async def test_eval_stop_train_requeues_collecting_items_but_never_cancels_a_send(
    tiny_model_dir, tmp_path, in_serve_loop
):
    env = make_env(
        tiny_model_dir, tmp_path, cls=GatedSendEnv, hang_every=2, hang_seconds=60, steps_per_eval=10
    )
    await env.setup()
    if in_serve_loop:  # inside env_manager, sending happens in a separate finishing task
        env.runner.shutdown.wakeup = asyncio.Event()
    env.config.batch_size = 8
    env.status_dict = {"current_step": 0, "queue_size": 0, "self_queue_size": 0, "max_group_size": 2}
    env.runner.pool.launch(1)  # finishes collecting at once, then blocks while sending
    env.runner.pool.launch(2)  # hangs in collect_trajectories
    await wait_until(lambda: len(env.running_items) == 1 and (env.runner.pool.finishing or not in_serve_loop))
    if in_serve_loop:
        (sending,) = env.runner.pool.finishing
        assert len(env.workers) == 1  # the sending item no longer holds a worker slot
    else:
        sending = next(
            w for w in env.workers if all(e["worker"] is not w for e in env.running_items.values())
        )
    env.status_dict["current_step"] = 10
    await env.env_step_checks()
    assert env.eval_runner is not None
    await asyncio.sleep(0.05)
    assert not env.running_items
    assert list(env.runner.pool.requeued) == [(2, 0)]  # re-queued first, without counting an attempt
    assert not sending.cancelled() and not sending.done()
    env.send_gate.set()
    await asyncio.wait_for(sending, 5)
    assert [p["messages"][0][0]["content"] for p in env.sent] == ["What is 1+1?"]
    await env.eval_runner
    assert env.eval_count == 1


async def test_shrinking_cap_and_pause_cancel_nothing(tiny_model_dir, tmp_path):
    env = make_env(tiny_model_dir, tmp_path, hang_every=1, hang_seconds=60)
    await env.setup()
    env.config.batch_size = 8
    env.status_dict = {"current_step": 1, "queue_size": 0, "self_queue_size": 0, "max_group_size": 2}
    env.next_item = 1
    await env.add_train_workers()
    # 3 batches * 8 / 2 = 12 groups of room, capped by max_num_workers (8)
    assert len(env.workers) == 8 and len(env.running_items) == 8
    env.status_dict["queue_size"] = 100  # the queue filled up: the cap drops far below the running count
    await env.add_train_workers()
    await asyncio.sleep(0.05)
    assert len(env.running_items) == 8 and not any(w.done() for w in env.workers)
    assert env.workers_added_list[-1] == 12 - 100 - 8  # recorded, but nothing was cancelled
    for w in env.workers:
        w.cancel()


async def test_worker_exceptions_are_retried_a_bounded_number_of_times(tiny_model_dir, tmp_path, caplog):
    class AlwaysFails(CountingEnv):
        async def collect_trajectories(self, item):
            raise ValueError("broken item")

    env = make_env(tiny_model_dir, tmp_path, cls=AlwaysFails, max_item_retries=2)
    await env.setup()
    attempts = 0
    env.runner.pool.launch("x")
    while env.workers or env.runner.pool.requeued:
        await asyncio.gather(*env.workers, return_exceptions=True)
        if env.runner.pool.requeued:
            attempts += 1
            env.runner.pool.launch(*env.runner.pool.requeued.popleft())
    assert attempts == 2 and env.items_abandoned == 1
    assert (
        "giving up on item 'x' after 3 attempts (failed in collect_trajectories (ValueError: broken item))"
        in caplog.text
    )


async def test_serve_stops_at_total_steps_and_disconnects(api, tiny_model_dir, tmp_path):
    trainer = Trainer(api, batch_size=4)
    trainer.pull()
    env = make_env(tiny_model_dir, tmp_path, rollout_server_url=api.url, total_steps=2)
    task = asyncio.create_task(env.env_manager())
    await wait_until(lambda: env.config.batch_size != -1)
    assert env.config.batch_size == 4 and env.max_token_len == 512  # adopted from /info
    assert env.config.wandb_name == "counting" and env.wandb_prepend == "counting_0"
    while not task.done():
        await asyncio.to_thread(trainer.pull)
        await asyncio.sleep(0.05)
    await task
    assert trainer.envs()[0]["connected"] is False
    assert env.groups_sent_total >= 4


async def test_server_info_tolerates_unknown_batch_size_and_rejects_oversized_groups(
    api, tiny_model_dir, tmp_path
):
    env = make_env(tiny_model_dir, tmp_path, rollout_server_url=api.url, group_size=8)
    await env.get_server_info()  # trainer not registered yet: /info says -1, no error
    assert env.config.batch_size == -1 and env.derived_batch_size == -1
    Trainer(api, batch_size=4)
    with pytest.raises(ValueError, match=r"group_size \(8\) is larger than the trainer's batch_size \(4\)"):
        await env.get_server_info()
    await env.api.close()


async def test_refused_registration_is_a_clear_error(tiny_model_dir, tmp_path, monkeypatch):
    monkeypatch.delenv("ATROPOS_API_KEY", raising=False)
    with launch_api(data_dir=tmp_path / "api", api_key="right-key") as api:
        env = make_env(tiny_model_dir, tmp_path, rollout_server_url=api.url)
        with pytest.raises(RuntimeError, match=r"\[counting\] the API refused registration"):
            await env.register_env()
        await env.api.close()


async def test_env_registers_again_when_the_api_forgets_it(api, tiny_model_dir, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="atroposlib.envs.base")
    trainer = Trainer(api, batch_size=4)
    trainer.pull()
    env = make_env(tiny_model_dir, tmp_path, rollout_server_url=api.url, num_items=0)
    task = asyncio.create_task(env.env_manager())
    try:
        await wait_until(lambda: env.status_dict)
        await asyncio.to_thread(requests.get, f"{api.url}/reset_data", timeout=10)
        await wait_until(lambda: "registering again" in caplog.text)
        trainer = Trainer(api, batch_size=4)
        await asyncio.to_thread(trainer.pull)
        await wait_until(lambda: caplog.text.count("registered with the API as env_id") == 2, timeout=20)
    finally:
        env.request_shutdown("test done")
        await task


async def test_item_order_requeued_first_then_backlog_oldest_first(tiny_model_dir, tmp_path):
    env = make_env(tiny_model_dir, tmp_path, hang_every=1, hang_seconds=60, max_num_workers=4)
    await env.setup()
    env.config.batch_size = 8
    env.status_dict = {"current_step": 1, "queue_size": 0, "self_queue_size": 0, "max_group_size": 2}
    env.backlog.extend([101, 102])
    env.runner.pool.requeued.append((100, 1))
    env.next_item = 1
    await env.add_train_workers()
    started = sorted(env.running_items.values(), key=lambda e: e["start_time"])
    assert [e["item"] for e in started] == [100, 101, 102, 1]
    assert [e["attempts"] for e in started] == [1, 0, 0, 0]
    for w in env.workers:
        w.cancel()


async def test_worker_without_an_entry_is_a_warning_not_a_crash(tiny_model_dir, tmp_path, caplog):
    env = make_env(tiny_model_dir, tmp_path)
    assert await env.handle_env("no-such-uuid") is None
    assert "has no item" in caplog.text


async def test_shutdown_while_waiting_for_the_trainer(api, tiny_model_dir, tmp_path, caplog):
    caplog.set_level(logging.INFO, logger="atroposlib.envs.base")
    env = make_env(tiny_model_dir, tmp_path, rollout_server_url=api.url)
    task = asyncio.create_task(env.env_manager())
    await wait_until(lambda: "waiting for the trainer to start" in caplog.text)
    env.request_shutdown("test")
    await asyncio.wait_for(task, 10)
    assert env.env_id is None and "stopped: 0 groups sent" in caplog.text
