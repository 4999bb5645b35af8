"""Tokenizer loading without a reachable hub: one clear message at once, or the cached copy."""

from __future__ import annotations

import os
import shutil

import pytest

from atroposlib.testing.api_process import free_port
from atroposlib.utils.hf_tokenizers import TokenizerLoadError, load_hf_tokenizer
from tests.helpers.cli_runs import REPO_ROOT, run_env

SAMPLE_ENV = REPO_ROOT / "tests" / "helpers" / "sample_envs.py"


def test_local_directory_loads(tiny_model_dir):
    tokenizer = load_hf_tokenizer(str(tiny_model_dir))
    assert tokenizer.decode(tokenizer.encode("two plus two")) == "two plus two"


def test_missing_directory_is_named(tmp_path):
    with pytest.raises(
        TokenizerLoadError, match=r"cannot load tokenizer '.*nope' \(--x\): no such directory"
    ):
        load_hf_tokenizer(str(tmp_path / "nope"), flag="--x")


def test_offline_mode_without_a_cached_copy_says_what_to_pass(monkeypatch, tmp_path):
    # The test session runs with HF_HUB_OFFLINE=1 (tests/conftest.py).
    with pytest.raises(TokenizerLoadError) as info:
        load_hf_tokenizer("someone/not-cached-tokenizer", flag="--env.tokenizer_name")
    message = str(info.value)
    assert "HF_HUB_OFFLINE=1" in message and "--env.tokenizer_name /path/to/tokenizer" in message
    assert "\n" not in message


def _unreachable_hub_env(tmp_path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE")}
    env["HF_HUB_OFFLINE"] = "0"  # run_env would otherwise set it
    env["HF_ENDPOINT"] = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    env["HF_HOME"] = str(tmp_path / "hf-home")
    return env


def _evaluate(tokenizer_name: str, tmp_path, env: dict[str, str]):
    args = ["evaluate", "--env.tokenizer_name", tokenizer_name, "--env.use_wandb", "false"]
    return run_env(SAMPLE_ENV, args, cwd=tmp_path, env=env, timeout=240)


def test_unreachable_hub_fails_at_once_with_one_message(tmp_path):
    result = _evaluate("someone/some-tokenizer", tmp_path, _unreachable_hub_env(tmp_path))
    assert result.returncode == 1, result.stderr[-3000:]
    output = result.stdout + result.stderr
    assert output.count("cannot load tokenizer 'someone/some-tokenizer'") == 1, output[-3000:]
    error = [line for line in result.stderr.splitlines() if ": error: " in line]
    assert len(error) == 1
    assert "unreachable" in error[0] and "--env.tokenizer_name /path/to/tokenizer" in error[0]
    assert "HF_HUB_OFFLINE=1" in error[0]
    assert "Retrying" not in output and "Traceback" not in output


def test_unreachable_hub_uses_a_cached_copy(tmp_path, tiny_model_dir):
    env = _unreachable_hub_env(tmp_path)
    # The Hugging Face cache layout: models--org--name/{refs/main, snapshots/<revision>/files}.
    repo = tmp_path / "hf-home" / "hub" / "models--someone--tiny"
    snapshot = repo / "snapshots" / "0123456789abcdef"
    snapshot.mkdir(parents=True)
    for name in ("tokenizer.json", "tokenizer_config.json", "config.json"):
        shutil.copy(tiny_model_dir / name, snapshot / name)
    (repo / "refs").mkdir()
    (repo / "refs" / "main").write_text("0123456789abcdef")
    result = _evaluate("someone/tiny", tmp_path, env)
    assert result.returncode == 0, result.stderr[-3000:]
    assert "using the cached copy of someone/tiny" in result.stderr
    assert "Retrying" not in result.stderr
