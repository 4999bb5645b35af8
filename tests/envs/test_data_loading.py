"""Environment data: local files in the hub schema, field checks, empty sets, hub failures."""

import json

import pytest

from atroposlib.envs.data_loading import DatasetError, hub_split, load_rows, read_local_rows, seeded_split
from tests.helpers.single_turn_runs import write_jsonl


def test_reads_every_local_format(tmp_path):
    rows = [{"question": "q1", "answer": 1}, {"question": "q2", "answer": 2}]
    jsonl = write_jsonl(tmp_path / "d.jsonl", rows)
    (tmp_path / "d.json").write_text(json.dumps(rows))
    (tmp_path / "d.csv").write_text("question,answer\nq1,1\nq2,2\n")
    import pandas as pd

    pd.DataFrame(rows).to_parquet(tmp_path / "d.parquet")
    assert read_local_rows(jsonl) == rows
    assert read_local_rows(tmp_path / "d.json") == rows
    assert [r["question"] for r in read_local_rows(tmp_path / "d.csv")] == ["q1", "q2"]
    assert read_local_rows(tmp_path / "d.parquet") == rows


def test_missing_field_names_file_row_and_field(tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [{"question": "q", "answer": 1}, {"question": "q"}])
    with pytest.raises(DatasetError) as info:
        load_rows(path, hub_loader=lambda: [], required=["question", "answer"], hub_name="gsm8k")
    assert str(info.value) == f"{path}: row 1: missing field 'answer'"


def test_empty_and_bad_files_are_errors(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    with pytest.raises(DatasetError, match="no rows"):
        load_rows(empty, hub_loader=lambda: [], required=[], hub_name="x")
    with pytest.raises(DatasetError, match="no such file"):
        read_local_rows(tmp_path / "missing.jsonl")
    (tmp_path / "bad.jsonl").write_text('{"a": 1}\n{oops\n')
    with pytest.raises(DatasetError, match="line 2"):
        read_local_rows(tmp_path / "bad.jsonl")
    (tmp_path / "d.txt").write_text("x")
    with pytest.raises(DatasetError, match="unknown format"):
        read_local_rows(tmp_path / "d.txt")


def test_hub_failure_suggests_a_local_file(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    with pytest.raises(DatasetError, match=r"no/such-set: cannot load from the hub .*--env.dataset_path"):
        load_rows(None, hub_split("no/such-set", "train"), required=["a"], hub_name="no/such-set")


def test_hub_rows_are_checked_and_limited():
    rows = load_rows(None, lambda: [{"a": i} for i in range(5)], required=["a"], hub_name="h", limit=2)
    assert rows == [{"a": 0}, {"a": 1}]


def test_seeded_split_holds_out_a_fifth_the_same_way_for_a_seed():
    items = list(range(10))
    train, test = seeded_split(items, seed=42)
    assert len(train) == 8 and len(test) == 2 and sorted(train + test) == items
    assert items == list(range(10))  # the caller's list is not shuffled
    assert seeded_split(items, seed=42) == (train, test)
    assert seeded_split(items, seed=7) != (train, test)
    # nothing left to hold out: the last shuffled ones are evaluated on as well as trained on
    assert seeded_split([5], seed=0) == ([5], [5])
    all_train, kept = seeded_split([1, 2, 3, 4], seed=0, train_share=1.0, min_eval=2)
    assert len(all_train) == 4 and kept == all_train[-2:]
