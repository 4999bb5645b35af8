"""DeclaredDefaults: ``config_init`` built from declared values and the default model."""

from __future__ import annotations

from pydantic import Field

from atroposlib.envs.base import BaseEnvConfig
from atroposlib.envs.declared_defaults import DeclaredDefaults


class _Config(BaseEnvConfig):
    judge_tokens: int = Field(64, description="a field of this config only")


class _Declared(DeclaredDefaults):
    name = "declared"
    env_config_cls = _Config
    default_model = "org/model"
    default_server_port = 9123
    default_env_values = {"group_size": 3, "judge_tokens": 8}


class _Plain(DeclaredDefaults):
    name = "plain"
    env_config_cls = _Config


def test_declared_values_the_default_model_and_the_server():
    env_config, server = _Declared.config_init()
    assert isinstance(env_config, _Config)
    assert (env_config.group_size, env_config.judge_tokens) == (3, 8)
    assert env_config.tokenizer_name == "org/model" and env_config.wandb_name == "declared"
    assert server.model_name == "org/model" and server.base_url == "http://localhost:9123/v1"
    # the rest are the config class's own defaults
    assert env_config.max_token_length == _Config().max_token_length


def test_no_declared_values_and_a_tokenizer_of_its_own():
    env_config, _ = _Plain.config_init()
    assert env_config.tokenizer_name == DeclaredDefaults.default_model
    assert env_config.group_size == _Config().group_size and env_config.judge_tokens == 64

    class _OwnTokenizer(_Declared):
        default_env_values = {"tokenizer_name": "org/tokenizer"}

    assert _OwnTokenizer.default_env_config().tokenizer_name == "org/tokenizer"
