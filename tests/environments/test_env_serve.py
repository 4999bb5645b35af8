"""``serve`` through the CLI: an environment file registers with a real run-api, sends groups, stops on SIGTERM."""

from __future__ import annotations

import os
import signal
import subprocess
import sys

import requests

from atroposlib.testing.scripted_server import launch_scripted_server
from tests.helpers.cli_runs import LEGACY_ENVS, scripted_flags
from tests.helpers.serve import wait_for

PHRASES = ["red fox", "blue sky", "green tea", "gold coin", "white snow"]


def _echo_respond(prompt, index):
    phrase = next((p for p in PHRASES if f"Repeat exactly: {p}" in str(prompt)), "?")
    return f" {phrase}" if index % 2 == 0 else " something else"


def test_serve_registers_under_the_env_name_and_sends_groups(tmp_path, tiny_model_dir, api):
    registration = {
        "wandb_group": "g",
        "wandb_project": "p",
        "batch_size": 8,
        "max_token_len": 2048,
        "checkpoint_dir": str(tmp_path / "ckpt"),
        "save_checkpoint_interval": -1,
        "starting_step": 0,
        "num_steps": 100,
    }
    requests.post(
        f"{api.url}/register", json=registration, headers=api.headers(), timeout=10
    ).raise_for_status()
    # the API tells envs to wait until the trainer has asked for its first batch
    requests.get(f"{api.url}/batch", headers=api.headers(), timeout=10).raise_for_status()
    with launch_scripted_server(respond=_echo_respond, tokenizer=tiny_model_dir) as server:
        proc = subprocess.Popen(
            [
                sys.executable, str(LEGACY_ENVS / "echo_completion_env.py"), "serve",
                "--env.tokenizer_name", str(tiny_model_dir),
                "--env.rollout_server_url", api.url,
                "--env.total_steps", "100",
                "--openai.base_url", server.base_url,
                "--openai.model_name", "scripted-model",
            ],
            cwd=tmp_path,
            env={**os.environ, "HF_HUB_OFFLINE": "1"},
            stdout=subprocess.DEVNULL,
            stderr=open(tmp_path / "env.log", "w"),
        )  # fmt: skip
        try:
            envs = wait_for(
                lambda: requests.get(f"{api.url}/inspect/envs", headers=api.headers(), timeout=5).json()[
                    "envs"
                ],
                120,
                0.5,
                "the env to register",
            )
            recent = wait_for(
                lambda: requests.get(f"{api.url}/inspect/recent", headers=api.headers(), timeout=5).json()[
                    "groups"
                ],
                120,
                0.5,
                "a scored group",
            )
        finally:
            proc.send_signal(signal.SIGTERM)
            code = proc.wait(timeout=60)
        paths = {r["path"] for r in server.requests}
    log = (tmp_path / "env.log").read_text()
    assert code == 0, log[-3000:]
    # wandb_name was not set in config_init: the env's name is used to register (never None)
    assert envs[0]["desired_name"] == "echo_completion"
    assert envs[0]["group_size"] == 4
    group = recent[0]["group"]
    assert sorted(group["scores"]) == [-0.2, -0.2, 1.0, 1.0]
    # config_init's server (localhost:9004) gave way to the --openai.base_url given on the command line
    assert paths == {"/v1/completions"}
    assert "received SIGTERM" in log and "Traceback" not in log


def test_serve_refused_by_the_api_ends_in_one_line(tmp_path, tiny_model_dir):
    """A wrong API key is the user's to fix: ``serve`` exits 1 with the API's reason, no traceback."""
    from atroposlib.testing.api_process import launch_api

    env = {k: v for k, v in os.environ.items() if k != "ATROPOS_API_KEY"}
    with launch_api(data_dir=tmp_path / "api", api_key="right-key") as api:
        with launch_scripted_server(respond=_echo_respond, tokenizer=tiny_model_dir) as server:
            result = subprocess.run(
                [
                    sys.executable, str(LEGACY_ENVS / "echo_completion_env.py"), "serve",
                    *scripted_flags(server.base_url, tiny_model_dir),
                    "--env.rollout_server_url", api.url,
                ],
                cwd=tmp_path,
                env={**env, "HF_HUB_OFFLINE": "1"},
                capture_output=True,
                text=True,
                timeout=120,
            )  # fmt: skip
    assert result.returncode == 1, result.stderr[-3000:]
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.startswith("echo_completion_env.py: error: [echo_completion] the API refused registration:")
    assert "API key" in last
