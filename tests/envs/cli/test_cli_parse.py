"""The environment CLI in-process: flags, layering for every subcommand, defaults, help, pass-through."""

from __future__ import annotations

import os
import re
from typing import Optional

import pytest
import yaml
from pydantic import Field

from atroposlib.envs.base import APIServerConfig, BaseEnv, BaseEnvConfig, ServerBaseline
from atroposlib.envs.cli import (
    CliCommand,
    CliUsageError,
    get_cli_evaluate_config_cls,
    get_cli_process_config_cls,
    get_cli_serve_config_cls,
    parse_command,
    run_cli,
)
from atroposlib.envs.cli.command import (
    build_command_cls,
    construct_env,
    dump_server_configs,
    ensure_wandb_usable,
    write_evaluate_config,
)
from atroposlib.envs.cli.config import mode_env_defaults
from atroposlib.envs.cli.values import format_default
from tests.helpers.cli_runs import NoOpHooks

MODES = ["serve", "process", "evaluate"]


class LayerConfig(BaseEnvConfig):
    difficulty: int = Field(1, description="how hard")
    label: Optional[str] = Field(None, description="free text")


class LayerEnv(NoOpHooks, BaseEnv):
    name = "layer"
    env_config_cls = LayerConfig

    @classmethod
    def config_init(cls):
        env = LayerConfig(group_size=2, difficulty=5, max_token_length=100, use_wandb=False)
        server = APIServerConfig(model_name="init-model", base_url="http://init/v1", timeout=11)
        return env, server


class NamelessEnv(NoOpHooks, BaseEnv):
    pass


class BaselineEnv(NoOpHooks, BaseEnv):
    name = "baseline"

    @classmethod
    def config_init(cls):
        return BaseEnvConfig(), ServerBaseline(model_name="base-model", timeout=7)


class MultiServerEnv(NoOpHooks, BaseEnv):
    name = "multi"

    @classmethod
    def config_init(cls):
        return BaseEnvConfig(), [
            APIServerConfig(base_url="http://a/v1", model_name="a"),
            APIServerConfig(base_url="http://b/v1", model_name="b"),
        ]


def _write(tmp_path, doc) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(yaml.safe_dump(doc) if not isinstance(doc, str) else doc)
    return str(path)


# ------------------------------------------------------------------------------------------ layering
@pytest.mark.parametrize("mode", MODES)
def test_config_init_then_yaml_then_flags(tmp_path, mode):
    config = _write(
        tmp_path,
        {
            "env": {"group_size": 3, "difficulty": 6, "label": "from-yaml"},
            "openai": {"base_url": "http://yaml/v1", "timeout": 22},
            "slurm": False,
            "testing": True,
        },
    )
    argv = [mode, "--config", config, "--env.group_size", "4", "--openai.timeout", "33", "--testing", "false"]
    run = parse_command(LayerEnv, argv).resolve()
    env = run.env_config
    assert isinstance(env, LayerConfig)
    assert (env.group_size, env.difficulty, env.label, env.max_token_length) == (4, 6, "from-yaml", 100)
    server = run.server_configs
    assert isinstance(server, APIServerConfig)  # a bare config_init config stays a bare config
    assert (server.model_name, server.base_url, server.timeout) == ("init-model", "http://yaml/v1", 33)
    assert run.manager_config.testing is False and run.manager_config.slurm is False
    assert run.mode == mode and run.config_path == config


@pytest.mark.parametrize("mode", MODES)
def test_mode_defaults(mode):
    env = parse_command(LayerEnv, [mode]).resolve().env_config
    assert env.wandb_name == "layer"
    if mode == "process":
        assert env.ensure_scores_are_not_same is False and env.include_messages is True
        assert env.data_path_to_save_groups == "data/layer.jsonl"
        assert env.use_wandb is True
    else:
        assert env.ensure_scores_are_not_same is True and env.include_messages is False
        assert env.data_path_to_save_groups is None
        assert env.use_wandb is (mode == "evaluate")


def test_flags_override_mode_defaults(tmp_path):
    run = parse_command(
        LayerEnv,
        ["process", "--env.ensure_scores_are_not_same", "true", "--env.data_path_to_save_groups", "x.jsonl"],
    ).resolve()
    assert run.env_config.ensure_scores_are_not_same is True
    assert run.env_config.data_path_to_save_groups == "x.jsonl"


