"""The competition-math environment: row schemas, boxed answers checked by math_verify, ``process`` and
``evaluate`` with per-set accuracy."""

from __future__ import annotations

from typing import Any

import pytest
from pydantic import ValidationError

from atroposlib.envs.data_loading import DatasetError
from environments import math_server
from environments.math_server import MathEnv, MathEnvConfig, MathItem, interleave, rows_to_items
from tests.helpers.cli_runs import FIXTURES, read_jsonl
from tests.helpers.single_turn_runs import (
    check_groups,
    check_scored_group,
    offline_env,
    prompt_text,
    setup_failure,
    write_jsonl,
)

SAMPLE = FIXTURES / "math500_sample.jsonl"
ROWS = read_jsonl(SAMPLE)
#: A right answer to every fixture problem written differently from its gold answer.
OTHER_FORM = {
    "\\frac{19}{12}": "19/12",
    "6\\sqrt{2}": "\\sqrt{72}",
    "4x^2-12x+9": "(2x-3)^2",
    "5": "x = 5",
    "720": "720^\\circ",
    "\\left( 2, \\frac{\\pi}{2} \\right)": "(2, \\pi/2)",
    "(-2,2)": "(-2, 2)",
    "\\frac{1}{3}": "\\frac{2}{6}",
    "9": "9.0",
    "35": "\\binom{7}{3}",
    "3": "f^{-1}(11) = 3",
}


def _row_of(prompt: Any) -> dict[str, Any]:
    text = prompt_text(prompt)
    return next(row for row in ROWS if row["problem"] in text)


def alternating_responder(prompt: Any, index: int) -> str:
    """Even choices answer right in another form, odd ones box a wrong answer."""
    row = _row_of(prompt)
    answer = OTHER_FORM[row["answer"]] if index % 2 == 0 else "0"
    return f"<think>Working through the problem carefully, step by step.</think>So the answer is \\boxed{{{answer}}}."


def even_rows_right_responder(prompt: Any, index: int) -> str:
    """Right (in another form) on the fixture's even rows, wrong on its odd rows."""
    row = _row_of(prompt)
    answer = OTHER_FORM[row["answer"]] if ROWS.index(row) % 2 == 0 else "0"
    return f"<think>Let me see.</think>\\boxed{{{answer}}}"


def _env(tiny_model_dir, **overrides) -> MathEnv:
    return offline_env(
        MathEnv,
        tiny_model_dir,
        **{"group_size": 4, "dataset_path": str(SAMPLE), "check_timeout_s": 10.0, **overrides},
    )


@pytest.fixture(scope="module")
def env(tiny_model_dir):
    env = _env(tiny_model_dir)
    yield env
    env.checker.close()


# -- data ------------------------------------------------------------------------------------------------
def test_rows_of_every_schema_become_items():
    math500 = rows_to_items(ROWS, "f", "math500")
    assert math500[0] == MathItem(ROWS[0]["problem"], "\\frac{19}{12}", "math500")
    deepmath = rows_to_items([{"question": "1+1?", "final_answer": "\\boxed{2}"}], "d", "train")
    assert deepmath == [MathItem("1+1?", "2", "train")]
    amc = rows_to_items([{"id": 0, "question": "How many?", "answer": 27.0}], "a", "amc23")
    assert amc == [MathItem("How many?", "27", "amc23")]  # numeric answers as integers


