"""``--env.tokenizer_name`` defaults to the served model's name, unless config_init, YAML or a flag set it."""

from __future__ import annotations

import importlib.util
import sys

import pytest

from atroposlib.envs.cli import parse_command
from atroposlib.envs.env_config import FALLBACK_TOKENIZER, BaseEnvConfig, resolve_tokenizer_name
from atroposlib.envs.server_handling.server_baseline import APIServerConfig, ServerBaseline
from environments.arithmetic_server import ArithmeticEnv
from environments.gsm8k_server import GSM8kEnv
from tests.helpers.cli_runs import ENVIRONMENTS, LEGACY_ENVS, run_env
from tests.helpers.sample_envs import CountingEnv, CountingEnvConfig


def _legacy_env(file_name: str, class_name: str):
    spec = importlib.util.spec_from_file_location(f"legacy_{file_name[:-3]}", LEGACY_ENVS / file_name)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return getattr(module, class_name)


def test_resolution_rules():
    servers = [APIServerConfig(model_name="org/served"), APIServerConfig(model_name="org/other")]
    assert resolve_tokenizer_name(None, servers) == "org/served"
    assert resolve_tokenizer_name("org/tok", servers) == "org/tok"
    assert resolve_tokenizer_name(None, APIServerConfig(model_name="org/one")) == "org/one"
    assert resolve_tokenizer_name(None, [{"model_name": "org/dict"}]) == "org/dict"
    assert resolve_tokenizer_name(None, ServerBaseline()) == FALLBACK_TOKENIZER  # model "default"
    assert resolve_tokenizer_name(None, None) == FALLBACK_TOKENIZER


@pytest.mark.parametrize("env_cls", [GSM8kEnv, ArithmeticEnv])
def test_shipped_envs_follow_the_served_model(env_cls):
    resolved = parse_command(
        env_cls, ["process", "--openai.model_name", "Qwen/Qwen2.5-1.5B-Instruct"]
    ).resolve()
    assert resolved.env_config.tokenizer_name == "Qwen/Qwen2.5-1.5B-Instruct"
    servers = env_cls.config_init()[1]
    served = (servers[0] if isinstance(servers, list) else servers).model_name
    assert parse_command(env_cls, ["serve"]).resolve().env_config.tokenizer_name == served


def test_flag_and_yaml_win_over_the_served_model(tmp_path):
    args = ["process", "--openai.model_name", "org/served"]
    flagged = parse_command(GSM8kEnv, [*args, "--env.tokenizer_name", "org/tok"]).resolve()
    assert flagged.env_config.tokenizer_name == "org/tok"
    config = tmp_path / "c.yaml"
    config.write_text("env:\n  tokenizer_name: org/from-yaml\n")
    from_yaml = parse_command(GSM8kEnv, [*args, "--config", str(config)]).resolve()
    assert from_yaml.env_config.tokenizer_name == "org/from-yaml"
    config.write_text("openai:\n  model_name: org/yaml-model\n")
    yaml_model = parse_command(GSM8kEnv, ["process", "--config", str(config)]).resolve()
    assert yaml_model.env_config.tokenizer_name == "org/yaml-model"


def test_legacy_env_setting_tokenizer_in_config_init_keeps_it():
    env_cls = _legacy_env("echo_completion_env.py", "EchoCompletionEnv")
    resolved = parse_command(env_cls, ["process", "--openai.model_name", "org/served"]).resolve()
    assert resolved.env_config.tokenizer_name == "NousResearch/DeepHermes-3-Llama-3-3B-Preview"


def test_help_says_the_default_is_the_served_model():
    from atroposlib.envs.cli import build_parser
    from atroposlib.envs.cli.command import build_command_cls

    parser = build_parser(GSM8kEnv, {"process": build_command_cls(GSM8kEnv, "process")})
    sub = parser._subparsers._group_actions[0].choices["process"]
    action = next(a for a in sub._actions if a.dest == "env.tokenizer_name")
    assert "the served model's name, now NousResearch/DeepHermes-3-Llama-3-3B-Preview" in action.help
    assert "served model" in action.help


def test_constructed_env_loads_the_served_models_tokenizer(tiny_model_dir):
    env = CountingEnv(
        CountingEnvConfig(use_wandb=False),
        [
            APIServerConfig(
                model_name=str(tiny_model_dir), base_url="http://127.0.0.1:1/v1", health_check=False
            )
        ],
    )
    assert env.config.tokenizer_name == str(tiny_model_dir)
    assert env.tokenizer.decode(env.tokenizer.encode("two")) == "two"
    assert BaseEnvConfig().tokenizer_name is None


def test_cli_run_without_tokenizer_flag_uses_the_model_directory(tiny_model_dir, tmp_path):
    # The served model is a local directory here, so its tokenizer loads offline.
    result = run_env(
        ENVIRONMENTS / "gsm8k_server.py",
        [
            "evaluate",
            "--openai.model_name",
            tiny_model_dir,
            "--env.use_wandb",
            "false",
            "--env.eval_limit",
            "1",
            "--env.dataset_path",
            "/nonexistent.jsonl",
        ],
        cwd=tmp_path,
    )
    assert f"'tokenizer_name': '{tiny_model_dir}'" in result.stderr, result.stderr[-2000:]
    assert "could not construct" not in result.stderr  # the tokenizer loaded; setup fails on the data file
