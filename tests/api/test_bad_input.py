"""Malformed and unacceptable requests: a specific 4xx each, and nothing changes."""

from __future__ import annotations

import gzip
import json

import pytest
import requests

from tests.helpers.api import TIMEOUT, get, group, post_group, register, register_env


def snapshot(url):
    """Everything a rejected request must leave untouched."""
    health = get(url, "/health").json()
    recent = get(url, "/inspect/recent", params={"limit": 1000}).json()
    return (health, [g["seq"] for g in recent["groups"]], get(url, "/status").json())


def started(url, **overrides):
    register(url, **overrides)
    get(url, "/batch")


def add_env(url, **overrides):
    response = register_env(url, **overrides)
    assert response.json()["status"] == "success", response.text
    return response.json()["env_id"]


def raw_post(url, path, data, **headers):
    headers.setdefault("Content-Type", "application/json")
    return requests.post(f"{url}{path}", data=data, headers=headers, timeout=TIMEOUT)


def assert_422(response, loc=None, kind=None):
    assert response.status_code == 422, response.text
    detail = response.json()["detail"]
    assert isinstance(detail, list) and detail
    if loc is not None:
        assert detail[0]["loc"] == loc, detail
    if kind is not None:
        assert detail[0]["type"] == kind, detail
    return detail


BAD_GROUPS = {
    "tokens_masks_row_count": (group(2) | {"masks": [[1, 1, 1]]}, ["body", "masks"], "length_mismatch"),
    "tokens_masks_row_length": (
        group(2) | {"masks": [[1, 1, 1], [1, 1]]},
        ["body", "masks", 1],
        "length_mismatch",
    ),
    "scores_count": (group(2) | {"scores": [1.0]}, ["body", "scores"], "length_mismatch"),
    "empty_group": ({"tokens": [], "masks": [], "scores": []}, ["body", "tokens"], "empty_group"),
    "empty_sequence": (
        {"tokens": [[]], "masks": [[]], "scores": [0.0]},
        ["body", "tokens", 0],
        "empty_sequence",
    ),
    "token_above_int32": (group(1) | {"tokens": [[1, 2**31, 3]]}, ["body", "tokens", 0, 1], "int32_range"),
    "token_below_int32": (
        group(1) | {"tokens": [[-(2**31) - 1, 2, 3]]},
        ["body", "tokens", 0, 0],
        "int32_range",
    ),
    "token_beyond_64_bits": (group(1) | {"tokens": [[2**70, 2, 3]]}, ["body", "tokens", 0, 0], "int32_range"),
    "mask_above_int32": (group(1) | {"masks": [[1, 2, 2**40]]}, ["body", "masks", 0, 2], "int32_range"),
    "fractional_token": (group(1) | {"tokens": [[1.5, 2, 3]]}, ["body", "tokens", 0, 0], "int_from_float"),
    "string_token": (group(1) | {"tokens": [["a", 2, 3]]}, ["body", "tokens", 0, 0], "int_parsing"),
    "missing_scores": ({"tokens": [[1]], "masks": [[1]]}, ["body", "scores"], "missing"),
    "tokens_not_a_list": (group(1) | {"tokens": 5}, ["body", "tokens"], "list_type"),
    "negative_env_id": (group(1) | {"env_id": -1}, ["body", "env_id"], "greater_than_equal"),
    "unknown_env_id": (group(1) | {"env_id": 3}, ["body", "env_id"], "unknown_env_id"),
    "group_of_three_with_batch_of_four": (group(3), ["body", "tokens"], "unbatchable_group"),
    "group_larger_than_batch": (group(8), ["body", "tokens"], "unbatchable_group"),
    "sequence_longer_than_max_token_len": (group(1, 9), ["body", "tokens", 0], "sequence_too_long"),
    "body_is_a_list": ([group(1)], ["body"], "model_type"),
}


@pytest.mark.parametrize(("body", "loc", "kind"), list(BAD_GROUPS.values()), ids=list(BAD_GROUPS))
def test_bad_groups_are_rejected_and_change_nothing(url, body, loc, kind):
    register(url, batch_size=4, max_token_len=8)
    post_group(url, group(1, start=500))  # some state to keep
    before = snapshot(url)
    assert_422(post_group(url, body), loc, kind)
    assert snapshot(url) == before


def test_invalid_json_is_422_json_invalid(url):
    register(url, batch_size=4)
    before = snapshot(url)
    detail = assert_422(raw_post(url, "/scored_data", b'{"tokens": [[1, 2'), kind="json_invalid")
    assert detail[0]["loc"][0] == "body"
    assert_422(raw_post(url, "/scored_data", b""), ["body"], "missing")
    assert_422(raw_post(url, "/scored_data_list", b"[{]"), kind="json_invalid")
    assert snapshot(url) == before