def test_a_row_missing_a_field_is_one_line_naming_file_row_and_field(tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", [ROWS[0], {"problem": "What is 2+2?", "solution": "4"}])
    with pytest.raises(DatasetError, match=r"bad\.jsonl: row 1: missing field 'answer'"):
        rows_to_items(read_jsonl(path), path, "x")
    with pytest.raises(DatasetError, match="missing field 'problem'"):
        rows_to_items([{"text": "no schema"}], "odd.jsonl", "x")
    with pytest.raises(DatasetError, match="no rows"):
        rows_to_items([], "empty.jsonl", "x")


async def test_setup_reads_local_files(tiny_model_dir, tmp_path):
    env = _env(tiny_model_dir)
    await env.setup()
    assert sorted(i.problem for i in env.train) == sorted(r["problem"] for r in ROWS)
    assert [i.problem for i in env.train] != [r["problem"] for r in ROWS]  # shuffled
    assert [i.subset for i in env.test] == ["math500_sample"] * len(ROWS)  # reported under its file name
    first = await env.get_next_item()
    assert first == env.train[0] and env.iter == 1
    empty = _env(tiny_model_dir, dataset_path=write_jsonl(tmp_path / "empty.jsonl", []))
    await setup_failure(empty, "empty.jsonl: no rows")


async def test_default_data_is_the_hub(tiny_model_dir, hub_offline):
    env = _env(tiny_model_dir, dataset_path=None)
    await setup_failure(env, "zwhe99/DeepMath-103K: cannot load from the hub")


def test_unknown_eval_set_is_rejected():
    with pytest.raises(ValidationError, match="unknown evaluation set"):
        MathEnvConfig(eval_sets=["math500", "gsm8k"])


def test_interleave_takes_the_sets_in_turn():
    a = [MathItem(str(i), "1", "a") for i in range(3)]
    b = [MathItem(str(i), "1", "b") for i in range(1)]
    taken = [(i.subset, i.problem) for i in interleave([a, b])]
    assert taken == [("a", "0"), ("b", "0"), ("a", "1"), ("a", "2")]


# -- scoring ---------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "reply, score",
    [
        ("<think>9/12 + 10/12</think>The sum is \\boxed{\\frac{19}{12}}.", 1.0),
        ("\\boxed{19/12}", 1.0),
        ("<think>x</think>\\boxed{\\dfrac{19}{12}} which is \\boxed{19/12}", 1.0),  # one answer, two forms
        ("<think>x</think>\\boxed{1.58}", -1.0),  # rounded: wrong
        ("<think>x</think>\\boxed{\\frac{8}{10}}", -1.0),
        ("<think>it is \\boxed{\\frac{19}{12}}</think>I am not sure.", -1.0),  # think block only
        ("<think>x</think>The answer is 19/12.", -1.0),  # unboxed
        ("<think>x</think>\\boxed{\\frac{19}{12}} or \\boxed{\\frac{5}{6}}", -1.0),  # two different answers
        ("<think>x</think>\\boxed{\\frac{19}{12}, \\frac{5}{6}}", -1.0),  # a hedge in one box
        ("", -1.0),
        ("<think>x</think>", -1.0),
        ("<think>a</think><think>b</think>\\boxed{\\frac{19}{12}}", -1.0),  # two think blocks
    ],
)
async def test_scores(env, reply, score):
    item = MathItem(ROWS[0]["problem"], ROWS[0]["answer"])
    assert await env.score_replies_async([reply], item) == [score]


async def test_equivalent_forms_score_right(env):
    for gold, other in OTHER_FORM.items():
        assert await env.score_replies_async([f"\\boxed{{{other}}}"], MathItem("p", gold)) == [1.0], other


async def test_unclosed_think_block_scores_wrong(env):
    # The original read the text after the last "</think>", i.e. the whole reply when the block never
    # closed, so a boxed guess inside unfinished reasoning scored +1.
    item = MathItem("p", "5")
    assert await env.score_replies_async(["<think>so x = \\boxed{5}"], item) == [-1.0]


async def test_a_check_that_runs_over_scores_wrong(tiny_model_dir):
    env = _env(tiny_model_dir, check_timeout_s=0.5)
    try:
        scores = await env.score_replies_async(["\\boxed{9^{9^{9^{9}}}}", "\\boxed{2}"], MathItem("p", "2"))
        assert scores == [-1.0, 1.0] and env.checker.timeouts == 1
    finally:
        env.checker.close()


# -- process and evaluate --------------------------------------------------------------------------------
def test_process_writes_groups_with_right_and_wrong_replies(scripted):
    args = ["--env.dataset_path", SAMPLE, "--env.group_size", "4", "--env.total_steps", "3",
            "--env.max_tokens", "128"]  # fmt: skip
    groups = scripted.process(MathEnv, args, alternating_responder)
    check_groups(groups, 3, [-1.0, -1.0, 1.0, 1.0])
    for group in groups:
        replies = [m[-1]["content"] for m in group["messages"]]
        for reply, score in zip(replies, group["scores"], strict=True):
            assert ("\\boxed{0}" in reply) == (score == -1.0)


def _fake_hub(name: str, split: str, config=None, **kwargs):
    """The hub sets as slices of the fixture, each in its own hub schema."""
    slices = {
        "zwhe99/DeepMath-103K": [{"question": r["problem"], "final_answer": r["answer"]} for r in ROWS],
        "HuggingFaceH4/MATH-500": ROWS[:6],
        "HuggingFaceH4/aime_2024": [{"id": i, "problem": r["problem"], "answer": r["answer"]} for i, r in
                                    enumerate(ROWS[6:9])],
        "math-ai/amc23": [{"id": i, "question": r["problem"], "answer": r["answer"]} for i, r in
                          enumerate(ROWS[9:])],
    }  # fmt: skip
    return lambda: slices[name]


def test_evaluate_reports_each_set(scripted, monkeypatch):
    monkeypatch.setattr(math_server, "hub_split", _fake_hub)
    metrics, samples, out = scripted.evaluate(MathEnv, ["--env.max_tokens", "64"], even_rows_right_responder)
    # even fixture rows are answered right: math500 = rows 0-5 (3 of 6), aime24 = rows 6-8 (2 of 3),
    # amc23 = rows 9-11 (1 of 3)
    assert metrics["eval/math500_percent_correct"] == pytest.approx(3 / 6)
    assert metrics["eval/aime24_percent_correct"] == pytest.approx(2 / 3)
    assert metrics["eval/amc23_percent_correct"] == pytest.approx(1 / 3)
    assert metrics["eval/overall_percent_correct"] == metrics["eval/percent_correct"] == pytest.approx(6 / 12)
    assert len(samples) == 12 and {s["subset"] for s in samples} == {"math500", "aime24", "amc23"}
    for sample in samples:
        row = next(r for r in ROWS if r["problem"] == sample["problem"])
        assert sample["correct"] == (ROWS.index(row) % 2 == 0)
        assert sample["score"] == (1.0 if sample["correct"] else -1.0)
    assert "math evaluation: percent_correct=0.5000" in out


