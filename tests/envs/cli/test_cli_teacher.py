"""Distillation environments get ``--teacher.*`` flags and a ``teacher:`` YAML section for their teacher servers."""

from __future__ import annotations

import pytest
import yaml

from atroposlib.envs.base import APIServerConfig
from atroposlib.envs.cli import CliUsageError, parse_command, run_cli
from atroposlib.envs.cli.command import construct_env, write_evaluate_config
from atroposlib.envs.teacher_distillation_env import TeacherDistillationConfig, TeacherDistillationEnv
from tests.helpers.cli_runs import NoOpHooks


class StudentEnv(NoOpHooks, TeacherDistillationEnv):
    name = "student"

    @classmethod
    def config_init(cls):
        return TeacherDistillationConfig(use_wandb=False), [
            APIServerConfig(base_url="http://policy/v1", model_name="p")
        ]


class StudentWithTeacherDefault(StudentEnv):
    @classmethod
    def teacher_config_init(cls):
        return APIServerConfig(
            base_url="http://teacher-default/v1", model_name="t", timeout=9, server_type="vllm"
        )


def test_help_lists_teacher_flags(capsys):
    with pytest.raises(SystemExit):
        run_cli(StudentEnv, ["serve", "--help"])
    out = capsys.readouterr().out
    assert "--teacher.base_url" in out and "--teacher.model_name" in out


def test_no_teacher_configured_passes_nothing():
    run = parse_command(StudentEnv, ["serve"]).resolve()
    assert run.extra_env_kwargs == {}


def test_teacher_flags_reach_the_teacher_server(tiny_model_dir):
    argv = [
        "process",
        "--env.tokenizer_name", str(tiny_model_dir),
        "--env.teacher_enabled", "true",
        "--teacher.base_url", "http://teacher/v1",
        "--teacher.model_name", str(tiny_model_dir),
        "--teacher.server_type", "vllm",
    ]  # fmt: skip
    run = parse_command(StudentEnv, argv).resolve()
    env = construct_env(StudentEnv, run)
    assert [s.config.base_url for s in env.teacher_server.servers] == ["http://teacher/v1"]
    assert [s.config.base_url for s in env.server.servers] == ["http://policy/v1"]


def test_teacher_yaml_and_defaults_layer_like_openai(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"teacher": {"timeout": 30, "base_url": "http://yaml/v1"}}))
    run = parse_command(
        StudentWithTeacherDefault, ["serve", "--config", str(config), "--teacher.timeout", "40"]
    ).resolve()
    teacher = run.extra_env_kwargs["teacher_server_configs"]
    assert (teacher.base_url, teacher.model_name, teacher.timeout) == ("http://yaml/v1", "t", 40)
    run = parse_command(
        StudentWithTeacherDefault, ["evaluate", "--env.data_dir_to_save_evals", str(tmp_path)]
    ).resolve()
    assert run.extra_env_kwargs["teacher_server_configs"].base_url == "http://teacher-default/v1"
    assert yaml.safe_load(write_evaluate_config(run).read_text())["teacher"]["model_name"] == "t"


def test_teacher_flags_with_several_teachers_name_the_teacher_flag(tmp_path):
    config = tmp_path / "c.yaml"
    config.write_text(yaml.safe_dump({"teacher": [{"base_url": "http://a/v1"}, {"base_url": "http://b/v1"}]}))
    listed = parse_command(StudentEnv, ["serve", "--config", str(config)]).resolve()
    assert [c.base_url for c in listed.extra_env_kwargs["teacher_server_configs"]] == [
        "http://a/v1",
        "http://b/v1",
    ]
    with pytest.raises(CliUsageError, match=r"--teacher\.timeout"):
        parse_command(StudentEnv, ["serve", "--config", str(config), "--teacher.timeout", "3"]).resolve()
    config.write_text(yaml.safe_dump({"teacher": {"timeout": "soon"}}))
    with pytest.raises(CliUsageError, match=r"teacher\.timeout"):
        parse_command(StudentEnv, ["serve", "--config", str(config)]).resolve()
