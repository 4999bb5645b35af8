"""``run-api`` command line, configuration file, bind safety, and bearer-key authentication."""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys

import pytest
import requests

from atroposlib.api.config import ApiConfig, is_loopback
from atroposlib.testing.api_process import free_port, launch_api
from atroposlib.utils.processes import stop_process, wait_until_ok
from tests.helpers.api import TIMEOUT, get, group, post_group, preflight, register

RUN_API = [sys.executable, "-m", "atroposlib.cli.run_api"]


def run_cli(args, env=None, timeout=60):
    merged = {k: v for k, v in os.environ.items() if k != "ATROPOS_API_KEY"}
    merged.update(env or {})
    return subprocess.run([*RUN_API, *args], capture_output=True, text=True, timeout=timeout, env=merged)


@contextlib.contextmanager
def running_api(args, *, url, headers=None, cwd=None, env=None, process_group=False):
    """``run-api ARGS`` exactly as typed on a command line (no flags added), for the ``with`` block.

    Waits until ``GET {url}/info`` (sent with ``headers``) answers 200; stops the process afterwards, with its
    whole process group when ``process_group`` is set.
    """
    proc = subprocess.Popen(
        [*RUN_API, *args],
        cwd=cwd,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env=env,
        start_new_session=True,
    )
    try:
        wait_until_ok(proc, f"{url}/info", name="run-api", timeout=30, interval=0.05, headers=headers)
        yield proc
    finally:
        stop_process(proc, 15, process_group=process_group)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--port", "abc"], "invalid int value"),
        (["--no-such-flag"], "unrecognized arguments"),
        (["--store", "disk"], "invalid choice"),
        (["--max-body-bytes", "0"], "max-body-bytes"),
        (["--max-queue-sequences", "-1"], "invalid max-queue-sequences"),
        (["--port", "70000"], "port"),
        (["--host", "0.0.0.0"], "without an API key"),
        (["--host", "::"], "without an API key"),
        (["--config", "/nonexistent/api.yaml"], "cannot read --config"),
    ],
)
def test_bad_command_lines_fail_with_one_line_and_status_2(args, needle, tmp_path):
    result = run_cli([*args, "--data-dir", str(tmp_path)])
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert lines[0].startswith("run-api: error:") and needle in lines[0]


def test_bad_config_file(tmp_path):
    config = tmp_path / "api.yaml"
    config.write_text("max_queue_sequences: lots\n")
    result = run_cli(["--config", str(config)])
    assert result.returncode == 2 and "max-queue-sequences" in result.stderr
    config.write_text("unknown_field: 1\n")
    result = run_cli(["--config", str(config)])
    assert result.returncode == 2 and len(result.stderr.strip().splitlines()) == 1


def test_unusable_data_dir_exits_1(tmp_path):
    blocker = tmp_path / "file"
    blocker.write_text("")
    result = run_cli(["--port", str(free_port()), "--data-dir", str(blocker / "sub")])
    assert result.returncode == 1
    assert len(result.stderr.strip().splitlines()) == 1 and "data dir" in result.stderr


def test_original_launch_line_localhost(tmp_path):
    """``python -m atroposlib.cli.run_api --host localhost --port N`` (how the original's tests start it)."""
    port = free_port()
    url = f"http://localhost:{port}"
    with running_api(["--host", "localhost", "--port", str(port)], url=url, cwd=tmp_path):
        assert get(url, "/status").json() == {"current_step": 0, "queue_size": 0}
    assert (tmp_path / "atropos_data" / "trajectory_api.sqlite3").exists()  # the default data dir


def test_config_file_and_flag_precedence(tmp_path):
    config = tmp_path / "api.yaml"
    config.write_text("max_queue_sequences: 4\nretry_after_seconds: 7\nstore: memory\n")
    with launch_api(["--config", str(config), "--max-queue-sequences", "2"], data_dir=tmp_path / "d") as api:
        register(api.url, batch_size=2)
        assert post_group(api.url, group(2)).status_code == 200
        full = post_group(api.url, group(2, start=9))
        assert full.status_code == 503 and full.headers["Retry-After"] == "7"
        assert get(api.url, "/health").json()["store"] == "memory"


def test_non_loopback_bind_with_allow_unauthenticated(tmp_path):
    port = free_port()
    args = ["--host", "0.0.0.0", "--port", str(port), "--allow-unauthenticated", "--data-dir", str(tmp_path)]
    with running_api(args, url=f"http://127.0.0.1:{port}"):
        pass  # it started and answers /info without a key


