"""``/health``, ``/metrics`` and the read-only inspection endpoints."""

from __future__ import annotations

import requests

from tests.helpers.api import TIMEOUT, get, group, post_group, register, register_env


def test_health(url):
    health = get(url, "/health").json()
    assert health["status"] == "ok" and health["store"] == "sqlite" and health["registered"] is False
    register(url, batch_size=4)
    post_group(url, group(2))
    health = get(url, "/health").json()
    assert (health["registered"], health["queue_groups"], health["queue_sequences"]) == (True, 1, 2)


def test_metrics_expose_queue_counters_latency_and_per_env_scores(url):
    register(url, batch_size=4)
    get(url, "/batch")
    env_id = register_env(url, group_size=2).json()["env_id"]
    post_group(url, group(2, scores=[1.0, 0.0], env_id=env_id))
    post_group(url, group(2, start=10, scores=[1.0, 1.0], env_id=env_id))
    post_group(url, group(2, start=20))
    before = get(url, "/metrics")
    assert before.headers["content-type"].startswith("text/plain")
    text = before.text
    assert "atropos_queue_groups 3.0" in text
    assert "atropos_queue_sequences 6.0" in text
    assert f'atropos_env_mean_score{{env_id="{env_id}",env_name="test_env_0"}} 0.75' in text
    assert f'atropos_env_groups_received_total{{env_id="{env_id}",env_name="test_env_0"}} 2.0' in text
    assert get(url, "/batch").json()["batch"] is not None
    text = get(url, "/metrics").text
    assert "atropos_batch_latency_seconds_count" in text
    assert "atropos_batches_served_total" in text and "atropos_groups_received_total" in text
    post_group(url, {"tokens": []})
    assert 'atropos_requests_rejected_total{reason="missing"}' in get(url, "/metrics").text


def test_inspect_recent_is_read_only_newest_first_and_filterable(url):
    register(url, batch_size=4)
    get(url, "/batch")
    env_id = register_env(url, group_size=2).json()["env_id"]
    post_group(url, group(2, start=0))
    post_group(url, group(2, start=10, env_id=env_id))
    post_group(url, group(2, start=20))
    before = (get(url, "/status").json(), get(url, "/health").json())
    recent = get(url, "/inspect/recent", params={"limit": 2}).json()
    assert [g["group"]["tokens"][0][0] for g in recent["groups"]] == [20, 10]
    assert recent["groups"][0]["seq"] > recent["groups"][1]["seq"]
    assert recent["groups"][1]["env_name"] == "test_env_0" and recent["groups"][0]["env_name"] is None
    assert recent["current_step"] == 0 and recent["groups"][0]["received_step"] == 0
    assert isinstance(recent["groups"][0]["received_at"], float)
    only_env = get(url, "/inspect/recent", params={"env_id": env_id}).json()["groups"]
    assert [g["group"]["env_id"] for g in only_env] == [env_id]
    assert (get(url, "/status").json(), get(url, "/health").json()) == before
    assert get(url, "/batch").json()["batch"] is not None
    served = get(url, "/inspect/recent").json()["groups"]
    assert len(served) == 3  # served groups stay visible within the inspection window


def test_inspect_envs(url):
    register(url, batch_size=4)
    get(url, "/batch")
    register_env(url, group_size=2, weight=2.5, min_batch_allocation=0.25, desired_name="math")
    assert get(url, "/inspect/envs").json() == {
        "envs": [
            {
                "env_id": 0,
                "real_name": "math_0",
                "desired_name": "math",
                "group_size": 2,
                "max_context_len": 2048,
                "weight": 2.5,
                "connected": True,
                "min_batch_allocation": 0.25,
            }
        ]
    }


def test_openapi_documents_the_routes(url):
    spec = get(url, "/openapi.json").json()
    for path in (
        "/scored_data",
        "/scored_data_list",
        "/batch",
        "/batch/ack",
        "/inspect/recent",
        "/status-env",
    ):
        assert path in spec["paths"]
    body = spec["paths"]["/scored_data"]["post"]["requestBody"]["content"]["application/json"]["schema"]
    assert "tokens" in body["properties"]


def groups_received(url: str) -> float:
    for line in get(url, "/metrics").text.splitlines():
        if line.startswith("atropos_groups_received_total "):
            return float(line.rsplit(" ", 1)[1])
    raise AssertionError("atropos_groups_received_total is missing")


def test_metrics_count_accepted_groups(url):
    register(url, batch_size=4)
    before = groups_received(url)
    assert post_group(url, group(2)).json() == {"status": "received"}
    escaped = b'{"tokens":[[1]],"masks":[[1]],"scores":[1],"images":"\\u005b"}'
    answer = requests.post(
        f"{url}/scored_data", data=escaped, headers={"Content-Type": "application/json"}, timeout=TIMEOUT
    )
    assert answer.json() == {"status": "received"}
    assert post_group(url, group(1, tokens=[[1.0, 2.0, 3.0]])).json() == {"status": "received"}
    assert post_group(url, group(2, scores=[1.0])).status_code == 422  # rejected: not counted
    assert groups_received(url) - before == 3


def test_request_only_endpoints_are_called_with_the_request_alone():
    """Routes whose endpoint takes only the Request skip FastAPI's parameter resolution; the others
    (query parameters) keep it, so their 422s still come from FastAPI."""
    from starlette.routing import request_response

    from atroposlib.api.server import RequestRoute, create_app
    from atroposlib.api.store import MemoryStore

    app = create_app(store=MemoryStore())
    routes = {r.path: r for r in app.routes if isinstance(r, RequestRoute)}
    plain_app = request_response(lambda request: None).__qualname__
    for path in ("/scored_data", "/scored_data_list", "/batch", "/register"):
        assert routes[path].app.__module__ == "starlette.routing", path
        assert routes[path].app.__qualname__ == plain_app
    assert routes["/inspect/recent"].app.__module__ == "fastapi.routing"
    assert routes["/"].app.__module__ == "fastapi.routing"
