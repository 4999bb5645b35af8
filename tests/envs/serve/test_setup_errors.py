"""A failing ``setup()`` ends every command with one line naming the cause, never a traceback."""

from __future__ import annotations

import json
import os

import pytest

from atroposlib.envs.serve.setup_errors import EnvSetupError, run_setup
from tests.helpers.cli_runs import ENVIRONMENTS, run_env


class _Broken:
    async def setup(self):
        raise ValueError("data.jsonl: row 3:\n missing field 'answer'")


async def test_run_setup_wraps_the_cause_in_one_line(monkeypatch):
    monkeypatch.delenv("ATROPOS_CLI_TRACEBACK", raising=False)
    with pytest.raises(
        EnvSetupError, match=r"^_Broken.setup\(\) failed: data.jsonl: row 3: missing field 'answer'$"
    ):
        await run_setup(_Broken())
    monkeypatch.setenv("ATROPOS_CLI_TRACEBACK", "1")
    with pytest.raises(ValueError):
        await run_setup(_Broken())


@pytest.mark.parametrize("mode", ["process", "evaluate", "serve"])
def test_a_bad_data_file_is_one_line_in_every_mode(mode, tmp_path, tiny_model_dir):
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps({"problem": "1+1?", "solution": "2"}) + "\n")
    result = run_env(
        ENVIRONMENTS / "math_server.py",
        [
            mode,
            "--env.dataset_path", bad,
            "--env.eval_dataset_path", bad,
            "--env.tokenizer_name", tiny_model_dir,
            "--openai.base_url", "http://127.0.0.1:9/v1",
            "--openai.model_name", "m",
            "--env.use_wandb", "false",
            "--env.rollout_server_url", "http://127.0.0.1:9",
        ],
        cwd=tmp_path,
        env={**os.environ, "ATROPOS_CLI_TRACEBACK": ""},
    )  # fmt: skip
    assert result.returncode == 1, result.stderr[-2000:]
    assert "Traceback" not in result.stderr
    last = result.stderr.strip().splitlines()[-1]
    assert last.endswith(f"{bad}: row 0: missing field 'answer'"), last
    assert "setup() failed" in last
