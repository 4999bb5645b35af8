"""Fixtures of the environment tests."""

from __future__ import annotations

import pytest

from tests.helpers.single_turn_runs import OFFLINE


@pytest.fixture
def hub_offline(monkeypatch):
    """The Hugging Face hub is unreachable for this test: an environment's hub data set fails to load at
    once (the default data source is then named in the error)."""
    for key, value in OFFLINE.items():
        monkeypatch.setenv(key, value)
