"""Bad flags and bad configuration files: one line on stderr naming the field, non-zero exit, no traceback.

Each case runs the arithmetic environment's file as a real subprocess, as a user would. The message texts
of every rule are unit-tested in test_cli_values.py and test_cli_layering.py; these cases check that each
kind of failure reaches the user as one line and the right exit status.
"""

from __future__ import annotations

import pytest
import yaml

from tests.fixtures.cli_runs import ENVIRONMENTS, run_env

SCRIPT = ENVIRONMENTS / "arithmetic_server.py"


def _yaml(tmp_path, text: str) -> str:
    path = tmp_path / "config.yaml"
    path.write_text(text)
    return str(path)


CASES = {
    "unknown flag": (["process", "--env.not_a_field", "3"], "unrecognized arguments: --env.not_a_field"),
    "wrong type": (["process", "--env.group_size", "four"], "--env.group_size"),
    "bad boolean": (["serve", "--env.use_wandb", "maybe"], "--env.use_wandb"),
    "constraint": (["evaluate", "--env.max_reasoning_tokens", "5"], "env.max_reasoning_tokens"),
    "cross-field validator": (["process", "--env.min_digits", "3", "--env.max_digits", "2"], "min_digits"),
    "no subcommand": ([], "required"),
    "missing config file": (["serve", "--config", "nope.yaml"], "nope.yaml: file not found"),
}

YAML_CASES = {
    "yaml syntax": ("env:\n  group_size: [4\n", "invalid YAML"),
    "yaml wrong type": ("env:\n  group_size: four\n", "env.group_size"),
    "yaml bad slurm": ("slurm: perhaps\n", "slurm"),
}


def _assert_one_line_error(result, needle: str, code: int = 2) -> None:
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == code, result.stderr
    assert len(lines) == 1, result.stderr
    assert "error:" in lines[0] and needle in lines[0], lines[0]
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("case", list(CASES))
def test_bad_flags(tmp_path, case):
    args, needle = CASES[case]
    _assert_one_line_error(run_env(SCRIPT, args, cwd=tmp_path), needle)


@pytest.mark.parametrize("case", list(YAML_CASES))
def test_bad_yaml(tmp_path, case):
    text, needle = YAML_CASES[case]
    _assert_one_line_error(
        run_env(SCRIPT, ["serve", "--config", _yaml(tmp_path, text)], cwd=tmp_path), needle
    )


def test_openai_flags_with_several_yaml_servers(tmp_path):
    config = _yaml(
        tmp_path, yaml.safe_dump({"openai": [{"base_url": "http://a/v1"}, {"base_url": "http://b/v1"}]})
    )
    result = run_env(SCRIPT, ["serve", "--config", config, "--openai.timeout", "3"], cwd=tmp_path)
    _assert_one_line_error(result, "--openai.timeout")


def test_invalid_reasoning_effort_fails_construction_in_one_line(tmp_path):
    result = run_env(
        SCRIPT, ["evaluate", "--env.reasoning_effort", "extreme", "--env.use_wandb", "false"], cwd=tmp_path
    )
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert result.returncode == 1
    assert "could not construct ArithmeticEnv" in lines[-1] and "extreme" in lines[-1]
    assert "Traceback" not in result.stderr
