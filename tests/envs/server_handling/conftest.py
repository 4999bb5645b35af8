"""Fixtures for the inference-server client tests: the tiny tokenizer and a scripted server."""

from __future__ import annotations

import pytest

from atroposlib.testing.scripted_server import launch_scripted_server


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model_dir))


def make_fast(server):
    """Shrink retry waits and health-check intervals so failure paths run in milliseconds."""
    server.retry_wait_multiplier = 0.01
    server.retry_wait_max = 0.02
    server.health_check_interval = 0.05
    server.health_check_max_backoff = 0.05
    server.health_probe_timeout = 2.0
    return server


def echo_respond(prompt, index):
    """Answer ``reply {index}: <last user text or prompt tail>``."""
    if isinstance(prompt, list):
        last = prompt[-1].get("content") if prompt else ""
    else:
        last = str(prompt)[-12:].replace("\n", " ")
    return f"reply {index}: {last}"


@pytest.fixture
def scripted(tiny_model_dir):
    """A scripted server using the tiny tokenizer and :func:`echo_respond`."""
    with launch_scripted_server(respond=echo_respond, tokenizer=str(tiny_model_dir)) as server:
        yield server