# ------------------------------------------------------------------------------------------- values
def test_negative_numbers_none_and_booleans():
    run = parse_command(
        LayerEnv,
        [
            "serve",
            "--env.max_token_length", "-1",
            "--env.eval_limit_ratio", "-0.5",
            "--env.total_steps=-1",
            "--env.label", "None",
            "--env.include_messages",
            "--env.use_wandb", "FALSE",
            "--slurm",
            "--openai.api_key", "None",
        ],
    ).resolve()  # fmt: skip
    env = run.env_config
    assert (env.max_token_length, env.eval_limit_ratio, env.total_steps) == (-1, -0.5, -1)
    assert env.label is None and env.include_messages is True and env.use_wandb is False
    assert run.manager_config.slurm is True
    assert run.server_configs.api_key is None


def test_flag_none_beats_yaml_value(tmp_path):
    config = _write(tmp_path, {"env": {"label": "yaml"}})
    assert (
        parse_command(LayerEnv, ["serve", "--config", config, "--env.label", "None"])
        .resolve()
        .env_config.label
        is None
    )


def test_wandb_name_defaults_to_env_name_or_class_name(tmp_path):
    assert parse_command(NamelessEnv, ["serve"]).resolve().env_config.wandb_name == "NamelessEnv"
    assert parse_command(LayerEnv, ["serve"]).resolve().env_config.wandb_name == "layer"
    config = _write(tmp_path, {"env": {"wandb_name": "from-yaml"}})
    assert (
        parse_command(LayerEnv, ["serve", "--config", config]).resolve().env_config.wandb_name == "from-yaml"
    )
    flagged = parse_command(LayerEnv, ["serve", "--config", config, "--env.wandb_name", "flag"]).resolve()
    assert flagged.env_config.wandb_name == "flag"


@pytest.mark.parametrize("mode", ["serve", "process", "evaluate"])
def test_unknown_yaml_keys_are_refused_in_one_line(tmp_path, capsys, mode):
    config = _write(tmp_path, {"env": {"difficulty": 2, "grup_size": 1}})
    with pytest.raises(SystemExit) as exited:
        run_cli(LayerEnv, [mode, "--config", config])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1
    assert err[0].endswith(
        f": error: unknown key env.grup_size in --config {config}; did you mean group_size?"
    )
    section = _write(tmp_path, {"env": {"difficulty": 2}, "extra_section": {}})
    with pytest.raises(CliUsageError, match="unknown key extra_section"):
        parse_command(LayerEnv, [mode, "--config", section]).resolve()
    teacher = _write(tmp_path, {"teacher": {"base_url": "http://t/v1"}})
    with pytest.raises(
        CliUsageError, match=r"^unknown key teacher in --config .*; the top level holds env, "
    ):
        parse_command(LayerEnv, [mode, "--config", teacher]).resolve()
    known = _write(tmp_path, {"env": {"difficulty": 2, "score_buffer_size": 4}})
    assert parse_command(LayerEnv, [mode, "--config", known]).resolve().env_config.difficulty == 2


# ------------------------------------------------------------------------------------------- servers
def test_server_baseline_kept_or_overridden():
    kept = parse_command(BaselineEnv, ["process"]).resolve().server_configs
    assert type(kept) is ServerBaseline and kept.timeout == 7
    overridden = parse_command(BaselineEnv, ["process", "--openai.base_url", "http://flag/v1"]).resolve()
    configs = (
        overridden.server_configs
        if isinstance(overridden.server_configs, list)
        else [overridden.server_configs]
    )
    assert configs[0].base_url == "http://flag/v1" and configs[0].model_name == "base-model"
    assert configs[0].timeout == 7


def test_multi_server_defaults_reject_openai_flags(tmp_path):
    run = parse_command(MultiServerEnv, ["serve"]).resolve()
    assert [c.base_url for c in run.server_configs] == ["http://a/v1", "http://b/v1"]
    with pytest.raises(CliUsageError, match="--openai.timeout"):
        parse_command(MultiServerEnv, ["serve", "--openai.timeout", "3"]).resolve()
    config = _write(tmp_path, {"openai": [{"base_url": "http://x/v1"}, {"base_url": "http://y/v1"}]})
    listed = parse_command(LayerEnv, ["evaluate", "--config", config]).resolve()
    assert [c.base_url for c in listed.server_configs] == ["http://x/v1", "http://y/v1"]


