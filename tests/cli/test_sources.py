"""Reading `process` JSONL files: malformed lines are reported and skipped, files can be followed."""

from __future__ import annotations

import json

import pytest

from atroposlib.cli._tooling.errors import ToolError
from atroposlib.cli._tooling.sources import JsonlGroupFile, Problems, group_problem, read_jsonl_groups
from tests.helpers.cli_tools import FIXTURES


def test_malformed_fixture_lines_are_skipped_with_reasons():
    problems = Problems()
    records = list(read_jsonl_groups([FIXTURES / "malformed.jsonl"], problems))
    assert [r.seq for r in records] == [1, 7]  # line numbers of the two usable groups
    assert records[0].env_name == "malformed"
    assert problems.count == 5
    summary = problems.summary()
    for needle in (
        "malformed.jsonl:2: invalid JSON",
        ":3: neither 'tokens' nor 'messages'",
        ":5: non-numeric",
        ":6: expected a JSON object",
        ":8: invalid JSON",
    ):
        assert needle in summary


def test_group_problem_checks():
    assert group_problem({"scores": [1.0], "tokens": [[1]]}) is None
    assert group_problem({"scores": [1.0, 2.0], "tokens": [[1]]}) == "2 scores but 1 token rows"
    assert group_problem({"scores": [float("nan")], "tokens": [[1]]}).startswith("non-numeric or non-finite")
    assert group_problem({"scores": [True], "tokens": [[1]]}).startswith("non-numeric")
    assert group_problem({"scores": [1.0], "tokens": [[1]], "masks": []}) == "1 token rows but 0 mask rows"
    assert group_problem({"scores": []}) == "no 'scores' list"


def test_follow_a_growing_file(tmp_path):
    path = tmp_path / "grow.jsonl"
    line = json.dumps({"scores": [1.0], "tokens": [[1, 2]], "masks": [[-100, 2]]})
    path.write_text(line + "\n" + line[:10])  # second line still being written
    reader = JsonlGroupFile(path)
    assert len(reader.read_new()) == 1
    assert reader.read_new() == []
    with path.open("a") as fh:
        fh.write(line[10:] + "\n")
    assert len(reader.read_new()) == 1
    assert reader.problems.count == 0


def test_missing_file_is_a_clear_error(tmp_path):
    with pytest.raises(ToolError, match="does not exist"):
        JsonlGroupFile(tmp_path / "nope.jsonl")
