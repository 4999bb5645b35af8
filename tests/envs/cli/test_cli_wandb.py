"""``process`` turns wandb on by default (as the original did) but never needs a login: offline without a key."""

from __future__ import annotations

import os

import pytest

from atroposlib.testing.scripted_server import launch_scripted_server
from tests.helpers.cli_runs import ENVIRONMENTS, arithmetic_responder, read_jsonl, run_env

pytestmark = pytest.mark.slow


def test_process_with_default_wandb_and_no_key_runs_offline(tmp_path, tiny_model_dir):
    env = {k: v for k, v in os.environ.items() if not k.startswith("WANDB")}
    env.update(HOME=str(tmp_path), NETRC=str(tmp_path / "no-netrc"), WANDB_SILENT="true")
    with launch_scripted_server(respond=arithmetic_responder(), tokenizer=tiny_model_dir) as server:
        result = run_env(
            ENVIRONMENTS / "arithmetic_server.py",
            [
                "process",
                "--env.tokenizer_name", tiny_model_dir,
                "--openai.base_url", server.base_url,
                "--openai.model_name", "scripted-model",
                "--env.total_steps", "2",
                "--env.group_size", "2",
            ],
            cwd=tmp_path,
            env=env,
        )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "offline mode" in result.stderr
    assert list((tmp_path / "wandb").glob("offline-run-*")), "no offline wandb run was written"
    assert len(read_jsonl(tmp_path / "data" / "arithmetic.jsonl")) == 2