def test_non_loopback_bind_with_key_from_environment(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with running_api(
        ["--host", "0.0.0.0", "--port", str(port), "--data-dir", str(tmp_path)],
        url=url,
        headers={"Authorization": "Bearer s3cret"},
        env=dict(os.environ, ATROPOS_API_KEY="s3cret"),
    ):
        assert requests.get(f"{url}/info", timeout=TIMEOUT).status_code == 401


def test_is_loopback():
    assert is_loopback("127.0.0.1") and is_loopback("localhost") and is_loopback("::1")
    assert not is_loopback("0.0.0.0") and not is_loopback("::") and not is_loopback("10.1.2.3")
    assert ApiConfig(host="0.0.0.0").bind_problem()
    assert ApiConfig(host="0.0.0.0", api_key="k").bind_problem() is None
    assert ApiConfig(host="0.0.0.0", allow_unauthenticated=True).bind_problem() is None
    assert ApiConfig(api_key="").api_key is None


# ------------------------------------------------------------------ authentication

ENDPOINTS = [
    ("GET", "/", None),
    ("GET", "/info", None),
    ("GET", "/status", None),
    ("GET", "/wandb_info", None),
    ("GET", "/batch", None),
    ("GET", "/latest_example", None),
    ("GET", "/reset_data", None),
    ("GET", "/health", None),
    ("GET", "/metrics", None),
    ("GET", "/inspect/recent", None),
    ("GET", "/inspect/envs", None),
    ("GET", "/status-env", {"env_id": 0}),
    ("POST", "/register", {}),
    ("POST", "/register-env", {}),
    ("POST", "/disconnect-env", {"env_id": 0}),
    ("POST", "/scored_data", {}),
    ("POST", "/scored_data_list", []),
    ("POST", "/batch/ack", {"batch_id": 1}),
    ("POST", "/batch/replay", None),
]


@pytest.fixture(scope="module")
def secured(tmp_path_factory):
    with launch_api(data_dir=tmp_path_factory.mktemp("auth"), api_key="correct-horse") as api:
        yield api


@pytest.mark.parametrize(("method", "path", "body"), ENDPOINTS, ids=[f"{m} {p}" for m, p, _ in ENDPOINTS])
def test_every_endpoint_needs_the_key(secured, method, path, body):
    for headers in ({}, {"Authorization": "Bearer wrong"}, {"Authorization": "Basic correct-horse"}):
        response = requests.request(
            method, f"{secured.url}{path}", json=body, headers=headers, timeout=TIMEOUT
        )
        assert response.status_code == 401, (path, headers)
        assert response.headers["WWW-Authenticate"] == "Bearer"
    response = requests.request(
        method, f"{secured.url}{path}", json=body, headers=secured.headers(), timeout=TIMEOUT
    )
    assert response.status_code != 401


def test_authenticated_flow_and_unauthenticated_changes_nothing(secured):
    url, headers = secured.url, secured.headers()
    requests.get(f"{url}/reset_data", headers=headers, timeout=TIMEOUT)
    assert register(url, headers=headers, batch_size=1).status_code == 200
    assert post_group(url, group(1), headers=headers).json() == {"status": "received"}
    assert post_group(url, group(1, start=5)).status_code == 401
    assert requests.get(f"{url}/reset_data", timeout=TIMEOUT).status_code == 401
    assert requests.get(f"{url}/status", headers=headers, timeout=TIMEOUT).json()["queue_size"] == 1
    batch = requests.get(f"{url}/batch", headers=headers, timeout=TIMEOUT).json()["batch"]
    assert batch[0]["tokens"] == [[0, 1, 2]]


def test_cors_preflight_passes_without_the_key(secured):
    assert preflight(secured.url, "/scored_data", "http://ui.example").status_code == 200


def test_reload_mode_serves(tmp_path):
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    # The reloader runs the server in a child process: stop the whole session.
    with running_api(
        ["--reload", "--port", str(port), "--data-dir", str(tmp_path), "--store", "memory"],
        url=url,
        process_group=True,
    ):
        assert get(url, "/health").json()["store"] == "memory"


def test_structured_json_logs(tmp_path):
    with launch_api(["--log-format", "json"], data_dir=tmp_path) as api:
        register(api.url, batch_size=4)
        post_group(api.url, group(4))
        get(api.url, "/batch")
        log_text = api.log_path.read_text()
    records = [json.loads(line) for line in log_text.splitlines() if line.startswith("{")]
    by_message = {r["message"]: r for r in records}
    assert by_message["trainer registered"]["batch_size"] == 4
    assert by_message["Sending batch of 4 sequences"]["groups"] == 1
    assert all({"ts", "level", "logger", "message"} <= set(r) for r in records)


def test_port_in_use_fails_with_one_line_and_writes_nothing(tmp_path):
    """A busy port is named, with how to choose another, before the data directory is created."""
    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    data_dir = tmp_path / "api"
    try:
        result = run_cli(["--port", str(port), "--data-dir", str(data_dir)])
    finally:
        holder.close()
    assert result.returncode == 1
    lines = result.stderr.strip().splitlines()
    assert lines == [
        f"run-api: error: port {port} on 127.0.0.1 is already in use by another process; choose another with --port"
    ]
    assert not data_dir.exists()
