"""Environment files written for atroposlib 0.4.0's documented surface run unchanged.

``tests/fixtures/legacy_envs`` holds two such files (per-rollout ``collect_trajectory`` with
``dedicated_server`` and ``ScoredDataItem``; group ``completion`` with ``tokenize_for_trainer`` and
overridden wandb hooks). They are run as scripts, the way their users run them.
"""

from __future__ import annotations

import importlib.util
import json
import sys

import pytest

from atroposlib.testing.scripted_server import launch_scripted_server
from tests.helpers.cli_runs import LEGACY_ENVS, alternating_responder, read_jsonl, run_env

WORDS = ["apple", "river", "stone", "cloud", "tiger", "maple", "ocean", "piano"]
PHRASES = ["red fox", "blue sky", "green tea", "gold coin", "white snow"]


def _guess(text: str) -> str:
    word = next((w for w in WORDS if f"rhymes with {w[1:]}." in text), "nothing")
    return f"It must be {word}!"


def _echo_respond(prompt, index):
    phrase = next((p for p in PHRASES if f"Repeat exactly: {p}" in str(prompt)), "?")
    return f" {phrase}" if index % 2 == 0 else " something else"


def test_per_rollout_env_runs_process_unchanged(tmp_path, tiny_model_dir):
    responder = alternating_responder(_guess, "No idea.")
    with launch_scripted_server(respond=responder, tokenizer=tiny_model_dir) as server:
        result = run_env(
            LEGACY_ENVS / "word_guess_env.py",
            [
                "process",
                "--env.tokenizer_name", tiny_model_dir,
                "--openai.base_url", server.base_url,
                "--openai.model_name", "scripted-model",
                "--env.total_steps", "2",
                "--env.target_bonus", "2.5",
                "--env.use_wandb", "false",  # process turns wandb on by default; offline runs are tested elsewhere
            ],
            cwd=tmp_path,
        )  # fmt: skip
        paths = {r["path"] for r in server.requests}
    assert result.returncode == 0, result.stderr[-3000:]
    assert paths == {"/v1/chat/completions"}
    groups = read_jsonl(tmp_path / "data" / "word_guess.jsonl")
    assert len(groups) == 2
    for group in groups:
        assert len(group["tokens"]) == 4  # default collect_trajectories fans out group_size rollouts
        assert sorted(group["scores"]) == [0.0, 0.0, 2.5, 2.5]  # --env.target_bonus (a subclass field)
        assert all(len(t) == len(m) for t, m in zip(group["tokens"], group["masks"], strict=True))
        replies = [m[-1]["content"] for m in group["messages"]]  # messages kept per rollout
        assert sum(r.startswith("It must be") for r in replies) == 2
    assert (tmp_path / "data" / "word_guess.html").exists()


def _load_env_class(path, class_name):
    spec = importlib.util.spec_from_file_location(f"legacy_{path.stem}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return getattr(module, class_name)


def test_group_env_runs_process_and_evaluate_unchanged(tmp_path, tiny_model_dir, monkeypatch):
    with launch_scripted_server(respond=_echo_respond, tokenizer=tiny_model_dir) as server:
        common = [
            "--env.tokenizer_name", str(tiny_model_dir),
            "--openai.base_url", server.base_url,
            "--openai.model_name", "scripted-model",
            "--env.use_wandb", "false",
        ]  # fmt: skip
        processed = run_env(
            LEGACY_ENVS / "echo_completion_env.py",
            ["process", *common, "--env.total_steps", "3", "--env.wrong_call_penalty", "-0.5"],
            cwd=tmp_path,
        )
        # evaluate in-process through the file's own entry point, EchoCompletionEnv.cli(), reading sys.argv
        env_cls = _load_env_class(LEGACY_ENVS / "echo_completion_env.py", "EchoCompletionEnv")
        monkeypatch.chdir(tmp_path)
        argv = [
            "evaluate",
            *common,
            "--env.data_dir_to_save_evals",
            str(tmp_path / "evals"),
            "--env.eval_items",
            "2",
        ]
        monkeypatch.setattr(sys, "argv", ["echo_completion_env.py", *argv])
        with pytest.raises(SystemExit) as evaluated:
            env_cls.cli()
    assert processed.returncode == 0, processed.stderr[-3000:]
    # config_init passes 0.4.0's score_buffer_size, a documented compatibility key: dropped without a warning
    assert "ignoring unknown config key 'score_buffer_size'" not in processed.stderr
    groups = read_jsonl(tmp_path / "data" / "echo_completion.jsonl")
    assert len(groups) == 3
    for group in groups:
        assert sorted(group["scores"]) == [-0.5, -0.5, 1.0, 1.0]
        assert group["messages"][0][0]["content"].startswith("Repeat exactly:")
    assert evaluated.value.code == 0
    metrics = json.loads((tmp_path / "evals" / "metrics.json").read_text())
    assert metrics["results"]["all"] == {"eval/accuracy": 1.0}
    assert len(read_jsonl(tmp_path / "evals" / "samples.jsonl")) == 2
