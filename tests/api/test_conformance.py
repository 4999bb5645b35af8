"""Wire compatibility with atroposlib 0.4.0, against a real ``run-api`` process.

Ports what the original's black-box tests pin (compression, message handling, legacy flows) and
the endpoint behaviours of the compatibility spec (§1.3-§1.5).
"""

from __future__ import annotations

import gzip
import json

import requests

from tests.helpers.api import (
    TIMEOUT,
    get,
    group,
    post_group,
    preflight,
    register,
    register_env,
    registration,
)

# ------------------------------------------------------------------ readiness, root, info


def test_info_is_ready_and_small_responses_are_not_gzipped(url):
    response = get(url, "/info", headers={"Accept-Encoding": "gzip"})
    assert response.status_code == 200
    assert response.headers.get("Content-Encoding") != "gzip"
    assert response.json() == {"batch_size": -1, "max_token_len": -1}


def test_root_message(url):
    assert get(url, "/").json() == {"message": "AtroposLib API"}


def test_register_returns_integer_uuid_and_info(url):
    response = register(url, batch_size=16, max_token_len=512)
    assert response.status_code == 200
    uuid = response.json()["uuid"]
    assert isinstance(uuid, int) and uuid >= 0
    assert get(url, "/info").json() == {"batch_size": 16, "max_token_len": 512}
    assert get(url, "/wandb_info").json() == {"group": "test_group", "project": "test_project"}


def test_second_register_changes_nothing(url):
    first = register(url, batch_size=16, starting_step=3).json()["uuid"]
    second = register(url, batch_size=64, wandb_group="other", starting_step=9).json()["uuid"]
    assert first != second
    assert get(url, "/info").json()["batch_size"] == 16
    assert get(url, "/wandb_info").json()["group"] == "test_group"
    assert get(url, "/status").json() == {"current_step": 3, "queue_size": 0}


# ------------------------------------------------------------------ batches


def test_register_then_scored_data_then_batch_without_prior_batch(url):
    register(url, batch_size=16)
    body = group(16, 512)
    assert post_group(url, body).json() == {"status": "received"}
    batch = get(url, "/batch").json()["batch"]
    assert len(batch) == 1
    assert batch[0]["tokens"] == body["tokens"]
    assert len(batch[0]["tokens"]) == 16


def test_batch_before_register_is_the_original_error_body(url):
    response = get(url, "/batch")
    assert response.status_code == 200
    assert response.json() == {
        "status": "error",
        "message": "Trainer not registered. Call /register first.",
        "batch": [],
    }


def test_batch_after_reset_answers_not_registered_instead_of_500(url):
    register(url, batch_size=2)
    get(url, "/reset_data")
    response = get(url, "/batch")
    assert response.status_code == 200
    assert response.json()["status"] == "error" and response.json()["batch"] == []


def test_empty_batch_is_null(url):
    register(url, batch_size=4)
    post_group(url, group(2))
    assert get(url, "/batch").json() == {"batch": None}


def test_large_batch_is_gzipped_and_decodes(url):
    register(url, batch_size=16)
    body = {
        "tokens": [list(range(512)) for _ in range(16)],
        "masks": [[1] * 512 for _ in range(16)],
        "scores": [0.5] * 16,
        "advantages": [[0.1] * 512 for _ in range(16)],
        "ref_logprobs": [[0.2] * 512 for _ in range(16)],
        "messages": [[{"role": "user", "content": "test" * 50}] for _ in range(16)],
    }
    assert post_group(url, body).status_code == 200
    response = get(url, "/batch", headers={"Accept-Encoding": "gzip"})
    assert response.status_code == 200
    assert response.headers["Content-Encoding"] == "gzip"
    assert "Accept-Encoding" in response.headers.get("Vary", "")
    batch = response.json()["batch"][0]
    assert len(batch["tokens"]) == 16 and len(batch["tokens"][0]) == 512 and batch["tokens"][0][0] == 0
    assert batch["advantages"][0][0] == 0.1 and batch["messages"][0][0]["content"] == "test" * 50


def test_batch_without_accept_encoding_is_identity(url):
    register(url, batch_size=8)
    post_group(url, group(8, 200))
    response = get(url, "/batch", headers={"Accept-Encoding": "identity"}, stream=True)
    assert response.headers.get("Content-Encoding") is None
    assert len(response.json()["batch"][0]["tokens"]) == 8


def test_scored_data_list_fills_a_batch(url):
    register(url, batch_size=32)
    groups = [group(8, 512, start=1000 * i) for i in range(4)]
    response = requests.post(f"{url}/scored_data_list", json=groups, timeout=TIMEOUT)
    assert response.json() == {"status": "received", "groups_processed": 4}
    batch = get(url, "/batch").json()["batch"]
    assert sum(len(item["tokens"]) for item in batch) == 32