@pytest.mark.parametrize("literal", ["NaN", "Infinity", "-Infinity", "1e999"])
def test_non_finite_scores(url, literal):
    register(url, batch_size=1)
    before = snapshot(url)
    body = '{"tokens": [[1, 2]], "masks": [[1, 2]], "scores": [' + literal + "]}"
    response = raw_post(url, "/scored_data", body.encode())
    assert response.status_code == 422, response.text
    assert snapshot(url) == before


def test_non_finite_values_anywhere(url):
    register(url, batch_size=1)
    before = snapshot(url)
    for field, value in [
        ("advantages", "[[NaN, 1.0]]"),
        ("inference_logprobs", "[[1.0, Infinity]]"),
        ("generation_params", '{"temperature": NaN}'),
        ("messages", '[[{"role": "user", "content": "x", "reward": -Infinity}]]'),
    ]:
        body = '{"tokens": [[1, 2]], "masks": [[1, 2]], "scores": [1.0], "' + field + '": ' + value + "}"
        response = raw_post(url, "/scored_data", body.encode())
        assert response.status_code == 422, (field, response.text)
        assert response.json()["detail"][0]["loc"][:2] == ["body", field]
    assert snapshot(url) == before


def test_big_integer_in_free_form_field_is_kept_exactly(url):
    """Not bad input: JSON integers of any size pass through free-form fields unchanged."""
    register(url, batch_size=1)
    body = (
        '{"tokens": [[1]], "masks": [[1]], "scores": [1.0], "generation_params": {"seed": '
        + str(2**80)
        + "}}"
    )
    assert raw_post(url, "/scored_data", body.encode()).json() == {"status": "received"}
    assert json.loads(get(url, "/batch").content)["batch"][0]["generation_params"]["seed"] == 2**80


def test_deeply_nested_json(url):
    register(url, batch_size=1)
    before = snapshot(url)
    nested = "[" * 5000 + "]" * 5000
    body = '{"tokens": [[1]], "masks": [[1]], "scores": [1.0], "images": ' + nested + "}"
    assert raw_post(url, "/scored_data", body.encode()).status_code == 422
    assert snapshot(url) == before


def test_list_is_all_or_nothing_and_names_the_bad_index(url):
    register(url, batch_size=4)
    before = snapshot(url)
    groups = [group(1), group(2, start=10), group(1) | {"scores": []}, group(1, start=30)]
    detail = assert_422(requests.post(f"{url}/scored_data_list", json=groups, timeout=TIMEOUT))
    assert detail[0]["loc"] == ["body", 2, "scores"]
    assert "group 2" in detail[0]["msg"]
    schema_bad = [group(1), {"tokens": "x"}]
    detail = assert_422(requests.post(f"{url}/scored_data_list", json=schema_bad, timeout=TIMEOUT))
    assert detail[0]["loc"][:2] == ["body", 1]
    assert_422(requests.post(f"{url}/scored_data_list", json={"not": "a list"}, timeout=TIMEOUT), ["body"])
    assert snapshot(url) == before


def test_groups_that_can_never_be_batched_for_an_env(url):
    started(url, batch_size=8)
    env_id = add_env(url, group_size=4)
    before = snapshot(url)
    # larger than the env's group size: could never be combined (the original kept it forever)
    assert_422(post_group(url, group(8, env_id=env_id)), ["body", "tokens"], "unbatchable_group")
    # a partial group that does not divide the group size would be stranded in the queue
    assert_422(post_group(url, group(3, env_id=env_id)), ["body", "tokens"], "unbatchable_group")
    assert snapshot(url) == before
    assert post_group(url, group(2, env_id=env_id)).json()["status"] == "buffered"


def test_env_id_required_once_an_env_has_a_minimum_allocation(url):
    started(url, batch_size=8)
    add_env(url, group_size=2, min_batch_allocation=0.5)
    before = snapshot(url)
    assert_422(post_group(url, group(2)), ["body", "env_id"], "env_id_required")
    assert snapshot(url) == before


@pytest.mark.parametrize(
    ("field", "value"),
    [("batch_size", 0), ("batch_size", -4), ("max_token_len", 0), ("starting_step", -1), ("batch_size", 1.5)],
)
def test_bad_registrations(url, field, value):
    response = register(url, **{field: value})
    assert_422(response, ["body", field])
    assert get(url, "/info").json()["batch_size"] == -1


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("group_size", 0),
        ("group_size", -2),
        ("max_token_length", 0),
        ("weight", -1.0),
        ("min_batch_allocation", -0.5),
        ("group_size", 3),  # does not divide the batch size 8
        ("group_size", 16),  # larger than the batch size
    ],
)
def test_bad_env_registrations(url, field, value):
    started(url, batch_size=8)
    response = register_env(url, **{field: value})
    assert_422(response, ["body", field])
    assert get(url, "/inspect/envs").json() == {"envs": []}


