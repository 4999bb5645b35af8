"""MixEval against the scripted server and a scripted judge: free-form scores 0.0-1.0 and multiple-choice
0/1 from ``[[score]]``, MixEval's prompts, an out-of-range score counted apart as a judge failure."""

from __future__ import annotations

import pytest

from atroposlib.envs.data_loading import DatasetError
from environments.eval_environments.mixeval_eval import MixEvalEnv, parse_choice_score, parse_freeform_score
from tests.helpers.cli_runs import FIXTURES
from tests.helpers.judged_runs import judged_evaluation
from tests.helpers.single_turn_runs import offline_env, prompt_text

DATA = FIXTURES / "evals" / "mixeval"
REPLIES = {
    "capital of Italy": "Rome",
    "How many apples": "<think>3 + 2</think>6",
    "Mona Lisa": "Da Vinci, I think",
    "plants absorb": "B",
    "pulls it down": "A",
}
VERDICTS = {
    "Rome": "[[1.0]]",
    "6": "The correctness score: [[0.0]]",
    "Da Vinci": "[[0.7]]",
    "B": "[[1]]",
    "A": "[[1.5]]",
}


def respond(prompt, index):
    text = prompt_text(prompt)
    return next(reply for key, reply in REPLIES.items() if key in text)


def judge(prompt, index):
    answer = prompt.split("Model's Answer: ", 1)[1].split("\n", 1)[0]
    return next(verdict for key, verdict in VERDICTS.items() if answer.startswith(key))


def test_parse_scores():
    assert parse_freeform_score("so [[0.5]]") == 0.5 and parse_freeform_score("[[1]]") == 1.0
    assert parse_choice_score("[[0]]") == 0.0 and parse_choice_score("[[1]] ... [[1]]") == 1.0
    for garbage in ("", "0.5", "[[1.5]]", "[[0.25]]", "[[0.5]] [[0.6]]"):
        assert parse_freeform_score(garbage) is None
    assert parse_choice_score("[[0.5]]") is None


def test_mixeval_scores_both_question_types(scripted):
    run, prompts = judged_evaluation(scripted, MixEvalEnv, ["--env.dataset_path", DATA], respond, judge)
    m = run.metrics
    assert m["eval/num_items"] == 5 and m["eval/unscored"] == 1
    assert m["eval/score"] == pytest.approx((1.0 + 0.0 + 0.7 + 1.0) / 4)
    assert m["eval/question_type_freeform_score"] == pytest.approx(1.7 / 3)
    assert m["eval/question_type_multichoice_score"] == 1.0
    assert m["eval/benchmark_triviaqa_score"] == pytest.approx(0.85)
    assert m["eval/judge_failures"] == 1 and m["eval/judge_failure_rate"] == pytest.approx(1 / 5)
    by_id = {s["id"]: s for s in run.samples}
    assert by_id["freeform_1"]["messages"][-1]["content"] == (
        "Question: Tom has 3 apples and buys 2 more.\nHow many apples does Tom have?\n"
        "Answer the question. \nLet's think step by step."
    )
    assert by_id["multichoice_1"]["messages"][-1]["content"].startswith(
        "A ball is dropped.\nWhat pulls it down?\nA. Magnetism\nB. Friction\nC. Gravity\nD. Wind\nAnswer with"
    )
    assert (
        by_id["multichoice_1"]["gold"] == "C. Gravity"
        and by_id["freeform_0"]["gold"] == "<answer 1> Rome; <answer 2> Roma"
    )
    assert any("Golden Answer: B. Carbon dioxide" in p for p in prompts)


async def test_dataset_path_must_be_a_directory_of_splits(tiny_model_dir, tmp_path):
    env = offline_env(MixEvalEnv, tiny_model_dir, dataset_path=str(DATA / "free_form.jsonl"))
    with pytest.raises(DatasetError, match="MixEval reads a directory"):
        await env.setup()
    (tmp_path / "free_form.jsonl").write_text((DATA / "free_form.jsonl").read_text())
    env = offline_env(MixEvalEnv, tiny_model_dir, dataset_path=str(tmp_path))
    with pytest.raises(DatasetError, match="no multiple_choice file"):
        await env.setup()