def test_evaluate_limit_keeps_every_set(scripted, monkeypatch):
    monkeypatch.setattr(math_server, "hub_split", _fake_hub)
    metrics, samples, _ = scripted.evaluate(
        MathEnv,
        ["--env.max_tokens", "64", "--env.eval_limit", "3", "--env.eval_sets", '["math500", "amc23"]'],
        even_rows_right_responder,
    )
    assert [s["subset"] for s in samples] == ["math500", "amc23", "math500"]
    assert "eval/aime24_percent_correct" not in metrics


def test_serve_sends_groups_and_stops_cleanly(scripted, api):
    args = ["--env.dataset_path", SAMPLE, "--env.group_size", "4", "--env.max_tokens", "128",
            "--env.total_steps", "100"]  # fmt: skip
    served = scripted.serve(MathEnv, args, alternating_responder, api)
    assert served.registration["desired_name"] == "math" and served.registration["group_size"] == 4
    check_scored_group(served.group, [-1.0, -1.0, 1.0, 1.0])
    assert "Traceback" not in served.log  # the checker's worker processes stop with the environment


# -- 0.4.0's judge and self-correction groups ------------------------------------------------------------
def judging_responder(prompt: Any, index: int) -> str:
    """Problems: even choices right, odd ones wrong. Judge prompts: even choices give the right verdict,
    odd ones the wrong one. Self-correction prompts: even choices right, odd ones wrong."""
    text = prompt_text(prompt)
    row = _row_of(prompt)
    right = index % 2 == 0
    if "Is its final answer correct?" in text:
        solution = text.split("[SOLUTION]")[1].split("[END SOLUTION]")[0]
        truth = "\\boxed{0}" not in solution
        return f"<think>Checking.</think>\\boxed{{{truth if right else not truth}}}"
    answer = OTHER_FORM[row["answer"]] if right else "0"
    return f"<think>Working it out.</think>\\boxed{{{answer}}}"


def test_verdicts_and_length_scores():
    from atroposlib.envs.self_judging import length_scores, verdict

    assert verdict("<think>x</think>\\boxed{True}") is True and verdict("\\boxed{\\text{false}}") is False
    assert verdict("\\boxed{True} \\boxed{False}") is None and verdict("<think>\\boxed{True}</think>") is None
    assert length_scores([100, 150, 200]) == pytest.approx([1.0, 0.0, -1.0])
    assert length_scores([100, 105]) is None  # within 10 %: no length signal


def test_process_trains_judge_and_self_correction_groups(scripted, tmp_path):
    config = tmp_path / "math.yaml"
    config.write_text(
        f"env:\n  dataset_path: {SAMPLE}\n  group_size: 4\n  total_steps: 4\n  max_tokens: 128\n"
        "  percent_to_judge: 1.0\n  mask_too_long_completions: true\n  check_timeout_s: 10\n"
    )
    scripted.command(MathEnv, "process", ["--config", config], judging_responder)
    groups = read_jsonl(tmp_path / "data" / "math.jsonl")
    assert len(groups) == 4
    kinds = {}
    for group in groups:
        user = group["messages"][0][1]["content"]
        kind = (
            "judge"
            if "Is its final answer correct?" in user
            else "retry"
            if "Solve the problem again" in user
            else "problem"
        )
        kinds.setdefault(kind, []).append(sorted(group["scores"]))
    assert kinds["problem"][0] == [-1.0, -1.0, 1.0, 1.0]
    # judging a right answer: right verdicts +1, wrong ones -1; judging a wrong answer: a right verdict
    # scores the share of its self-corrections that reach the gold answer (half of them here)
    assert sorted(kinds["judge"]) == [[-1.0, -1.0, 0.5, 0.5], [-1.0, -1.0, 1.0, 1.0]]
    assert kinds["retry"][0] == [-1.0, -1.0, 1.0, 1.0]  # the self-correction group, trained too


def test_judging_is_off_by_default_and_drawn_with_percent_to_judge(tiny_model_dir):
    env = _env(tiny_model_dir)
    try:
        assert env.config.percent_to_judge == 0.0
        assert env.judge_tasks(ROWS[0], ["\\boxed{1}", "\\boxed{0}"], [1.0, -1.0], [object(), object()]) == []
        env.config.percent_to_judge = 1.0
        tasks = env.judge_tasks(
            ROWS[0], ["<think>a</think>\\boxed{1}", "\\boxed{0}"], [1.0, -1.0], [None, None]
        )
        assert [(t.solution, t.correct) for t in tasks] == [("\\boxed{1}", True), ("\\boxed{0}", False)]
        assert env.judge_tasks(ROWS[0], ["\\boxed{1}"] * 2, [1.0, 1.0], [None, None]) == []
    finally:
        env.checker.close()
