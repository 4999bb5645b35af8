"""Pure layering rules of the environment CLI: YAML checks, mode defaults, merge order, server resolution."""

from __future__ import annotations

import logging
import warnings
from typing import Optional

import pytest
from pydantic import Field

from atroposlib.envs.cli.config import (
    CliUsageError,
    build_env_config,
    load_yaml_config,
    mode_env_defaults,
    resolve_server_configs,
)
from atroposlib.envs.env_config import BaseEnvConfig
from atroposlib.envs.server_handling.server_baseline import APIServerConfig, ServerBaseline


class MyConfig(BaseEnvConfig):
    dataset_path: Optional[str] = Field(None, description="local data")
    difficulty: int = 3


class NamedEnv:
    name = "named"


class UnnamedEnv:
    name = None


# --------------------------------------------------------------------------------------------- YAML
def test_yaml_missing_file(tmp_path):
    with pytest.raises(CliUsageError, match="file not found"):
        load_yaml_config(tmp_path / "nope.yaml")


def test_yaml_directory(tmp_path):
    with pytest.raises(CliUsageError, match="is a directory"):
        load_yaml_config(tmp_path)


def test_yaml_syntax_error_names_the_line(tmp_path):
    path = tmp_path / "bad.yaml"
    path.write_text("env:\n  group_size: 4\n  tokenizer_name: [unclosed\n")
    with pytest.raises(CliUsageError) as err:
        load_yaml_config(path)
    assert "invalid YAML" in str(err.value) and "line" in str(err.value)
    assert "\n" not in str(err.value)


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("- 1\n- 2\n", "expected a mapping"),
        ("env: 3\n", "'env' must be a mapping"),
        ("openai: http://x\n", "'openai' must be a mapping or a list"),
        ("openai:\n  - base_url: a\n  - 7\n", "'openai[1]' must be a mapping"),
    ],
)
def test_yaml_shape_errors(tmp_path, text, needle):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(CliUsageError, match=needle.replace("[", r"\[").replace("]", r"\]")):
        load_yaml_config(path)


def test_yaml_empty_and_unknown_top_level_keys(tmp_path):
    empty = tmp_path / "empty.yaml"
    empty.write_text("")
    assert load_yaml_config(empty) == {}
    assert load_yaml_config(None) == {}
    path = tmp_path / "c.yaml"
    path.write_text("env: {group_size: 2}\ntrainer: {lr: 1}\nslurm: false\n")
    with pytest.raises(
        CliUsageError, match=r"^unknown key trainer in --config .*c\.yaml; the top level holds env, "
    ):
        load_yaml_config(path)
    path.write_text("env: {group_size: 2}\nopenia: {timeout: 3}\n")
    with pytest.raises(CliUsageError, match=r"^unknown key openia in --config .*; did you mean openai\?$"):
        load_yaml_config(path)


def test_flat_files_are_read_as_sections_only_when_asked(tmp_path):
    path = tmp_path / "flat.yaml"
    path.write_text("group_size: 3\nslurm: true\nserver_configs:\n  - base_url: http://a/v1\n")
    doc = load_yaml_config(path, flat_env_keys={"group_size"})
    assert doc == {"env": {"group_size": 3}, "slurm": True, "openai": [{"base_url": "http://a/v1"}]}
    with pytest.raises(CliUsageError, match="unknown key group_size"):
        load_yaml_config(path)


# ------------------------------------------------------------------------------------ mode defaults
def test_process_defaults_adjust_the_config_init_values():
    init = MyConfig(ensure_scores_are_not_same=True, include_messages=False, use_wandb=False)
    values = mode_env_defaults(NamedEnv, "process", init)
    assert values["ensure_scores_are_not_same"] is False
    assert values["include_messages"] is True
    assert values["use_wandb"] is True
    assert values["data_path_to_save_groups"] == "data/named.jsonl"
    assert values["wandb_name"] == "named"
    assert values["difficulty"] == 3


def test_process_keeps_an_explicit_output_path_and_wandb_name():
    init = MyConfig(data_path_to_save_groups="out/x.jsonl", wandb_name="mine")
    values = mode_env_defaults(UnnamedEnv, "process", init)
    assert values["data_path_to_save_groups"] == "out/x.jsonl"
    assert values["wandb_name"] == "mine"
    assert (
        mode_env_defaults(UnnamedEnv, "process", MyConfig())["data_path_to_save_groups"]
        == "data/groups.jsonl"
    )