def test_server_manager_options_reach_the_server_manager(tmp_path, tiny_model_dir):
    config = _write(tmp_path, {"max_n_completions": 5})
    base = ["--env.tokenizer_name", str(tiny_model_dir), "--env.use_wandb", "false"]
    from_yaml = construct_env(
        LayerEnv, parse_command(LayerEnv, ["serve", "--config", config, *base]).resolve()
    )
    assert from_yaml.server.max_n_completions == 5
    argv = [
        "serve",
        *base,
        "--max_n_completions",
        "3",
        "--proxy_url",
        "http://127.0.0.1:9100",
        "--tool_parser",
        "hermes",
    ]
    env = construct_env(LayerEnv, parse_command(LayerEnv, argv).resolve())
    assert env.server.max_n_completions == 3
    assert env.server.proxy_url == "http://127.0.0.1:9100" and env.server.use_proxy is True
    assert env.server.tool_parser == "hermes"
    # the single APIServerConfig of config_init is used as given (not replaced by localhost:9004-9007)
    assert [s.config.base_url for s in env.server.servers] == ["http://init/v1"]


def test_construction_failure_is_one_line_exit_1(capsys):
    with pytest.raises(SystemExit) as exited:
        run_cli(
            LayerEnv, ["serve", "--env.tokenizer_name", "/nonexistent/tokenizer", "--env.use_wandb", "false"]
        )
    assert exited.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert "error: could not construct LayerEnv: TokenizerLoadError: cannot load tokenizer" in err[-1]
    assert "'/nonexistent/tokenizer' (--env.tokenizer_name): no such directory" in err[-1]
    assert "Traceback" not in "\n".join(err)


def test_construction_failure_traceback_on_request(monkeypatch):
    monkeypatch.setenv("ATROPOS_CLI_TRACEBACK", "1")
    with pytest.raises(RuntimeError, match="cannot load tokenizer '/nonexistent/tokenizer'"):
        run_cli(
            LayerEnv, ["serve", "--env.tokenizer_name", "/nonexistent/tokenizer", "--env.use_wandb", "false"]
        )


# ---------------------------------------------------------------------------------------------- help
@pytest.mark.parametrize("mode", MODES)
def test_help_lists_every_field_with_its_effective_default(capsys, mode):
    with pytest.raises(SystemExit) as exited:
        run_cli(LayerEnv, [mode, "--help"])
    assert exited.value.code == 0
    text = " ".join(capsys.readouterr().out.split())
    text = text[text.index("options:") :]  # the flag list, not the usage line
    init_env, init_server = LayerEnv.config_init()
    expected = {f"env.{k}": v for k, v in mode_env_defaults(LayerEnv, mode, init_env).items()}
    expected.update({f"openai.{k}": getattr(init_server, k) for k in type(init_server).model_fields})
    expected.update({"slurm": False, "testing": False, "max_n_completions": 8, "proxy_url": None})
    for flag, default in expected.items():
        match = re.search(rf"--{re.escape(flag)} \S+ (.*?)(?= --[a-z]|$)", text)
        assert match, f"--{flag} missing from help"
        if flag == "env.tokenizer_name" and default is None:  # resolved later: the served model
            default = f"the served model's name, now {init_server.model_name}"
            assert f"(default: {default})" in match.group(1), (flag, match.group(1))
            continue
        assert f"(default: {format_default(default)})" in match.group(1), (flag, match.group(1))
    assert "(default: 5)" in text and "(default: 100)" in text  # config_init values, not class defaults


def test_top_level_help_lists_subcommands(capsys):
    with pytest.raises(SystemExit) as exited:
        run_cli(LayerEnv, ["--help"])
    assert exited.value.code == 0
    out = capsys.readouterr().out
    assert "CLI for LayerEnv" in out and all(m in out for m in MODES)


# ----------------------------------------------------------------------------------- command classes
def test_command_classes_expose_fields_and_effective_defaults():
    for getter, mode in (
        (get_cli_serve_config_cls, "serve"),
        (get_cli_process_config_cls, "process"),
        (get_cli_evaluate_config_cls, "evaluate"),
    ):
        cmd_cls = getter(LayerEnv)
        assert issubclass(cmd_cls, CliCommand) and cmd_cls.mode == mode
        fields = cmd_cls.model_fields
        assert {"config", "slurm", "testing", "max_n_completions", "proxy_url"} <= set(fields)
        assert {f"env.{k}" for k in LayerConfig.model_fields} <= set(fields)
        assert {f"openai.{k}" for k in APIServerConfig.model_fields} <= set(fields)
        assert fields["env.difficulty"].default == 5
        assert fields["openai.model_name"].default == "init-model"
    assert LayerEnv.get_cli_process_config_cls().model_fields["env.include_messages"].default is True