def test_scored_data_list_empty(url):
    register(url)
    response = requests.post(f"{url}/scored_data_list", json=[], timeout=TIMEOUT)
    assert response.json() == {"status": "received", "groups_processed": 0}


def test_gzip_request_body_is_inflated(url):
    register(url, batch_size=8)
    payload = gzip.compress(json.dumps(group(8, 256)).encode())
    response = requests.post(
        f"{url}/scored_data",
        data=payload,
        headers={"Content-Type": "application/json", "Content-Encoding": "gzip"},
        timeout=TIMEOUT,
    )
    assert response.json() == {"status": "received"}
    assert get(url, "/batch").json()["batch"] is not None


def test_gzip_scored_data_list_and_multi_member_gzip(url):
    register(url, batch_size=4)
    raw = json.dumps([group(2, start=0), group(2, start=100)]).encode()
    payload = gzip.compress(raw[:10]) + gzip.compress(raw[10:])
    response = requests.post(
        f"{url}/scored_data_list", data=payload, headers={"Content-Encoding": "gzip"}, timeout=TIMEOUT
    )
    assert response.json() == {"status": "received", "groups_processed": 2}


def test_batch_order_is_queue_order_for_single_sequences(url):
    register(url, batch_size=4)
    for i in range(4):
        post_group(url, group(1, start=10 * i))
    batch = get(url, "/batch").json()["batch"]
    assert [item["tokens"][0][0] for item in batch] == [0, 10, 20, 30]


def test_drain_all_lifo_and_step_counter(url):
    """Six pairs with batch size 4: one call forms 3 batches (step 3 -> 6), served newest first."""
    register(url, batch_size=4, starting_step=3)
    for i in range(6):
        post_group(url, group(2, start=100 * i))
    first = get(url, "/batch").json()
    assert [g["tokens"][0][0] for g in first["batch"]] == [400, 500]
    assert get(url, "/status").json() == {"current_step": 6, "queue_size": 0}
    second = get(url, "/batch").json()
    third = get(url, "/batch").json()
    assert [g["tokens"][0][0] for g in second["batch"]] == [200, 300]
    assert [g["tokens"][0][0] for g in third["batch"]] == [0, 100]
    assert get(url, "/status").json()["current_step"] == 6
    assert get(url, "/batch").json() == {"batch": None}
    assert len({first["batch_id"], second["batch_id"], third["batch_id"]}) == 3


def test_stored_group_has_exactly_fourteen_keys_and_coerced_values(url):
    register(url, batch_size=1)
    body = {
        "tokens": [[1.0, 2, 3]],
        "masks": [[-100, 2, 3]],
        "scores": [1],
        "advantages": [[1, 1, 1, 1]],
        "unknown_field": "dropped",
    }
    assert post_group(url, body).status_code == 200
    item = get(url, "/batch").json()["batch"][0]
    assert list(item) == [
        "tokens",
        "masks",
        "scores",
        "advantages",
        "ref_logprobs",
        "messages",
        "generation_params",
        "inference_logprobs",
        "overrides",
        "group_overrides",
        "images",
        "env_id",
        "distill_token_ids",
        "distill_logprobs",
    ]
    assert item["tokens"] == [[1, 2, 3]] and isinstance(item["tokens"][0][0], int)
    assert item["scores"] == [1.0] and isinstance(item["scores"][0], float)
    assert all(isinstance(x, float) for x in item["advantages"][0])
    assert item["ref_logprobs"] is None and item["env_id"] is None


def test_advantages_length_is_not_checked(url):
    register(url, batch_size=1)
    body = group(1, 3, advantages=[[1.0, 1.0, 1.0, 1.0]])
    assert post_group(url, body).status_code == 200


def test_overrides_and_generation_params_pass_through(url):
    register(url, batch_size=2)
    post_group(url, group(1, overrides=[{"temperature": 0.5}], messages=[[{"role": "user", "content": "a"}]]))
    post_group(url, group(1, start=9, generation_params={"temperature": 0.8}))
    batch = get(url, "/batch").json()["batch"]
    assert batch[0]["overrides"][0]["temperature"] == 0.5
    assert batch[1]["generation_params"]["temperature"] == 0.8
    assert batch[0]["messages"][0][0]["role"] == "user"


def test_status_counts_groups(url):
    register(url, batch_size=4)
    for i in range(4):
        post_group(url, group(1, start=i, group_overrides={"sft": True}, overrides=[{"sft": True}]))
    assert get(url, "/status").json()["queue_size"] == 4
    batch = get(url, "/batch").json()["batch"]
    assert len(batch) == 4
    assert all(item["group_overrides"]["sft"] is True for item in batch)