def test_serve_and_evaluate_defaults():
    init = MyConfig(use_wandb=False, ensure_scores_are_not_same=True)
    serve = mode_env_defaults(UnnamedEnv, "serve", init)
    assert serve["use_wandb"] is False and serve["ensure_scores_are_not_same"] is True
    assert serve["wandb_name"] == "UnnamedEnv"  # class name when the env has no name
    assert mode_env_defaults(NamedEnv, "evaluate", init)["use_wandb"] is True
    with pytest.raises(ValueError):
        mode_env_defaults(NamedEnv, "train", init)


# -------------------------------------------------------------------------------------- layering
def test_flags_beat_yaml_beat_defaults():
    defaults = mode_env_defaults(NamedEnv, "serve", MyConfig(group_size=2, difficulty=5, max_token_length=10))
    config = build_env_config(
        NamedEnv,
        MyConfig,
        defaults,
        {"group_size": 4, "difficulty": 6},
        {"group_size": 8},
        mode="serve",
        yaml_path="c.yaml",
    )
    assert (config.group_size, config.difficulty, config.max_token_length) == (8, 6, 10)
    assert isinstance(config, MyConfig)


def test_explicit_none_wandb_name_and_output_fall_back_to_usable_values():
    defaults = mode_env_defaults(NamedEnv, "process", MyConfig())
    config = build_env_config(
        NamedEnv,
        MyConfig,
        defaults,
        {"wandb_name": None, "data_path_to_save_groups": None},
        {},
        mode="process",
    )
    assert config.wandb_name == "named"
    assert config.data_path_to_save_groups == "data/named.jsonl"


def test_invalid_values_name_the_field_and_where_it_came_from():
    defaults = mode_env_defaults(NamedEnv, "serve", MyConfig())
    with pytest.raises(CliUsageError) as err:
        build_env_config(
            NamedEnv, MyConfig, defaults, {"group_size": "four"}, {}, mode="serve", yaml_path="c.yaml"
        )
    message = str(err.value)
    assert message.startswith("env.group_size:")
    assert "'four'" in message and "--config c.yaml" in message
    with pytest.raises(CliUsageError, match=r"env.max_reasoning_tokens: .*--env.max_reasoning_tokens"):
        build_env_config(NamedEnv, MyConfig, defaults, {}, {"max_reasoning_tokens": 5}, mode="serve")


def test_unknown_yaml_env_keys_are_refused_with_the_closest_known_key():
    defaults = mode_env_defaults(NamedEnv, "serve", MyConfig())
    with pytest.raises(CliUsageError) as err:
        build_env_config(NamedEnv, MyConfig, defaults, {"grup_size": 4}, {}, mode="serve", yaml_path="x.yaml")
    assert str(err.value) == "unknown key env.grup_size in --config x.yaml; did you mean group_size?"
    with pytest.raises(CliUsageError, match=r"^unknown key env.zzz_qqq in --config x.yaml; known keys: "):
        build_env_config(NamedEnv, MyConfig, defaults, {"zzz_qqq": 1}, {}, mode="serve", yaml_path="x.yaml")
    with pytest.raises(
        CliUsageError, match=r"unknown key env.grup_size in --env.grup_size; did you mean group_size"
    ):
        build_env_config(NamedEnv, MyConfig, defaults, {}, {"grup_size": 4}, mode="serve")


def test_compatibility_keys_are_accepted_and_dropped():
    from atroposlib.envs.env_config import COMPAT_ENV_KEYS

    assert COMPAT_ENV_KEYS["score_buffer_size"]  # every compatibility key says why it is accepted
    defaults = mode_env_defaults(NamedEnv, "serve", MyConfig())
    config = build_env_config(NamedEnv, MyConfig, defaults, {"score_buffer_size": 4}, {}, mode="serve")
    assert not hasattr(config, "score_buffer_size")


class OriginalNamesConfig(MyConfig):
    original_key_aliases = {"generation_temperature": "temperature"}
    unsupported_original_keys = {"use_text_passages": "its passages come from a hub set not read here"}
    temperature: float = 1.0


