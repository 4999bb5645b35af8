"""The direct (fast) path of the hot endpoints answers exactly like the full FastAPI stack.

A request with an ``Origin`` header always takes the full stack (for CORS), so sending the same
request with and without one compares the two paths on the same server.
"""

from __future__ import annotations

import gzip
import json

import pytest
import requests

from atroposlib.testing.api_process import launch_api
from tests.api.helpers import TIMEOUT, get, group, register

ORIGIN = {"Origin": "http://ui.example"}
COMPARED_HEADERS = ("content-type", "content-encoding", "vary", "retry-after", "www-authenticate")


def headers_of(response: requests.Response):
    """The compared headers; CORS's own ``Vary: Origin`` (caused by the Origin header) is dropped."""
    headers = {h: response.headers.get(h) for h in COMPARED_HEADERS}
    vary = [v.strip() for v in (headers["vary"] or "").split(",") if v.strip() and v.strip() != "Origin"]
    headers["vary"] = ", ".join(vary) or None
    return headers


def comparable(response: requests.Response):
    return response.status_code, headers_of(response), response.content


def both_paths(method, url, path, **kwargs):
    """The same request through the fast path and through the full stack."""
    headers = dict(kwargs.pop("headers", {}) or {})
    fast = requests.request(method, f"{url}{path}", headers=headers, timeout=TIMEOUT, **kwargs)
    full = requests.request(method, f"{url}{path}", headers={**headers, **ORIGIN}, timeout=TIMEOUT, **kwargs)
    assert "access-control-allow-origin" not in fast.headers
    return fast, full


@pytest.mark.parametrize(
    ("data", "headers"),
    [
        (json.dumps(group(1)).encode(), {"Content-Type": "application/json"}),
        (json.dumps(group(3)).encode(), {"Content-Type": "application/json"}),  # 422: cannot batch
        (json.dumps({"tokens": [[1.5]], "masks": [[1]], "scores": [1]}).encode(), {}),  # 422 schema
        (b"{not json", {"Content-Type": "application/json"}),
        (b"", {"Content-Type": "application/json"}),
        (json.dumps(group(1)).encode(), {"Content-Type": "text/plain"}),  # 415
        (b"garbage", {"Content-Encoding": "gzip"}),  # 400 Invalid gzip payload
        (gzip.compress(json.dumps(group(2)).encode()), {"Content-Encoding": "gzip"}),
    ],
)
def test_ingest_answers_match(url, data, headers):
    register(url, batch_size=4)
    fast, full = both_paths("POST", url, "/scored_data", data=data, headers=headers)
    assert comparable(fast) == comparable(full)
    listed = b"[" + data + b"]" if "Content-Encoding" not in headers else data
    fast, full = both_paths("POST", url, "/scored_data_list", data=listed, headers=headers)
    assert comparable(fast) == comparable(full)


def test_batch_answers_match(url):
    fast, full = both_paths("GET", url, "/batch")  # not registered: the original's error body
    assert comparable(fast) == comparable(full)
    register(url, batch_size=8)
    fast, full = both_paths("GET", url, "/batch")  # null batch
    assert comparable(fast) == comparable(full) and fast.json() == {"batch": None}
    for i in range(4):
        requests.post(f"{url}/scored_data", json=group(8, 64, start=1000 * i), timeout=TIMEOUT)
    for accept in ("gzip", "identity"):
        fast, full = both_paths("GET", url, "/batch", headers={"Accept-Encoding": accept})
        assert fast.status_code == full.status_code == 200
        assert headers_of(fast) == headers_of(full)
        assert fast.headers.get("content-encoding") == ("gzip" if accept == "gzip" else None)
        # LIFO: the first call serves the newest pre-formed batch, the second the next one
        assert fast.json()["batch"][0]["tokens"][0][0] == 3000 - 1000 * (2 if accept == "identity" else 0)
        assert full.json()["batch_id"] == fast.json()["batch_id"] - 1


def test_backpressure_answers_match(tmp_path):
    with launch_api(["--max-queue-sequences", "1", "--retry-after-seconds", "4"], data_dir=tmp_path) as api:
        register(api.url, batch_size=1)
        requests.post(f"{api.url}/scored_data", json=group(1), timeout=TIMEOUT)
        fast, full = both_paths("POST", api.url, "/scored_data", json=group(1, start=5))
        assert fast.status_code == 503 and comparable(fast) == comparable(full)
        assert fast.headers["retry-after"] == "4"


def test_auth_answers_match(tmp_path):
    with launch_api(data_dir=tmp_path, api_key="k") as api:
        for path, method in (("/scored_data", "POST"), ("/batch", "GET")):
            fast, full = both_paths(method, api.url, path, json=group(1))
            assert fast.status_code == 401 and comparable(fast) == comparable(full)
        ok = requests.post(f"{api.url}/scored_data", json=group(1), headers=api.headers(), timeout=TIMEOUT)
        assert ok.status_code == 200
        assert get(api.url, "/status", headers=api.headers()).json()["queue_size"] == 1
