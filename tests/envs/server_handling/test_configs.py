"""Config models and ReasoningConfig."""

from __future__ import annotations

import warnings

import pytest
from pydantic import ValidationError

from atroposlib.envs.server_handling.server_baseline import (
    VALID_REASONING_EFFORTS,
    APIServerConfig,
    ReasoningConfig,
    ServerBaseline,
)
from atroposlib.envs.server_handling.server_manager import ServerManagerConfig


def test_defaults_match_the_original():
    base = ServerBaseline()
    assert (base.timeout, base.num_max_requests_at_once, base.num_requests_for_eval) == (1200, 512, 64)
    assert (base.model_name, base.rolling_buffer_length, base.server_type, base.tokenizer_name) == (
        "default",
        1000,
        "openai",
        "none",
    )
    api = APIServerConfig()
    assert (api.api_key, api.base_url, api.n_kwarg_is_ignored, api.health_check) == ("", "", False, True)
    manager = ServerManagerConfig()
    assert (manager.slurm, manager.testing, manager.max_n_completions, manager.proxy_url) == (
        False,
        False,
        8,
        None,
    )


def test_unknown_keys_are_ignored_with_a_warning():
    with pytest.warns(UserWarning, match="unknown field.*typo_field"):
        config = APIServerConfig(model_name="m", typo_field=3)
    assert not hasattr(config, "typo_field")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        APIServerConfig(model_name="m", base_url="http://x/v1")


def test_invalid_values_are_rejected():
    with pytest.raises(ValidationError):
        APIServerConfig(num_max_requests_at_once=0)
    with pytest.raises(ValidationError):
        APIServerConfig(server_type="tgi")


def test_reasoning_config_validation_and_auto_enable():
    assert VALID_REASONING_EFFORTS == {"none", "minimal", "low", "medium", "high", "xhigh"}
    with pytest.raises(ValueError, match="Invalid reasoning_effort"):
        ReasoningConfig(effort="extreme")
    assert ReasoningConfig(effort="low").enabled
    assert ReasoningConfig(max_tokens=100).is_reasoning_kwargs_active()
    assert not ReasoningConfig().is_reasoning_kwargs_active()
    assert ReasoningConfig.EFFORT_TO_MAX_TOKENS["high"] == 25600


def test_build_extra_body_by_provider():
    assert ReasoningConfig().build_extra_body("https://api.openai.com/v1") is None
    assert ReasoningConfig(effort="high").build_extra_body("https://api.openai.com/v1") == {
        "reasoning_effort": "high"
    }
    assert ReasoningConfig(enabled=True).build_extra_body("https://api.openai.com/v1") == {
        "reasoning_effort": "medium"
    }
    other = "https://openrouter.ai/api/v1"
    assert ReasoningConfig(effort="low", max_tokens=5).build_extra_body(other) == {
        "reasoning": {"enabled": True, "effort": "low"}
    }
    assert ReasoningConfig(max_tokens=5).build_extra_body(other) == {
        "reasoning": {"enabled": True, "max_tokens": 5}
    }
    assert ReasoningConfig(effort="minimal").build_extra_body(other, use_max_tokens=True) == {
        "reasoning": {"enabled": True, "max_tokens": 3200}
    }


def test_from_env_config():
    class EnvConfig:
        thinking_mode = True
        reasoning_effort = None
        max_reasoning_tokens = None

    config = ReasoningConfig.from_env_config(EnvConfig())
    assert config.enabled and config.effort is None
    assert not ReasoningConfig.from_env_config(object()).enabled
