"""``process`` and ``evaluate`` against an inference server that is not running: the wait is reported and,
after ``--env.server_unavailable_timeout``, the run stops with one error line (real subprocesses)."""

from __future__ import annotations

import pytest

from atroposlib.testing.api_process import free_port
from tests.helpers.cli_runs import ENVIRONMENTS, GSM8K_SAMPLE, run_env


@pytest.mark.parametrize("mode", ["process", "evaluate"])
def test_down_inference_server_ends_the_run_with_one_line(mode, tiny_model_dir, tmp_path):
    url = f"http://127.0.0.1:{free_port()}/v1"
    result = run_env(
        ENVIRONMENTS / "gsm8k_server.py",
        [
            mode,
            "--env.dataset_path",
            GSM8K_SAMPLE,
            "--env.tokenizer_name",
            tiny_model_dir,
            "--env.use_wandb",
            "false",
            "--env.total_steps",
            "2",
            "--env.server_unavailable_timeout",
            "1",
            "--openai.base_url",
            url,
            "--openai.server_type",
            "vllm",
            "--openai.model_name",
            "m",
        ],
        cwd=tmp_path,
        timeout=240,
    )
    assert result.returncode == 1, result.stderr[-3000:]
    errors = [line for line in result.stderr.splitlines() if ": error: " in line]
    assert len(errors) == 1, result.stderr[-3000:]
    assert url in errors[0] and "cannot connect" in errors[0] and "--openai.base_url" in errors[0]
    assert "--env.server_unavailable_timeout 1 s" in errors[0]
    waits = [line for line in result.stderr.splitlines() if "is not answering" in line]
    assert len(waits) == 1 and url in waits[0]
    assert "Traceback" not in result.stderr and "never retrieved" not in result.stderr
    assert "failed (attempt" not in result.stderr  # the health check reports it, not every retry
