"""atropos-sft-gen / atropos-dpo-gen on `process` JSONL files (no API involved)."""

from __future__ import annotations

from tests.helpers.cli_runs import read_jsonl
from tests.helpers.cli_tools import FIXTURES, free_port_url, run_tool


def test_sft_from_jsonl_atropos_format(tmp_path, process_jsonl, tiny_model_dir):
    out = tmp_path / "sft.jsonl"
    proc = run_tool("sft", out, "--input", process_jsonl, "--tokenizer", tiny_model_dir, subprocess_=True)
    assert proc.returncode == 0, proc.stderr
    rows = read_jsonl(out)
    # group 1: 1.0 and 0.5 kept; group 2: 1.0, 1.0, 0.8 (top 3, zero dropped); group 3: 0.9, 0.7
    assert [r["score"] for r in rows] == [1.0, 0.5, 1.0, 1.0, 0.8, 0.9, 0.7]
    assert rows[0]["completion"] == "The answer is 5<|im_end|>"
    assert rows[0]["prefix"].startswith("<|im_start|>system\nYou are a careful assistant.")
    assert rows[0]["prefix"].endswith("<|im_start|>assistant\n")
    assert (
        rows[2]["completion"] == rows[3]["completion"] == "three apples<|im_end|>"
    )  # identical completions survive
    assert set(rows[0]) == {"prefix", "completion", "score"}
    assert "wrote 7 records from 3 groups" in proc.stderr


def test_sft_trl_formats_and_top_n(tmp_path, process_jsonl, tiny_model_dir):
    out = tmp_path / "trl.jsonl"
    args = (
        "--input",
        process_jsonl,
        "--tokenizer",
        tiny_model_dir,
        "--format",
        "trl",
        "--save-top-n-per-group",
        "1",
    )
    assert run_tool("sft", out, *args).returncode == 0
    rows = read_jsonl(out)
    assert len(rows) == 3 and all(set(r) == {"prompt", "completion"} for r in rows)
    out2 = tmp_path / "trl_msgs.jsonl"
    assert (
        run_tool("sft", out2, "--input", process_jsonl, "--save-messages", "--format", "trl").returncode == 0
    )
    rows = read_jsonl(out2)
    assert all(set(r) == {"messages"} for r in rows)
    assert rows[0]["messages"][-1] == {"role": "assistant", "content": "The answer is 5"}


def test_sft_messages_mode_needs_no_tokenizer(tmp_path, process_jsonl):
    out = tmp_path / "m.jsonl"
    # the default tokenizer is a hub name that cannot be downloaded here: it must not be loaded
    proc = run_tool("sft", out, "--input", process_jsonl, "--save-messages", env={"HF_HUB_OFFLINE": "1"})
    assert proc.returncode == 0, proc.stderr
    assert read_jsonl(out)[0] == {"messages": read_jsonl(process_jsonl)[0]["messages"][0], "score": 1.0}


def test_sft_score_filters(tmp_path, process_jsonl, tiny_model_dir):
    out = tmp_path / "neg.jsonl"
    args = ("--input", process_jsonl, "--tokenizer", tiny_model_dir, "--allow-negative-scores")
    assert run_tool("sft", out, *args, "--save-top-n-per-group", "4").returncode == 0
    assert len(read_jsonl(out)) == 12
    out2 = tmp_path / "diff.jsonl"
    assert run_tool("sft", out2, *args, "--minimum-score-diff-max-min", "1.5").returncode == 0
    # only scores more than 1.5 above their group's minimum: 1.0 (min -1), 0.9 (min -1), 0.7 - (-1) = 1.7
    assert [r["score"] for r in read_jsonl(out2)] == [1.0, 0.9, 0.7]


def test_num_seqs_to_save_stops_after_the_group_that_reaches_it(tmp_path, process_jsonl, tiny_model_dir):
    out = tmp_path / "few.jsonl"
    proc = run_tool(
        "sft", out, "--input", process_jsonl, "--tokenizer", tiny_model_dir, "--num-seqs-to-save", "3"
    )
    assert proc.returncode == 0
    assert len(read_jsonl(out)) == 5  # 2 from the first group, 3 from the second


