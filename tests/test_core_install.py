"""A core install (``pip install atroposlib``, no extras) runs the README's first environment."""

from __future__ import annotations

import json
import os
import subprocess
import venv
from pathlib import Path

import pytest

from atroposlib.testing.scripted_server import launch_scripted_server
from tests.helpers.cli_runs import GSM8K_SAMPLE, gsm8k_responder, scripted_flags

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.slow
def test_gsm8k_process_on_a_core_install(tmp_path, tiny_model_dir):
    env_dir = tmp_path / "venv"
    venv.create(env_dir, with_pip=True)
    python = env_dir / "bin" / "python"
    subprocess.run(
        [str(python), "-m", "pip", "install", "-q", "--disable-pip-version-check", str(ROOT)],
        check=True,
        capture_output=True,
        timeout=900,
    )
    # only the core: the trainer's and the gym's extras are absent
    probe = subprocess.run(
        [
            str(python),
            "-c",
            "import importlib.util as u; print(u.find_spec('torch'), u.find_spec('pebble') is not None)",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    assert probe.stdout.split() == ["None", "True"]
    with launch_scripted_server(respond=gsm8k_responder(), tokenizer=tiny_model_dir) as server:
        run = subprocess.run(
            [
                str(python),
                str(ROOT / "environments" / "gsm8k_server.py"),
                "process",
                *scripted_flags(server.base_url, tiny_model_dir),
                "--openai.server_type",
                "vllm",
                "--env.dataset_path",
                GSM8K_SAMPLE,
                "--env.group_size",
                "4",
                "--env.total_steps",
                "2",
            ],  # fmt: skip
            cwd=tmp_path,
            capture_output=True,
            text=True,
            timeout=300,
            env={**os.environ, "WANDB_MODE": "offline", "HF_HUB_OFFLINE": "1", "PYTHONPATH": ""},
        )
    assert run.returncode == 0, run.stderr[-2000:]
    groups = [json.loads(line) for line in (tmp_path / "data" / "gsm8k.jsonl").read_text().splitlines()]
    assert len(groups) == 2
    assert all(sorted(g["scores"]) == [-1.0, -1.0, 1.0, 1.0] for g in groups)
