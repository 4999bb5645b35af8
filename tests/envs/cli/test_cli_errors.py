"""Bad flags and bad configuration files: one line on stderr naming the field, non-zero exit, no traceback.

Every kind of failure is checked through ``run_cli`` in-process (fast); a few also run the arithmetic
environment's file as a real subprocess, exactly as a user would.
"""

from __future__ import annotations

import pytest
import yaml

from atroposlib.envs.cli import run_cli
from atroposlib.envs.cli.command import build_command_cls
from environments.arithmetic_server import ArithmeticEnv
from tests.helpers.cli_runs import ENVIRONMENTS, run_env

SCRIPT = ENVIRONMENTS / "arithmetic_server.py"

FLAG_CASES = {
    "unknown flag": (["process", "--env.not_a_field", "3"], "unrecognized arguments: --env.not_a_field"),
    "misspelled flag": (
        ["process", "--env.grup_size", "4"],
        "unrecognized arguments: --env.grup_size 4; did you mean --env.group_size?",
    ),
    "misspelled server flag": (["serve", "--openai.modle_name=m"], "did you mean --openai.model_name?"),
    "wrong type": (["process", "--env.group_size", "four"], "--env.group_size"),
    "group of one (process)": (["process", "--env.group_size", "1"], "a group needs at least 2 rollouts"),
    "group of one (serve)": (
        ["serve", "--env.group_size", "1"],
        "--env.group_size 1: a group needs at least 2",
    ),
    "bad boolean": (["serve", "--env.use_wandb", "maybe"], "--env.use_wandb"),
    "bad literal": (["serve", "--openai.server_type", "tgi"], "--openai.server_type"),
    "bad enum": (["serve", "--env.eval_handling", "SOMETIMES"], "--env.eval_handling"),
    "bad list": (["serve", "--env.operations", '["+", "/"]'], "--env.operations"),
    "missing value": (["serve", "--env.group_size"], "--env.group_size"),
    "constraint": (["evaluate", "--env.max_reasoning_tokens", "5"], "env.max_reasoning_tokens"),
    "cross-field validator": (["process", "--env.min_digits", "3", "--env.max_digits", "2"], "min_digits"),
    "no subcommand": ([], "required"),
    "unknown subcommand": (["train"], "invalid choice: 'train'"),
    "missing config file": (["serve", "--config", "nope.yaml"], "nope.yaml: file not found"),
}

YAML_CASES = {
    "yaml syntax": ("env:\n  group_size: [4\n", "invalid YAML"),
    "yaml wrong type": ("env:\n  group_size: four\n", "env.group_size"),
    "yaml not a mapping": ("- env\n", "expected a mapping"),
    "yaml env section": ("env: 12\n", "'env' must be a mapping"),
    "yaml bad slurm": ("slurm: perhaps\n", "slurm"),
    "yaml openai list with flags": (
        yaml.safe_dump({"openai": [{"base_url": "http://a/v1"}, {"base_url": "http://b/v1"}]}),
        "--openai.timeout",
    ),
}


def _yaml(tmp_path, text: str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return str(path)


def _one_error_line(stderr: str, needle: str) -> None:
    lines = [line for line in stderr.splitlines() if line.strip()]
    assert len(lines) == 1, stderr
    assert "error:" in lines[0] and needle in lines[0], lines[0]
    assert "Traceback" not in stderr


def _run_in_process(argv, capsys, monkeypatch, tmp_path) -> tuple[int, str]:
    monkeypatch.chdir(tmp_path)
    with pytest.raises(SystemExit) as exited:
        run_cli(ArithmeticEnv, argv)
    return exited.value.code, capsys.readouterr().err


@pytest.mark.parametrize("case", list(FLAG_CASES))
def test_bad_flags(case, capsys, monkeypatch, tmp_path):
    argv, needle = FLAG_CASES[case]
    code, stderr = _run_in_process(argv, capsys, monkeypatch, tmp_path)
    assert code == 2
    _one_error_line(stderr, needle)


@pytest.mark.parametrize("case", list(YAML_CASES))
def test_bad_yaml(case, capsys, monkeypatch, tmp_path):
    text, needle = YAML_CASES[case]
    argv = ["serve", "--config", _yaml(tmp_path, text)]
    if case == "yaml openai list with flags":
        argv += ["--openai.timeout", "3"]
    code, stderr = _run_in_process(argv, capsys, monkeypatch, tmp_path)
    assert code == 2
    _one_error_line(stderr, needle)


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["process", "--env.not_a_field", "3"], "unrecognized arguments: --env.not_a_field"),
        (["process", "--env.group_size", "four"], "--env.group_size"),
        ([], "required"),
        (["serve", "--config", "{yaml}"], "invalid YAML"),
    ],
    ids=["unknown flag", "wrong type", "no subcommand", "bad yaml"],
)
def test_bad_input_as_a_real_subprocess(tmp_path, args, needle):
    args = [a.replace("{yaml}", _yaml(tmp_path, "env: {group_size: [4}\n")) for a in args]
    result = run_env(SCRIPT, args, cwd=tmp_path)
    assert result.returncode == 2, result.stderr
    _one_error_line(result.stderr, needle)


def test_invalid_reasoning_effort_fails_construction_in_one_line(tmp_path):
    result = run_env(
        SCRIPT, ["evaluate", "--env.reasoning_effort", "extreme", "--env.use_wandb", "false"], cwd=tmp_path
    )
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 1
    assert "could not construct ArithmeticEnv" in lines[-1] and "extreme" in lines[-1]
    assert "Traceback" not in result.stderr


def test_group_of_one_is_accepted_where_the_env_scores_single_samples(capsys, monkeypatch, tmp_path):
    class SingleSampleArithmetic(ArithmeticEnv):
        single_sample_scoring = True

    monkeypatch.chdir(tmp_path)
    cmd = build_command_cls(SingleSampleArithmetic, "process")(**{"env.group_size": 1})
    assert cmd.resolve().env_config.group_size == 1
    evaluate = build_command_cls(ArithmeticEnv, "evaluate")(**{"env.group_size": 1})
    assert evaluate.resolve().env_config.group_size == 1  # evaluation samples as it likes