def test_dpo_pairs_and_seed_determinism(tmp_path, process_jsonl, tiny_model_dir):
    outs = []
    for name in ("a", "b"):
        out = tmp_path / f"dpo_{name}.jsonl"
        proc = run_tool("dpo", out, "--input", process_jsonl, "--tokenizer", tiny_model_dir, "--seed", "7")
        assert proc.returncode == 0, proc.stderr
        outs.append(out.read_bytes())
    assert outs[0] == outs[1]
    rows = read_jsonl(tmp_path / "dpo_a.jsonl")
    assert rows and all(list(r) == ["prefix", "pos", "score", "neg"] for r in rows)
    for r in rows:
        assert r["pos"] != r["neg"]
    # group 1: 1.0 pairs with one of the two -1.0 seqs, 0.5 with the other (strictly below 0.0)
    first = [r for r in rows if "two plus three" in r["prefix"]]
    assert [r["score"] for r in first] == [1.0, 0.5]
    assert {r["neg"] for r in first} == {"The answer is 6<|im_end|>", "seven<|im_end|>"}
    # group 2 has no pair with a score gap > 0.5 except against the 0.0 sequence
    second = [r for r in rows if "apples" in r["prefix"]]
    assert [(r["score"], r["neg"]) for r in second] == [(1.0, "five apples<|im_end|>")]


def test_dpo_trl_messages(tmp_path, process_jsonl):
    out = tmp_path / "dpo_trl.jsonl"
    proc = run_tool("dpo", out, "--input", process_jsonl, "--save-messages", "--format", "trl", "--seed", "1")
    assert proc.returncode == 0, proc.stderr
    rows = read_jsonl(out)
    assert all(set(r) == {"prompt", "chosen", "rejected"} for r in rows)
    assert rows[0]["prompt"][0]["role"] == "system" and rows[0]["prompt"][-1]["role"] == "user"
    assert rows[0]["chosen"] == [{"role": "assistant", "content": "The answer is 5"}]


def test_existing_output_is_checked_before_anything_else(tmp_path, process_jsonl):
    out = tmp_path / "exists.jsonl"
    out.write_text("keep me\n")
    # an unreachable API and a missing tokenizer would fail too; the file check must come first
    proc = run_tool("sft", out, "--api-url", free_port_url(), "--tokenizer", "/nonexistent", subprocess_=True)
    assert proc.returncode == 1
    assert "already exists" in proc.stderr and "--append-to-previous" in proc.stderr
    assert out.read_text() == "keep me\n"
    proc = run_tool(
        "dpo", out, "--input", process_jsonl, "--save-messages", "--append-to-previous", "--seed", "0"
    )
    assert proc.returncode == 0
    lines = out.read_text().splitlines()
    assert lines[0] == "keep me" and len(lines) > 1


def test_malformed_lines_are_skipped_not_fatal(tmp_path):
    out = tmp_path / "ok.jsonl"
    proc = run_tool("sft", out, "--input", FIXTURES / "malformed.jsonl", "--save-messages")
    assert proc.returncode == 0
    assert "skipped 5" in proc.stderr and "malformed.jsonl:2: invalid JSON" in proc.stderr
    assert [r["score"] for r in read_jsonl(out)] == [1.0, 0.75, 0.25]


def test_save_messages_without_messages_is_a_clear_error(tmp_path, process_jsonl):
    no_msgs = tmp_path / "no_messages.jsonl"
    no_msgs.write_text(
        "".join(
            line.replace('"messages"', '"x_messages"') + "\n"
            for line in process_jsonl.read_text().splitlines()
        )
    )
    out = tmp_path / "out.jsonl"
    proc = run_tool("sft", out, "--input", no_msgs, "--save-messages")
    assert proc.returncode == 1
    assert "no group carried messages" in proc.stderr
    assert not out.exists()  # nothing written, no empty file left behind


def test_missing_input_and_unloadable_tokenizer(tmp_path, process_jsonl):
    proc = run_tool("sft", tmp_path / "o.jsonl", "--input", tmp_path / "missing.jsonl", "--save-messages")
    assert proc.returncode == 1 and "does not exist" in proc.stderr
    proc = run_tool(
        "dpo", tmp_path / "o.jsonl", "--input", process_jsonl, "--tokenizer", tmp_path / "no-tokenizer"
    )
    assert proc.returncode == 1 and "cannot load tokenizer" in proc.stderr


def test_unreachable_api_is_a_clear_error(tmp_path):
    out = tmp_path / "o.jsonl"
    for tool in ("sft", "dpo"):
        proc = run_tool(tool, out, "--api-url", free_port_url(), "--save-messages", timeout=60)
        assert proc.returncode == 1
        assert "cannot reach the trajectory API" in proc.stderr
    assert not out.exists()
