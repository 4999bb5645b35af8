"""The trainer's API client against a real ``run-api`` process."""

from __future__ import annotations

import pytest
import requests

from atroposlib.testing.api_process import free_port, launch_api
from example_trainer.grpo.api_client import (
    AtroposApiError,
    AtroposClient,
    check_atropos_api,
    get_batch,
    register_trainer,
    registration_payload,
)
from example_trainer.grpo.config import TrainingConfig
from tests.helpers.trainer import make_group


def _config(url: str, **kw) -> TrainingConfig:
    return TrainingConfig(
        model_name="m", atropos_url=url, batch_size=2, gradient_accumulation_steps=2, seq_len=256,
        training_steps=5, checkpoint_interval=0, save_path="ck", wandb_project="proj", **kw,
    )  # fmt: skip


def test_registration_payload_matches_the_original():
    cfg = _config("http://x:1")
    assert registration_payload(cfg, starting_step=4) == {
        "wandb_group": "",
        "wandb_project": "proj",
        "batch_size": 4,
        "max_token_len": 256,
        "checkpoint_dir": "ck",
        "save_checkpoint_interval": 5,  # checkpoint_interval <= 0 → training_steps
        "starting_step": 4,
        "num_steps": 5,
    }


def test_register_poll_ack_and_replay(api):
    cfg = _config(api.url)
    assert check_atropos_api(api.url, timeout=5)
    client = AtroposClient.from_config(cfg)
    assert "uuid" in register_trainer(cfg)
    assert client.info() == {"batch_size": 4, "max_token_len": 256}
    assert client.get_batch() == (None, None)
    for i in range(4):
        assert requests.post(f"{api.url}/scored_data", json=make_group(n=2, seed=i)).status_code == 200
    first_id, first = client.get_batch()
    second_id, second = client.get_batch()
    assert {first_id, second_id} == {1, 2} and len(first) == len(second) == 2
    assert client.status()["current_step"] == 2
    assert client.ack(first_id) is True
    assert client.ack(999) is False  # unknown id: a warning, not a crash
    # the unacknowledged batch comes back first after a replay
    assert client.replay() == 1
    again_id, again = client.get_batch()
    assert again_id == second_id and again == second
    assert client.ack(second_id)
    assert client.replay() == 0
    assert get_batch(api.url)["batch"] is None


def test_wait_for_batch_polls_until_data_arrives_or_stop(api):
    cfg = _config(api.url)
    client = AtroposClient.from_config(cfg)
    client.register(cfg)
    waits = []
    assert client.wait_for_batch(
        poll_interval=0.05, should_stop=lambda: len(waits) >= 3, on_wait=waits.append
    ) == (
        None,
        None,
    )
    assert len(waits) == 3
    for i in range(2):
        requests.post(f"{api.url}/scored_data", json=make_group(n=2, seed=i))
    batch_id, groups = client.wait_for_batch(poll_interval=0.05)
    assert batch_id == 1 and len(groups) == 2


def test_bearer_token(tmp_path, monkeypatch):
    monkeypatch.delenv("ATROPOS_API_KEY", raising=False)
    with launch_api(data_dir=tmp_path / "api", api_key="s3cret") as api:
        with pytest.raises(AtroposApiError, match="401 unauthorized"):
            AtroposClient(api.url).wait_until_ready(timeout=2)
        with pytest.raises(AtroposApiError, match="401"):
            AtroposClient(api.url).status()
        assert AtroposClient(api.url, api_key="s3cret").status()["current_step"] == 0
        monkeypatch.setenv("ATROPOS_API_KEY", "s3cret")
        cfg = _config(api.url)
        assert cfg.api_key == "s3cret"
        assert "uuid" in AtroposClient.from_config(cfg).register(cfg)


def test_unreachable_api_fails_after_bounded_retries():
    url = f"http://127.0.0.1:{free_port()}"
    client = AtroposClient(url, retries=3, min_wait=0.05, max_wait=0.1)
    with pytest.raises(AtroposApiError, match=r"unreachable: GET /status failed 3 times"):
        client.status()
    with pytest.raises(AtroposApiError, match="not reachable"):
        client.wait_until_ready(timeout=1, poll=0.2)
    assert check_atropos_api(url, timeout=0.5) is False


def test_batch_before_registration_is_an_error(api):
    with pytest.raises(AtroposApiError):
        AtroposClient(api.url, retries=1).get_batch()
