"""Fixtures of the environment tests."""

from __future__ import annotations

import pytest

from tests.helpers.single_turn_runs import OFFLINE, ScriptedRuns


@pytest.fixture
def scripted(tiny_model_dir, tmp_path, capsys) -> ScriptedRuns:
    """The test's environment runs against the scripted inference server (in ``tmp_path``, with the tiny
    tokenizer, printed output captured)."""
    return ScriptedRuns(tiny_model_dir, tmp_path, capsys)


@pytest.fixture
def hub_offline(monkeypatch):
    """The Hugging Face hub is unreachable for this test: an environment's hub data set fails to load at
    once (the default data source is then named in the error)."""
    for key, value in OFFLINE.items():
        monkeypatch.setenv(key, value)
