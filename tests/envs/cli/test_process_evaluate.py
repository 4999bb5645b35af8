"""``process`` and ``evaluate`` modes end to end against the scripted inference server (real HTTP)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from atroposlib.envs.base import APIServerConfig
from atroposlib.envs.cli.process import ProcessModeError
from atroposlib.testing.scripted_server import launch_scripted_server
from tests.helpers.sample_envs import CountingEnv, CountingEnvConfig, answer_plus_one

REPO = Path(__file__).resolve().parents[3]


@pytest.fixture
def scripted(tiny_model_dir):
    with launch_scripted_server(respond=answer_plus_one, tokenizer=tiny_model_dir) as server:
        yield server


def server_config(server):
    return APIServerConfig(model_name="scripted", base_url=server.base_url, api_key="x", health_check=False)


def process_env(tiny_model_dir, tmp_path, server, **cfg):
    cfg.setdefault("tokenizer_name", str(tiny_model_dir))
    cfg.setdefault("use_wandb", False)
    cfg.setdefault("group_size", 2)
    cfg.setdefault("include_messages", True)
    cfg.setdefault("data_path_to_save_groups", str(tmp_path / "out" / "groups.jsonl"))
    env = CountingEnv(CountingEnvConfig(**cfg), [server_config(server)])
    env.process_mode = True
    env.n_groups_to_process = cfg.get("total_steps", 5)
    env.group_size_to_process = cfg["group_size"]
    return env


async def test_process_counts_only_accepted_groups_and_writes_jsonl_and_html(
    tiny_model_dir, tmp_path, scripted
):
    # every third item (3, 6, ...) has identical scores and is discarded: 5 accepted groups take 6 items
    env = process_env(
        tiny_model_dir,
        tmp_path,
        scripted,
        total_steps=5,
        same_scores_every=3,
        ensure_scores_are_not_same=True,
    )
    await env.process_manager()
    out = tmp_path / "out" / "groups.jsonl"
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(rows) == 5
    assert env.discard_counts == {"identical_scores": 1}
    assert env.curr_step == 5
    assert [r["messages"][0][0]["content"] for r in rows] == [f"What is {i}+1?" for i in (0, 1, 2, 4, 5)]
    assert rows[0]["scores"] == [1.0, -0.99]
    html = (tmp_path / "out" / "groups.html").read_text()
    assert html.count("<details") == 5 and "What is 5+1?" in html
    assert env.jsonl_writer.closed


async def test_process_stops_after_bounded_consecutive_failures(tiny_model_dir, tmp_path, scripted):
    env = process_env(
        tiny_model_dir,
        tmp_path,
        scripted,
        total_steps=5,
        fail_first_attempt_every=1,
        process_max_consecutive_failures=4,
    )
    # item 0 succeeds, items 1, 2, 3, 4 raise
    with pytest.raises(
        ProcessModeError, match="4 items in a row produced no usable group .*RuntimeError: flaky"
    ):
        await env.process_manager()
    assert len((tmp_path / "out" / "groups.jsonl").read_text().splitlines()) == 1
    assert "What is 0+1?" in (tmp_path / "out" / "groups.html").read_text()


async def test_process_ends_when_items_run_out(tiny_model_dir, tmp_path, scripted):
    env = process_env(tiny_model_dir, tmp_path, scripted, total_steps=10, num_items=3)
    await env.process_manager()
    assert len((tmp_path / "out" / "groups.jsonl").read_text().splitlines()) == 3


async def test_process_without_a_group_leaves_no_files(tiny_model_dir, tmp_path, scripted):
    """Nothing is written until there is a group, so the next run is not pushed to ``groups_1.jsonl``."""
    env = process_env(tiny_model_dir, tmp_path, scripted, total_steps=3, num_items=0)
    await env.process_manager()
    assert not (tmp_path / "out").exists()
    again = process_env(tiny_model_dir, tmp_path, scripted, total_steps=1)
    assert again.config.data_path_to_save_groups == str(tmp_path / "out" / "groups.jsonl")


async def test_evaluate_mode_runs_setup_and_evaluate_with_offline_wandb(
    tiny_model_dir, tmp_path, scripted, monkeypatch
):
    monkeypatch.delenv("WANDB_MODE", raising=False)
    monkeypatch.delenv("WANDB_API_KEY", raising=False)
    monkeypatch.setenv("NETRC", str(tmp_path / "no-netrc"))
    monkeypatch.setenv("WANDB_DIR", str(tmp_path))
    marker = tmp_path / "marks"
    marker.mkdir()
    env = CountingEnv(
        CountingEnvConfig(tokenizer_name=str(tiny_model_dir), use_wandb=True, marker_dir=str(marker)),
        [server_config(scripted)],
    )
    await env._run_evaluate()
    assert os.environ["WANDB_MODE"] == "offline"
    assert (marker / "eval-1").exists()
    assert env.wandb_run is not None and env.wandb_run.settings.mode == "offline"
    assert "offline-run-" in str(env.wandb_run.dir)


def test_process_subcommand_through_cli_shows_progress(tiny_model_dir, tmp_path, scripted):
    out = tmp_path / "cli" / "groups.jsonl"
    cmd = [
        sys.executable,
        str(REPO / "tests" / "helpers" / "sample_envs.py"),
        "process",
        "--env.tokenizer_name",
        str(tiny_model_dir),
        "--env.total_steps",
        "3",
        "--env.group_size",
        "2",
        "--env.use_wandb",
        "false",
        "--env.data_path_to_save_groups",
        str(out),
        "--openai.base_url",
        scripted.base_url,
        "--openai.model_name",
        "scripted",
        "--openai.api_key",
        "x",
    ]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert len(out.read_text().splitlines()) == 3
    assert out.with_suffix(".html").exists()
    assert "3/3" in proc.stderr  # tqdm progress bar