def test_original_names_are_renamed_and_unsupported_original_keys_refused_with_the_reason():
    defaults = mode_env_defaults(NamedEnv, "serve", OriginalNamesConfig())
    config = build_env_config(
        NamedEnv, OriginalNamesConfig, defaults, {"generation_temperature": 0.3}, {}, mode="serve"
    )
    assert config.temperature == 0.3
    flagged = build_env_config(
        NamedEnv,
        OriginalNamesConfig,
        defaults,
        {"generation_temperature": 0.3},
        {"temperature": 0.5},
        mode="serve",
    )
    assert flagged.temperature == 0.5  # the flag (this release's name) beats the file (0.4.0's name)
    with pytest.raises(CliUsageError) as err:
        build_env_config(
            NamedEnv,
            OriginalNamesConfig,
            defaults,
            {"use_text_passages": True},
            {},
            mode="serve",
            yaml_path="x.yaml",
        )
    assert str(err.value) == (
        "env.use_text_passages in --config x.yaml is not supported here: its passages come from a hub set not read here"
    )
    assert OriginalNamesConfig(generation_temperature=0.2).temperature == 0.2


# ------------------------------------------------------------------------------- server resolution
def _resolve(default, yaml_doc=None, cli=None, cls=APIServerConfig):
    return resolve_server_configs(default, yaml_doc or {}, cli or {}, openai_cls=cls, yaml_path="c.yaml")


def test_single_config_stays_single_and_layers():
    default = APIServerConfig(model_name="m", base_url="http://a/v1", api_key="x", timeout=5)
    resolved = _resolve(default, {"openai": {"base_url": "http://yaml/v1", "timeout": 7}}, {"timeout": 9})
    assert isinstance(resolved, APIServerConfig)
    assert (resolved.model_name, resolved.base_url, resolved.timeout) == ("m", "http://yaml/v1", 9)


def test_one_element_list_and_one_element_yaml_list():
    default = [APIServerConfig(model_name="m", base_url="http://a/v1", server_type="vllm")]
    resolved = _resolve(default, {"openai": [{"api_key": "k"}]}, {"model_name": "n"})
    assert isinstance(resolved, list) and len(resolved) == 1
    assert (resolved[0].model_name, resolved[0].api_key, resolved[0].server_type) == ("n", "k", "vllm")


def test_baseline_is_kept_unless_overridden():
    baseline = ServerBaseline(model_name="m", timeout=3)
    assert _resolve(baseline) is baseline
    overridden = _resolve(baseline, cli={"base_url": "http://b/v1"})
    configs = overridden if isinstance(overridden, list) else [overridden]
    assert configs[0].base_url == "http://b/v1" and configs[0].timeout == 3 and configs[0].model_name == "m"


def test_multi_server_yaml_list_and_flags_conflict():
    yaml_doc = {"openai": [{"base_url": "http://a/v1", "weight": 1}, {"base_url": "http://b/v1"}]}
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # 'weight' of the original's examples: a compatibility key, no warning
        resolved = _resolve(APIServerConfig(), yaml_doc)
    assert [c.base_url for c in resolved] == ["http://a/v1", "http://b/v1"]
    typo = {"openai": [{"base_url": "http://a/v1"}, {"base_url": "http://b/v1", "time_out": 3}]}
    with pytest.raises(CliUsageError) as err:
        _resolve(APIServerConfig(), typo)
    assert str(err.value) == "unknown key openai[1].time_out in --config c.yaml; did you mean timeout?"
    with pytest.raises(
        CliUsageError, match=r"^unknown key openai.modle_name in --config c.yaml; did you mean model_name\?$"
    ):
        _resolve(APIServerConfig(), {"openai": {"modle_name": "m"}})
    with pytest.raises(CliUsageError, match="--openai.timeout"):
        _resolve(APIServerConfig(), yaml_doc, {"timeout": 3})


def test_multi_server_default_is_used_as_is(caplog):
    default = [APIServerConfig(base_url="http://a/v1"), APIServerConfig(base_url="http://b/v1")]
    with caplog.at_level(logging.WARNING, logger="atroposlib.envs.cli"):
        resolved = _resolve(default, {"openai": {"timeout": 3}})
    assert [c.base_url for c in resolved] == ["http://a/v1", "http://b/v1"]
    assert "single-server 'openai' section is ignored" in caplog.text
    with pytest.raises(CliUsageError, match="--openai.base_url"):
        _resolve(default, cli={"base_url": "http://c/v1"})


def test_invalid_server_values_name_the_field():
    with pytest.raises(CliUsageError, match="openai.timeout"):
        _resolve(APIServerConfig(), {"openai": {"timeout": "soon"}})
    with pytest.raises(CliUsageError, match="server_type"):
        _resolve([APIServerConfig()], cli={"server_type": "tgi"})
