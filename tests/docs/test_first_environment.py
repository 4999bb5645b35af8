"""docs/first-environment.md: its example file runs with ``process`` and ``evaluate`` against the scripted
inference server, and the page shows exactly that file's code."""

from __future__ import annotations

import importlib.util
import json
import re
import textwrap
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from tests.helpers.cli_runs import read_jsonl
from tests.helpers.single_turn_runs import ScriptedRuns

REPO = Path(__file__).resolve().parents[2]
GUIDE = REPO / "docs" / "first-environment.md"
EXAMPLE = REPO / "docs" / "examples" / "first_env.py"
DATA = REPO / "docs" / "examples" / "capitals.jsonl"


def load(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def code_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


def test_the_guide_shows_the_whole_example_file_in_order():
    # The page shows the file in consecutive pieces; a method may appear dedented (ruff formats Markdown
    # code), so each piece and the file's next lines are compared dedented. Blank lines do not count.
    blocks = [
        code_lines(textwrap.dedent(b)) for b in re.findall(r"```python\n(.*?)```", GUIDE.read_text(), re.S)
    ]
    assert len(blocks) >= 5
    file_lines = code_lines(EXAMPLE.read_text())
    position = 0
    for block in blocks:
        piece = file_lines[position : position + len(block)]
        assert code_lines(textwrap.dedent("\n".join(piece))) == block, f"the page differs from {EXAMPLE.name}"
        position += len(block)
    assert position == len(file_lines), f"the page leaves out the end of {EXAMPLE.name}"


def test_the_guide_shows_a_real_data_row():
    shown = re.search(r"```json\n(.*?)\n```", GUIDE.read_text(), re.S).group(1)
    assert json.loads(shown) == json.loads(DATA.read_text().splitlines()[0])


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ("Paris", 1.0),
        ("paris.", 1.0),
        ("<think>France... Lyon? No.</think> Paris!", 1.0),
        ("Lyon", 0.0),
        ("Paris or Lyon", 0.0),
        ("", 0.0),
    ],
)
def test_score_reply(reply, score):
    assert load(EXAMPLE, "first_env").score_reply(reply, "Paris") == score


def test_process_writes_scored_groups(tmp_path, tiny_model_dir):
    answers = load(EXAMPLE.with_name("capitals_answers.py"), "capitals_answers")
    out = tmp_path / "runs" / "capitals.jsonl"
    args = ["--env.total_steps", "3", "--env.data_path_to_save_groups", out]
    requests = ScriptedRuns(tiny_model_dir, tmp_path).command(
        EXAMPLE, "process", args, answers.respond, server_type=None
    )
    assert {r["path"] for r in requests} == {"/v1/chat/completions"}
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    rows = [json.loads(line) for line in DATA.read_text().splitlines()]
    groups = read_jsonl(out)
    assert len(groups) == 3
    for group, row in zip(groups, rows, strict=False):  # the first training rows, in order
        assert group["scores"] == [1.0, 0.0, 1.0, 0.0]
        replies = [messages[-1]["content"] for messages in group["messages"]]
        assert replies == [f"{row['capital']}.", "Springfield"] * 2
        assert f"capital of {row['country']}?" in group["messages"][0][1]["content"]
        for tokens, masks, reply in zip(group["tokens"], group["masks"], replies, strict=True):
            assert len(tokens) == len(masks)
            trained = [t for t, m in zip(tokens, masks, strict=True) if m != -100]
            start = masks.index(trained[0])
            assert all(m == -100 for m in masks[:start])  # the prompt is masked
            assert tokenizer.decode(trained, skip_special_tokens=True).strip() == reply
    assert out.with_suffix(".html").exists()


def test_evaluate_scores_the_held_out_rows(tmp_path, tiny_model_dir):
    answers = load(EXAMPLE.with_name("capitals_answers.py"), "capitals_answers")
    evals = tmp_path / "evals"
    args = ["--env.data_dir_to_save_evals", evals]
    ScriptedRuns(tiny_model_dir, tmp_path).command(
        EXAMPLE, "evaluate", args, answers.respond, server_type=None
    )
    metrics = json.loads((evals / "metrics.json").read_text())
    assert metrics["results"]["all"] == {"eval/percent_correct": 1.0}
    held_out = [json.loads(line)["country"] for line in DATA.read_text().splitlines()[-4:]]
    assert [s["country"] for s in read_jsonl(evals / "samples.jsonl")] == held_out


@pytest.mark.slow
def test_the_guides_commands_run_as_written(tmp_path):
    """The "Run it without a model" block, from a directory with the repository's docs/ linked in."""
    from atroposlib.testing.api_process import free_port
    from tests.docs.shell_blocks import BlockRun, block_commands

    (tmp_path / "docs").symlink_to(REPO / "docs")
    run = BlockRun(tmp_path, {9001: free_port()})
    try:
        run.run(block_commands(GUIDE.read_text(), "## Run it without a model"))
    finally:
        run.stop()
    groups = read_jsonl(tmp_path / "runs" / "capitals.jsonl")
    assert len(groups) == 3 and all(g["scores"] == [1.0, 0.0, 1.0, 0.0] for g in groups)
    assert (tmp_path / "runs" / "capitals.html").exists()
    metrics = json.loads((tmp_path / "runs" / "capitals_eval" / "metrics.json").read_text())
    assert metrics["results"]["all"]["eval/percent_correct"] == 1.0
