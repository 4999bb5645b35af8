"""One meaning per name: ``micro_batch_size`` (sequences per forward/backward pass) and ``refresh_interval``
(steps between inference refreshes), with their older names ``batch_size`` and ``vllm_restart_interval``
accepted for the very same settings on the command line, in YAML and in code."""

from __future__ import annotations

import pytest
import yaml
from pydantic import ValidationError

from example_trainer.grpo.api_client import registration_payload
from example_trainer.grpo.cli import build_parser, config_from_args, describe_validation_error, parse_args
from example_trainer.grpo.config import TrainingConfig


def _from_cli(*flags: str) -> TrainingConfig:
    return config_from_args(parse_args(["--model", "m", "--device", "cpu", *flags]))


def test_batch_size_flag_sets_the_micro_batch_like_micro_batch_size():
    old = _from_cli("--batch-size", "4", "--gradient-accumulation-steps", "8")
    new = _from_cli("--micro-batch-size", "4", "--gradient-accumulation-steps", "8")
    assert old == new
    assert new.micro_batch_size == new.batch_size == 4
    assert new.trainer_batch_size == new.api_batch_size == 32
    assert registration_payload(new)["batch_size"] == 32  # the API's batch is the trainer batch
    assert _from_cli().micro_batch_size == 2  # the default


def test_vllm_restart_interval_flag_sets_the_refresh_interval():
    old = _from_cli("--vllm-restart-interval", "5")
    new = _from_cli("--refresh-interval", "5")
    assert old == new
    assert new.refresh_interval == new.vllm_restart_interval == 5
    assert _from_cli().refresh_interval == 3


def test_yaml_accepts_both_names_for_the_same_fields():
    old = yaml.safe_load("model_name: m\ndevice: cpu\nbatch_size: 6\nvllm_restart_interval: 2\n")
    new = yaml.safe_load("model_name: m\ndevice: cpu\nmicro_batch_size: 6\nrefresh_interval: 2\n")
    assert TrainingConfig.model_validate(old) == TrainingConfig.model_validate(new)
    assert TrainingConfig.model_validate(old).micro_batch_size == 6
    assert TrainingConfig.model_validate(old).refresh_interval == 2
    dumped = TrainingConfig.model_validate(old).model_dump()
    assert (dumped["micro_batch_size"], dumped["refresh_interval"]) == (6, 2)
    assert "batch_size" not in dumped and "vllm_restart_interval" not in dumped  # one field each


def test_code_accepts_both_names_as_keywords_attributes_and_copies():
    config = TrainingConfig(model_name="m", device="cpu", batch_size=3, vllm_restart_interval=7)
    assert (config.micro_batch_size, config.refresh_interval) == (3, 7)
    config.batch_size = 5
    config.vllm_restart_interval = 9
    assert (config.micro_batch_size, config.refresh_interval) == (5, 9)
    copy = config.model_copy(update={"batch_size": 8, "vllm_restart_interval": 1})
    assert (copy.micro_batch_size, copy.refresh_interval) == (8, 1)
    with pytest.raises(ValidationError):
        config.batch_size = 0  # validated like the field itself


def test_a_bad_value_under_the_older_name_names_its_flag():
    with pytest.raises(ValidationError) as info:
        TrainingConfig(model_name="m", device="cpu", batch_size=0)
    assert describe_validation_error(info.value).startswith("--batch-size:")


def test_help_shows_the_new_names_and_says_the_older_ones_are_accepted():
    text = " ".join(build_parser().format_help().split())
    assert "--micro-batch-size MICRO_BATCH_SIZE, --batch-size MICRO_BATCH_SIZE" in text
    assert "--refresh-interval REFRESH_INTERVAL, --vllm-restart-interval REFRESH_INTERVAL" in text
    assert "--batch-size is another name for this same setting" in text
    assert "restart-interval is another name for this same setting" in text
    assert "original" not in text.lower()