# ------------------------------------------------------------------ latest example


def test_latest_example_default_is_nine_empty_lists(api):
    """On a fresh server (the ``api`` fixture), before any group entered the queue."""
    assert get(api.url, "/latest_example").json() == {
        "tokens": [],
        "masks": [],
        "scores": [],
        "advantages": [],
        "ref_logprobs": [],
        "generation_params": [],
        "inference_logprobs": [],
        "messages": [],
        "images": [],
    }


def test_latest_example_echoes_fields_and_survives_reset(url):
    register(url, batch_size=1)
    messages = [{"role": "user", "content": "Write hello"}, {"role": "assistant", "content": "print(1)"}]
    body = group(
        1, 3, messages=[messages], inference_logprobs=[[-1.0, -0.7, -0.2]], generation_params={"t": 0.7}
    )
    post_group(url, body)
    latest = get(url, "/latest_example").json()
    assert latest["messages"] == [messages]
    assert latest["inference_logprobs"] == [[-1.0, -0.7, -0.2]]
    assert latest["generation_params"] == {"t": 0.7}
    get(url, "/reset_data")
    assert get(url, "/latest_example").json()["messages"] == [messages]


# ------------------------------------------------------------------ reset


def test_reset_clears_registration_but_keeps_max_token_len(url):
    register(url, max_token_len=512)
    post_group(url, group(1))
    response = get(url, "/reset_data")
    assert response.status_code == 200
    assert response.text == "Reset successful"
    assert response.headers["content-type"].startswith("text/plain")
    assert get(url, "/info").json() == {"batch_size": -1, "max_token_len": 512}
    assert get(url, "/status").json() == {"current_step": 0, "queue_size": 0}
    assert get(url, "/wandb_info").json() == {"group": None, "project": None}
    assert get(url, "/reset_data").text == "Reset successful"


def test_register_after_reset_reinitialises(url):
    register(url, batch_size=4, starting_step=2)
    get(url, "/reset_data")
    register(url, batch_size=8, starting_step=5)
    assert get(url, "/info").json()["batch_size"] == 8
    assert get(url, "/status").json()["current_step"] == 5


def test_scored_data_before_register_does_not_poison_registration(url):
    """The original skipped initialisation after an early group; here register always initialises."""
    post_group(url, group(1))
    register(url, batch_size=1, starting_step=4)
    assert get(url, "/info").json()["batch_size"] == 1
    assert get(url, "/status").json() == {"current_step": 4, "queue_size": 1}
    batch = get(url, "/batch").json()["batch"]
    assert batch is not None and len(batch) == 1  # the early group was kept


# ------------------------------------------------------------------ environments


def test_register_env_waits_for_trainer_first_batch(url):
    assert register_env(url).json() == {"status": "wait for trainer to start"}
    register(
        url, batch_size=32, checkpoint_dir="ck", save_checkpoint_interval=5, num_steps=10, starting_step=3
    )
    assert register_env(url).json() == {"status": "wait for trainer to start"}
    get(url, "/batch")
    response = register_env(url, desired_name="a")
    assert response.json() == {
        "status": "success",
        "env_id": 0,
        "wandb_name": "a_0",
        "checkpoint_dir": "ck",
        "starting_step": 3,
        "checkpoint_interval": 5,
        "num_steps": 10,
    }
    again = register_env(url, desired_name="a").json()
    other = register_env(url, desired_name="b").json()
    assert (again["env_id"], again["wandb_name"]) == (1, "a_1")
    assert (other["env_id"], other["wandb_name"]) == (2, "b_0")


def started(url, **overrides):
    register(url, **overrides)
    get(url, "/batch")


def add_env(url, **overrides):
    return register_env(url, **overrides).json()["env_id"]


def status_env(url, env_id):
    return requests.get(f"{url}/status-env", json={"env_id": env_id}, timeout=TIMEOUT)


def test_status_env_get_with_json_body(url):
    started(url, batch_size=32)
    env_id = add_env(url, group_size=4)
    post_group(url, group(4, 256, env_id=env_id))
    response = status_env(url, env_id)
    assert response.status_code == 200
    assert response.json() == {
        "current_step": 0,
        "queue_size": 1,
        "unallocated_fraction": 1.0,
        "self_queue_size": 1,
        "max_group_size": 4,
        "env_weight": 1.0,
    }
    assert get(url, "/status-env").status_code == 422  # no body
    assert get(url, "/status-env?env_id=0").status_code == 422  # a query string is not the body


