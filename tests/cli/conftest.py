"""Fixtures for the tool tests: the tiny tokenizer and groups built from tests/cli/fixtures."""

from __future__ import annotations

import pytest

from tests.helpers.cli_tools import fixture_groups, write_jsonl


@pytest.fixture(scope="session")
def tiny_tokenizer(tiny_model_dir):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(str(tiny_model_dir))


@pytest.fixture
def groups(tiny_tokenizer):
    """``[(env_name, group), ...]`` for the fixture conversations, tokenized like ``process`` does."""
    return fixture_groups(tiny_tokenizer)


@pytest.fixture
def process_jsonl(tmp_path, groups):
    """A JSONL file as an environment's ``process`` command writes it."""
    return write_jsonl(tmp_path / "arith_process.jsonl", [g for _, g in groups])
