"""``serve`` through the CLI: an environment file registers with a real run-api, sends groups, stops on SIGTERM."""

from __future__ import annotations

import os
import subprocess
import sys

from atroposlib.testing.scripted_server import launch_scripted_server
from tests.helpers.cli_runs import LEGACY_ENVS, scripted_flags

PHRASES = ["red fox", "blue sky", "green tea", "gold coin", "white snow"]


def _echo_respond(prompt, index):
    phrase = next((p for p in PHRASES if f"Repeat exactly: {p}" in str(prompt)), "?")
    return f" {phrase}" if index % 2 == 0 else " something else"


def test_serve_registers_under_the_env_name_and_sends_groups(scripted, api):
    served = scripted.serve(
        LEGACY_ENVS / "echo_completion_env.py",
        ["--env.total_steps", "100"],
        _echo_respond,
        api,
        server_type=None,
    )
    # wandb_name was not set in config_init: the env's name is used to register (never None)
    assert served.registration["desired_name"] == "echo_completion"
    assert served.registration["group_size"] == 4
    assert sorted(served.group["scores"]) == [-0.2, -0.2, 1.0, 1.0]
    # config_init's server (localhost:9004) gave way to the --openai.base_url given on the command line
    assert {r["path"] for r in served.requests} == {"/v1/completions"}
    assert "received SIGTERM" in served.log and "Traceback" not in served.log


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
