"""BaseEnvConfig: defaults, unknown keys, subclass re-declaration, enum strings."""

from __future__ import annotations

import logging

import pytest
from pydantic import ValidationError

from atroposlib.envs.base import BaseEnvConfig, EvalHandlingEnum


def test_defaults_match_the_original():
    c = BaseEnvConfig()
    assert c.group_size == 4
    assert c.max_num_workers == -1
    assert c.max_eval_workers == 16
    assert c.max_num_workers_per_node == 8
    assert c.steps_per_eval == 100
    assert c.max_token_length == 2048
    assert c.eval_handling is EvalHandlingEnum.STOP_TRAIN
    assert c.eval_limit_ratio == 0.5
    assert c.inference_weight == 1.0
    assert c.batch_size == -1
    assert c.max_batches_offpolicy == 3
    assert (
        c.tokenizer_name is None
    )  # resolved to the served model (tests/envs/cli/test_cli_tokenizer_default.py)
    assert c.use_wandb is True
    assert c.rollout_server_url == "http://localhost:8000"
    assert c.total_steps == 1000
    assert c.wandb_name is None
    assert c.num_rollouts_to_keep == 32
    assert c.num_rollouts_per_group_for_logging == 1
    assert c.ensure_scores_are_not_same is True
    assert c.data_path_to_save_groups is None
    assert c.data_dir_to_save_evals is None
    assert c.min_items_sent_before_logging == 2
    assert c.include_messages is False
    assert c.min_batch_allocation is None
    assert c.worker_timeout == 600
    assert c.thinking_mode is False
    assert c.reasoning_effort is None
    assert c.max_reasoning_tokens is None
    assert c.custom_thinking_prompt is None


def test_unknown_keys_in_code_are_dropped_with_one_warning_compat_keys_silently(caplog):
    """Built in code (an environment file written for 0.4.0), an unknown key is dropped and logged once;
    the compatibility keys, which 0.4.0's own files set, are dropped silently. (serve/process/evaluate
    refuse unknown keys: tests/envs/cli.)"""
    caplog.set_level(logging.WARNING, logger="atroposlib.envs.env_config")
    c = BaseEnvConfig(group_size=2, score_buffer_size=4, scor_buffer_typo=1)
    BaseEnvConfig(scor_buffer_typo=5)
    assert c.group_size == 2
    assert not hasattr(c, "score_buffer_size") and not hasattr(c, "scor_buffer_typo")
    assert [r for r in caplog.records if "score_buffer_size" in r.getMessage()] == []
    warnings = [r for r in caplog.records if "scor_buffer_typo" in r.getMessage()]
    assert len(warnings) == 1


def test_subclass_redeclares_defaults_and_adds_fields():
    class GameConfig(BaseEnvConfig):
        group_size: int = 16
        wandb_name: str = "blackjack"
        max_turns: int = 5

    c = GameConfig()
    assert (c.group_size, c.wandb_name, c.max_turns) == (16, "blackjack", 5)
    assert GameConfig(max_turns=2).model_dump()["max_turns"] == 2


def test_eval_handling_accepts_strings_and_reasoning_bounds():
    assert BaseEnvConfig(eval_handling="LIMIT_TRAIN").eval_handling is EvalHandlingEnum.LIMIT_TRAIN
    with pytest.raises(ValidationError):
        BaseEnvConfig(max_reasoning_tokens=10)
    with pytest.raises(ValidationError):
        BaseEnvConfig(eval_handling="SOMETIMES")