def test_non_json_content_type_is_415(url):
    register(url, batch_size=1)
    before = snapshot(url)
    for path in ("/scored_data", "/scored_data_list", "/register", "/register-env", "/batch/ack"):
        response = raw_post(url, path, json.dumps(group(1)).encode(), **{"Content-Type": "text/plain"})
        assert response.status_code == 415, (path, response.text)
    form = requests.post(f"{url}/scored_data", data={"tokens": "1"}, timeout=TIMEOUT)
    assert form.status_code == 415
    assert snapshot(url) == before
    # vendor JSON types and a missing Content-Type are accepted, as FastAPI does
    vendor = raw_post(
        url, "/scored_data", json.dumps(group(1)).encode(), **{"Content-Type": "application/vnd.x+json"}
    )
    assert vendor.status_code == 200
    bare = requests.post(f"{url}/scored_data", data=json.dumps(group(1, start=5)).encode(), timeout=TIMEOUT)
    assert bare.status_code == 200


def test_corrupt_and_truncated_gzip_is_400(url):
    register(url, batch_size=1)
    before = snapshot(url)
    good = gzip.compress(json.dumps(group(1)).encode())
    for payload in (
        b"not gzip at all",
        good[: len(good) // 2],
        good[:10] + b"\x00" * 20 + good[30:],
        good + b"junk",
    ):
        response = raw_post(url, "/scored_data", payload, **{"Content-Encoding": "gzip"})
        assert response.status_code == 400
        assert response.text == "Invalid gzip payload"
    assert snapshot(url) == before


def test_status_env_before_registration_and_after_reset(url):
    response = requests.get(f"{url}/status-env", json={"env_id": 0}, timeout=TIMEOUT)
    assert response.status_code == 409
    assert response.json()["detail"] == "Trainer not registered. Call /register first."
    started(url, batch_size=8)
    add_env(url, group_size=2)
    assert requests.get(f"{url}/status-env", json={"env_id": 0}, timeout=TIMEOUT).status_code == 200
    get(url, "/reset_data")
    assert requests.get(f"{url}/status-env", json={"env_id": 0}, timeout=TIMEOUT).status_code == 409


def test_status_env_bad_ids(url):
    started(url, batch_size=8)
    add_env(url, group_size=2)
    assert requests.get(f"{url}/status-env", json={"env_id": 1}, timeout=TIMEOUT).status_code == 404
    assert_422(requests.get(f"{url}/status-env", json={"env_id": -1}, timeout=TIMEOUT), ["body", "env_id"])
    assert_422(requests.get(f"{url}/status-env", json={"env_id": "x"}, timeout=TIMEOUT), ["body", "env_id"])


def test_status_env_with_zero_total_weight(url):
    started(url, batch_size=8)
    env_id = add_env(url, group_size=2, weight=0.0)
    response = requests.get(f"{url}/status-env", json={"env_id": env_id}, timeout=TIMEOUT)
    assert response.status_code == 200
    assert response.json()["env_weight"] == 0.01


def test_disconnect_env_bad_ids_keep_the_failure_body(url):
    assert (
        requests.post(f"{url}/disconnect-env", json={"env_id": 0}, timeout=TIMEOUT).json()["status"]
        == "failure"
    )
    started(url, batch_size=8)
    add_env(url, group_size=2)
    negative = requests.post(f"{url}/disconnect-env", json={"env_id": -1}, timeout=TIMEOUT).json()
    assert negative == {"status": "failure", "error": "env_id must be >= 0"}
    assert get(url, "/inspect/envs").json()["envs"][0]["connected"] is True


def test_ack_unknown_batch_is_404(url):
    register(url, batch_size=1)
    assert requests.post(f"{url}/batch/ack", json={"batch_id": 12345}, timeout=TIMEOUT).status_code == 404
    assert_422(requests.post(f"{url}/batch/ack", json={}, timeout=TIMEOUT), ["body", "batch_id"])


def test_wrong_methods_and_unknown_paths(url):
    assert requests.post(f"{url}/reset_data", timeout=TIMEOUT).status_code == 405
    assert get(url, "/scored_data").status_code == 405
    assert get(url, "/nope").status_code == 404
    assert_422(get(url, "/inspect/recent", params={"limit": 0}), ["query", "limit"])
    assert_422(get(url, "/inspect/recent", params={"limit": "many"}), ["query", "limit"])
