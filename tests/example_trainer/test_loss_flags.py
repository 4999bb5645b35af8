"""The loss, TIS, distillation and staleness flags: what CONFIG.md documents parses to the settings the loss
computes, and bad values get one line naming the flag."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest
from pydantic import ValidationError

from example_trainer.grpo import main
from example_trainer.grpo.cli import config_from_args, describe_validation_error, parse_args
from example_trainer.grpo.data import ScoreShaping
from example_trainer.grpo.loss import LossSettings

CONFIG_MD = Path(__file__).resolve().parents[2] / "CONFIG.md"


def _documented_dapo_flags() -> list[str]:
    """The flags of CONFIG.md's "A DAPO run as the paper sets it" command."""
    text = " ".join(CONFIG_MD.read_text().split())
    found = re.search(r"A DAPO run as the paper sets it: `([^`]+)`", text)
    assert found, "CONFIG.md no longer shows the DAPO command"
    return shlex.split(found.group(1))


def test_the_documented_dapo_command_sets_what_dapo_needs():
    config = config_from_args(parse_args(["--model", "m", *_documented_dapo_flags()]))
    assert config.loss_settings == LossSettings(loss_type="dapo", clip_eps_low=0.2, clip_eps_high=0.28)
    assert config.score_shaping == ScoreShaping(advantage="grpo", overlong=(20480, 4096))


def test_defaults_are_the_original_loss():
    config = config_from_args(parse_args(["--model", "m", "--clip-eps", "0.3"]))
    assert config.loss_settings == LossSettings(loss_type="grpo", clip_eps_low=0.3, clip_eps_high=0.3)
    assert config.score_shaping == ScoreShaping()
    dr = config_from_args(parse_args(["--model", "m", "--loss-type", "dr_grpo", "--advantage", "rloo"]))
    assert dr.score_shaping == ScoreShaping(advantage="rloo", scale_by_std=False)


def test_distillation_and_tis_flags():
    argv = ["--model", "m", "--distill-coef", "0.5", "--distill-kind", "forward", "--rl-coef", "0",
            "--tis-cap", "2", "--max-staleness", "1"]  # fmt: skip
    config = config_from_args(parse_args(argv))
    s = config.loss_settings
    assert (s.distill_coef, s.distill_kind, s.rl_coef, s.tis_cap) == (0.5, "forward", 0.0, 2.0)
    assert config.max_staleness == 1


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["--clip-eps-low", "1.0"], "--clip-eps-low"),
        (["--tis-cap", "0.5"], "--tis-cap"),
        (["--distill-coef", "-1"], "--distill-coef"),
        (["--max-staleness", "-1"], "--max-staleness"),
        (["--max-completion-tokens", "0"], "--max-completion-tokens"),
    ],
)
def test_bad_values_name_the_flag(argv, flag, capsys):
    with pytest.raises(ValidationError) as info:
        config_from_args(parse_args(["--model", "m", *argv]))
    assert describe_validation_error(info.value).startswith(flag + ":")
    assert main(["--model", "m", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith(f"atropos-grpo: error: {flag}:")


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--overlong-buffer", "4"], "overlong_buffer needs max_completion_tokens"),
        (["--rl-coef", "0"], "nothing to train"),
    ],
)
def test_inconsistent_settings_are_one_line(argv, message, capsys):
    assert main(["--model", "m", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and message in err[0]


def test_unknown_loss_type_exits_2(capsys):
    with pytest.raises(SystemExit) as info:
        main(["--model", "m", "--loss-type", "ppo"])
    assert info.value.code == 2
    assert "invalid choice: 'ppo'" in capsys.readouterr().err
