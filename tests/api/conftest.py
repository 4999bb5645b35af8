"""Fixtures of the API tests: one real ``run-api`` process per module, reset around each test."""

from __future__ import annotations

import pytest
import requests

from atroposlib.testing.api_process import launch_api


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A real ``python -m atroposlib.cli.run_api`` on a free port, shared by a test module."""
    with launch_api(data_dir=tmp_path_factory.mktemp("api")) as proc:
        yield proc


@pytest.fixture
def url(server):
    """The shared server's base URL, with its state reset before and after the test."""
    requests.get(f"{server.url}/reset_data", timeout=10)
    yield server.url
    requests.get(f"{server.url}/reset_data", timeout=10)
