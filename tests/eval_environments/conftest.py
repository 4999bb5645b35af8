"""Fixtures of the benchmark tests: runs against the scripted inference server."""

from __future__ import annotations

import pytest

from tests.helpers.single_turn_runs import OFFLINE, ScriptedRuns


@pytest.fixture
def scripted(tiny_model_dir, tmp_path, capsys) -> ScriptedRuns:
    """The test's benchmark runs against the scripted inference server (in ``tmp_path``, printed output
    captured)."""
    return ScriptedRuns(tiny_model_dir, tmp_path, capsys)


@pytest.fixture
def hub_offline(monkeypatch):
    """The Hugging Face hub is unreachable: a benchmark's default hub set fails to load at once."""
    for key, value in OFFLINE.items():
        monkeypatch.setenv(key, value)
