"""DROP (normalised EM and F1) and ARC-AGI-2 (exact grid match) on fixtures in their hub schemas, against the
scripted server: every kind of reply and exact metrics."""

from __future__ import annotations

import pytest

from atroposlib.envs.data_loading import DatasetError
from environments.eval_environments.arc_agi_eval import ARCAGIEvalEnv, read_grid
from environments.eval_environments.drop_eval import DROPEvalEnv
from tests.eval_environments.test_math_evals import ARGS, DATA, LONG, responder, stderr
from tests.helpers.single_turn_runs import offline_env, write_jsonl

DROP_REPLIES = {
    "How many field goals": "<think>Two kicks: 32 and 45.</think><answer>2.0</answer>",  # 2.0 = 2
    "first touchdown": "The answer is Forte.",  # a validated answer
    "Which team kicked": "<answer>Green Bay</answer>",  # F1 0.8 against "the Green Bay Packers"
    "How long was the touchdown": "<answer>7</answer>",  # wrong number: F1 0
    "Which players": "<answer>Matt Forte, Greg Olsen</answer>",  # one span for two: F1 0.33
    "When was the game": "",
    "How many touchdowns": "<think>Forte ran one, Olsen caught",
    "Who threw": LONG,
    "longest field goal": "<answer>45</answer> Hmm. <answer>32</answer>",  # a hedge
}
EM = [1, 1, 0, 0, 0, 0, 0, 0, 0]
F1 = [1, 1, 0.8, 0, 0.33, 0, 0, 0, 0]


def test_drop_exact_match_and_f1(scripted):
    run = scripted.evaluation(
        DROPEvalEnv,
        ["--env.dataset_path", DATA / "drop.jsonl", *ARGS],
        responder(DROP_REPLIES),
        server_type=None,
    )
    m = run.metrics
    assert m["eval/em"] == pytest.approx(2 / 9) and m["eval/em_stderr"] == pytest.approx(stderr(EM))
    assert m["eval/f1"] == pytest.approx(sum(F1) / 9) and m["eval/f1_stderr"] == pytest.approx(stderr(F1))
    assert m["eval/answer_type_number_em"] == pytest.approx(1 / 4) and m["eval/answer_type_number_count"] == 4
    assert m["eval/answer_type_span_em"] == pytest.approx(1 / 3) and m["eval/answer_type_date_em"] == 0.0
    assert m["eval/no_answer_rate"] == pytest.approx(4 / 9)
    samples = {s["id"]: s for s in run.samples}
    assert samples["q1"]["extracted"] == "2.0" and samples["q1"]["method"] == "answer_tag"
    assert samples["q2"]["extracted"] == "Forte" and samples["q2"]["method"] == "answer_phrase"
    assert samples["q2"]["gold"] == [["Matt Forte"], ["Forte"]]
    assert samples["q3"]["metrics"] == {"f1": 0.8}
    assert samples["q9"]["method"] == "ambiguous" and samples["q6"]["method"] == "empty"
    assert samples["q7"]["method"] == "unclosed_think" and samples["q8"]["finish_reason"] == "length"
    prompt = samples["q1"]["messages"][-1]["content"]
    assert prompt.startswith("Read the passage and answer the question.") and prompt.endswith(
        "Question: How many field goals did Mason Crosby kick?"
    )


async def test_drop_row_without_any_answer_is_a_one_line_error(tiny_model_dir, tmp_path):
    bad = write_jsonl(
        tmp_path / "bad.jsonl",
        [{"passage": "p", "question": "q", "answer": {"number": "", "spans": [], "date": {}}}],
    )
    env = offline_env(DROPEvalEnv, tiny_model_dir, dataset_path=bad)
    with pytest.raises(DatasetError, match=r"bad\.jsonl: row 0: field 'answer' holds no number"):
        await env.setup()


ARC_REPLIES = {
    "--Test Input--\n[5, 0]": "<think>Mirror each row.</think><answer>\n[[0, 5],\n [6, 0]]\n</answer>",
    "--Test Input--\n[0, 0, 0]": "<answer>((7, 7, 7),)</answer>",  # a Python literal: the same grid
    "--Test Input--\n[0]\n[0]": "<answer>[[7, 7]]</answer>",  # wrong shape
    "--Test Input--\n[9]": "",
    "--Test Input--\n[3, 4, 5]": "<think>All zeros, so [[0, 0, 0]]",
    "--Test Input--\n[3]\n[8]": "<answer>[[8], [3]]</answer> or <answer>[[3], [8]]</answer>",
    "--Test Input--\n[2]": LONG,
}


def test_arc_agi_exact_grid_match(scripted):
    run = scripted.evaluation(
        ARCAGIEvalEnv,
        ["--env.dataset_path", DATA / "arc_agi.jsonl", *ARGS],
        responder(ARC_REPLIES),
        server_type=None,
    )
    m = run.metrics
    assert m["eval/num_items"] == 7  # six tasks, one with two test inputs
    assert m["eval/accuracy"] == pytest.approx(2 / 7)
    assert m["eval/accuracy_stderr"] == pytest.approx(stderr([1, 1, 0, 0, 0, 0, 0]))
    assert m["eval/no_answer_rate"] == pytest.approx(4 / 7)
    samples = {s["id"]: s for s in run.samples}
    assert set(samples) == {"flip0001#0", "fill0002#0", "fill0002#1", "copy0003#0", "zero0004#0", "swap0005#0",
                            "grow0006#0"}  # fmt: skip
    assert samples["fill0002#0"]["extracted"] == "[[7, 7, 7]]" and samples["fill0002#0"]["score"] == 1.0
    assert samples["fill0002#1"]["extracted"] == "[[7, 7]]" and samples["fill0002#1"]["gold"] == [[7], [7]]
    assert (
        samples["swap0005#0"]["method"] == "ambiguous" and samples["zero0004#0"]["method"] == "unclosed_think"
    )
    assert samples["grow0006#0"]["finish_reason"] == "length"
    prompt = samples["flip0001#0"]["messages"][-1]["content"]
    assert "--Example 2--\n\nINPUT:\n[2, 3]\n[0, 0]\n\nOUTPUT:\n[3, 2]\n[0, 0]" in prompt
    assert samples["flip0001#0"]["task"] == "flip0001"


def test_read_grid_prefers_the_answer_tag():
    assert read_grid("[[1]] then <answer>[[2]]</answer>") == ([[2]], "answer_tag")
    assert read_grid("<think>[[1]]</think>Final grid:\n[0, 1]\n[1, 0]") == ([[0, 1], [1, 0]], "grid_search")
    assert read_grid("<answer>not a grid</answer>") == (None, "no_answer")
    assert read_grid("<answer>[[1]]</answer><answer>[[1]]</answer>") == ([[1]], "answer_tag")


async def test_arc_agi_bad_rows_are_one_line_errors(tiny_model_dir, tmp_path):
    bad = write_jsonl(
        tmp_path / "bad.jsonl", [{"fewshots": [{"input": [[1]], "output": [[1, 2], [3]]}], "question": []}]
    )
    env = offline_env(ARCAGIEvalEnv, tiny_model_dir, dataset_path=bad)
    with pytest.raises(
        DatasetError, match=r"bad\.jsonl: row 0: field 'fewshots' must hold \{input, output\}"
    ):
        await env.setup()