def test_status_env_worked_example(url):
    started(url, batch_size=32)
    a = add_env(url, max_token_length=10, weight=1, group_size=2, desired_name="A")
    add_env(url, max_token_length=30, weight=2, group_size=2, desired_name="B")
    c = add_env(url, max_token_length=30, weight=2, group_size=4, desired_name="C")
    for i in range(6):
        post_group(url, group(2, start=10 * i, env_id=a))
    got_a = status_env(url, a).json()
    assert got_a["env_weight"] == 10 / 130
    assert (got_a["queue_size"], got_a["self_queue_size"], got_a["max_group_size"]) == (6, 6, 2)
    got_c = status_env(url, c).json()
    assert abs(got_c["env_weight"] - 60 / 130) < 1e-12
    assert (got_c["queue_size"], got_c["self_queue_size"]) == (3, 0)


def test_status_env_min_allocation_fraction(url):
    started(url, batch_size=8)
    env_a = add_env(url, group_size=2, min_batch_allocation=0.25)
    add_env(url, group_size=2, min_batch_allocation=0.5, desired_name="other")
    assert status_env(url, env_a).json()["unallocated_fraction"] == 0.25


def test_disconnect_env(url):
    started(url, batch_size=8)
    env_id = add_env(url, group_size=2)
    assert requests.post(f"{url}/disconnect-env", json={"env_id": env_id}, timeout=TIMEOUT).json() == {
        "status": "success"
    }
    assert requests.post(f"{url}/disconnect-env", json={"env_id": 7}, timeout=TIMEOUT).json() == {
        "status": "failure",
        "error": "list index out of range",
    }
    envs = get(url, "/inspect/envs").json()["envs"]
    assert envs[0]["connected"] is False
    # A disconnected env's weight no longer counts; its own weight is then the minimum share.
    assert status_env(url, env_id).json()["env_weight"] == 0.01


def test_buffering_partial_groups(url):
    started(url, batch_size=8)
    env_id = add_env(url, group_size=4)
    assert post_group(url, group(1, env_id=env_id)).json() == {"status": "buffered", "buffer_size": 1}
    assert post_group(url, group(1, start=50, env_id=env_id)).json() == {
        "status": "buffered",
        "buffer_size": 2,
    }
    assert get(url, "/status").json()["queue_size"] == 0
    response = post_group(url, group(2, start=90, env_id=env_id))
    assert response.json() == {"status": "buffered", "buffer_size": 0}
    assert get(url, "/status").json()["queue_size"] == 3  # flushed as separate items
    assert get(url, "/latest_example").json()["tokens"][0][0] == 90


def test_scored_data_list_reports_buffering(url):
    started(url, batch_size=8)
    env_id = add_env(url, group_size=4)
    groups = [group(4, env_id=env_id), group(2, start=7, env_id=env_id), group(1, start=9, env_id=env_id)]
    response = requests.post(f"{url}/scored_data_list", json=groups, timeout=TIMEOUT)
    assert response.json() == {
        "status": "received",
        "groups_processed": 3,
        "buffered": 2,
        "last_buffer_size": 3,
    }


def test_wandb_info_before_register_is_null(url):
    assert get(url, "/wandb_info").json() == {"group": None, "project": None}


def test_cors_headers(url):
    response = preflight(url, "/scored_data", "http://example.com")
    assert response.status_code == 200
    assert response.headers["access-control-allow-origin"] in ("*", "http://example.com")
    simple = get(url, "/info", headers={"Origin": "http://example.com"})
    assert "access-control-allow-origin" in simple.headers


def test_registration_schema_errors_are_fastapi_422(url):
    body = registration()
    del body["batch_size"]
    response = requests.post(f"{url}/register", json=body, timeout=TIMEOUT)
    assert response.status_code == 422
    assert response.json()["detail"][0]["loc"] == ["body", "batch_size"]
    started(url)
    assert register_env(url, weight=None).status_code == 422


def test_third_party_trainer_registers_with_null_or_missing_wandb_names(url):
    """Axolotl's plugin posts ``wandb_project: null`` by default (and may leave the group out)."""
    body = registration()
    body["wandb_project"] = None
    del body["wandb_group"]
    response = requests.post(f"{url}/register", json=body, timeout=TIMEOUT)
    assert response.status_code == 200, response.text
    assert isinstance(response.json()["uuid"], int)
    assert get(url, "/wandb_info").json() == {"group": None, "project": None}
    assert get(url, "/info").json() == {
        "batch_size": body["batch_size"],
        "max_token_len": body["max_token_len"],
    }
    get(url, "/batch")
    env = register_env(url).json()
    assert env["status"] == "success"