class TeacherEnv(LayerEnv):
    """An env adding its own namespace of flags by extending the generated command class."""

    seen: dict = {}

    @classmethod
    def get_cli_serve_config_cls(cls):
        from pydantic import create_model

        base = build_command_cls(cls, "serve")
        extended = create_model(
            "TeacherServe",
            __base__=base,
            **{"teacher.base_url": (Optional[str], Field(None, description="teacher server"))},
        )

        def run(self):
            TeacherEnv.seen = {
                "teacher": self.explicit("teacher."),
                "group_size": self.resolve().env_config.group_size,
            }

        extended.run = run
        return extended


def test_command_classes_can_be_extended_with_new_namespaces(capsys):
    with pytest.raises(SystemExit) as exited:
        run_cli(TeacherEnv, ["serve", "--teacher.base_url", "http://teacher/v1", "--env.group_size", "6"])
    assert exited.value.code == 0
    assert TeacherEnv.seen == {"teacher": {"base_url": "http://teacher/v1"}, "group_size": 6}
    with pytest.raises(SystemExit):
        run_cli(TeacherEnv, ["serve", "--help"])
    assert "--teacher.base_url" in capsys.readouterr().out


# ----------------------------------------------------------------------------------- wandb and evaluate
def test_wandb_goes_offline_without_a_key(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "netrc"))
    ensure_wandb_usable(LayerConfig(use_wandb=False))
    assert "WANDB_MODE" not in os.environ
    ensure_wandb_usable(LayerConfig(use_wandb=True))
    assert os.environ["WANDB_MODE"] == "offline"


def test_wandb_left_alone_with_a_key_or_explicit_mode(monkeypatch, tmp_path):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    netrc = tmp_path / "netrc"
    netrc.write_text("machine api.wandb.ai\n  login user\n  password abc123\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))
    ensure_wandb_usable(LayerConfig(use_wandb=True))
    assert "WANDB_MODE" not in os.environ
    monkeypatch.setenv("NETRC", str(tmp_path / "missing"))
    monkeypatch.setenv("WANDB_API_KEY", "k" * 40)
    ensure_wandb_usable(LayerConfig(use_wandb=True))
    assert "WANDB_MODE" not in os.environ
    monkeypatch.delenv("WANDB_API_KEY")
    monkeypatch.setenv("WANDB_MODE", "disabled")
    ensure_wandb_usable(LayerConfig(use_wandb=True))
    assert os.environ["WANDB_MODE"] == "disabled"


def test_evaluate_config_yaml_shapes_and_redaction(tmp_path):
    argv = [
        "evaluate",
        "--env.data_dir_to_save_evals",
        str(tmp_path / "ev"),
        "--openai.api_key",
        "sk-live-123",
    ]
    run = parse_command(LayerEnv, argv).resolve()
    path = write_evaluate_config(run)
    doc = yaml.safe_load(path.read_text())
    assert set(doc) == {"env", "openai", "slurm", "testing"}
    assert doc["env"]["difficulty"] == 5 and doc["env"]["eval_handling"] == "STOP_TRAIN"
    assert doc["openai"]["api_key"] == "<redacted>" and doc["openai"]["model_name"] == "init-model"
    assert dump_server_configs(ServerBaseline()) == {}
    assert dump_server_configs([APIServerConfig(api_key="x")])[0]["api_key"] == "x"
    assert write_evaluate_config(parse_command(LayerEnv, ["evaluate"]).resolve()) is None


def test_example_yaml_configures_the_reference_envs():
    from environments.arithmetic_server import ArithmeticEnv
    from environments.gsm8k_server import GSM8kEnv
    from tests.helpers.cli_runs import ENVIRONMENTS

    example = str(ENVIRONMENTS / "configs" / "example.yaml")
    gsm8k = parse_command(GSM8kEnv, ["serve", "--config", example, "--env.group_size", "8"]).resolve()
    assert gsm8k.env_config.group_size == 8 and gsm8k.env_config.wandb_name == "example_env"
    assert gsm8k.server_configs.base_url == "http://localhost:9001/v1"  # bare config stays bare
    arithmetic = parse_command(ArithmeticEnv, ["process", "--config", example]).resolve()
    assert arithmetic.env_config.group_size == 4 and arithmetic.env_config.min_digits == 1
    assert [c.server_type for c in arithmetic.server_configs] == ["vllm"]  # from config_init, kept under YAML
