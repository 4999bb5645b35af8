"""``--testing`` (the in-process fake backend) answers in the environment's tokenizer: replies read as text."""

from __future__ import annotations

from transformers import AutoTokenizer

from atroposlib.envs.server_handling.server_harness import DEFAULT_RESPONSE
from tests.helpers.cli_runs import ENVIRONMENTS, read_jsonl, run_env


def test_testing_flag_gives_readable_replies(tiny_model_dir, tmp_path):
    out = tmp_path / "groups.jsonl"
    result = run_env(
        ENVIRONMENTS / "arithmetic_server.py",
        ["process", "--testing", "--openai.model_name", tiny_model_dir, "--env.use_wandb", "false",
         "--env.total_steps", "1", "--env.data_path_to_save_groups", out],
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    group = read_jsonl(out)[0]
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    for tokens, mask in zip(group["tokens"], group["masks"], strict=True):
        reply = tokenizer.decode(
            [t for t, m in zip(tokens, mask, strict=True) if m != -100], skip_special_tokens=True
        )
        assert reply == DEFAULT_RESPONSE
    assert group["messages"][0][-1]["content"] == DEFAULT_RESPONSE
