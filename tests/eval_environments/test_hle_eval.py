"""HLE against the scripted server and a scripted judge: HLE's judge format, its accuracy interval and
calibration error, image questions left out, a garbage judgement counted apart."""

from __future__ import annotations

import math

import pytest

from environments.eval_environments.hle_eval import (
    HLEEvalEnv,
    calibration_error,
    parse_judgement,
    reply_answer,
    string_match,
)
from tests.helpers.cli_runs import FIXTURES
from tests.helpers.judged_runs import judged_evaluation
from tests.helpers.single_turn_runs import prompt_text

DATA = FIXTURES / "evals" / "hle.jsonl"
REPLIES = {
    "2+2": "<think>Two and two.</think>Explanation: addition.\nExact Answer: 4\nConfidence: 90%",
    "capital of Australia": "Explanation: biggest city.\nExact Answer: Sydney\nConfidence: 80%",
    "vowel": "Explanation: E is a vowel.\nAnswer: B\nConfidence: 60%",
    "Mersenne": "Exact Answer: 127\nConfidence: 99%",
    "bones": "<think>Counting bones",  # unclosed: wrong at confidence 100, no judge
}
JUDGEMENTS = {
    "Exact Answer: 4": "extracted_final_answer: 4\nreasoning: same number\ncorrect: yes\nconfidence: 90%",
    "Sydney": "extracted_final_answer: Sydney\nreasoning: not Canberra\ncorrect: no\nconfidence: 80",
    "Answer: B": "**extracted_final_answer:** B\n**reasoning:** matches\n**correct:** yes\n**confidence:** 60%",
    "127": "I would rather not grade this.",  # a judge failure
}


def respond(prompt, index):
    text = prompt_text(prompt)
    return next(reply for key, reply in REPLIES.items() if key in text)


def judge(prompt, index):
    response = prompt.split("[response]: ", 1)[1].split("\n\n[correct_answer]", 1)[0]
    return next(reply for key, reply in JUDGEMENTS.items() if key in response)


def test_parse_judgement():
    verdict = parse_judgement("extracted_final_answer: None\nreasoning: none given\ncorrect: no")
    assert (verdict.correct, verdict.confidence, verdict.extracted) == (False, 100.0, None)
    assert parse_judgement("correct: YES\nconfidence: 150%").confidence == 100.0
    for garbage in ("", "it is correct", "correct: maybe", "correct: yes\ncorrect: no"):
        assert parse_judgement(garbage) is None


def test_calibration_error_bins():
    assert calibration_error([100, 100], [1, 1]) == 0.0
    assert calibration_error([100, 0], [0, 1]) == 0.0  # one bin: 50% stated, 50% right
    assert calibration_error([100, 100], [0, 1]) == pytest.approx(50.0)
    assert calibration_error([100, 0], [0, 1], bin_size=1) == pytest.approx(100.0)


def test_hle_grades_with_the_official_judge_format(scripted):
    run, prompts = judged_evaluation(
        scripted, HLEEvalEnv, ["--env.dataset_path", DATA, "--env.calibration_bin_size", "2"], respond, judge
    )
    m = run.metrics
    # h1 right (90%), h2 wrong (80%), h3 right (60%), h5 wrong (100%, no answer); h4 unscored; h6 has an image
    assert m["eval/num_items"] == 5 and m["eval/unscored"] == 1
    assert m["eval/accuracy"] == pytest.approx(0.5)
    assert m["eval/accuracy_ci95"] == pytest.approx(1.96 * math.sqrt(0.25 / 4))
    # bins by confidence: (60 right, 80 wrong) and (90 right, 100 wrong)
    assert m["eval/calibration_error"] == pytest.approx(100 * math.sqrt(0.5 * 0.2**2 + 0.5 * 0.45**2))
    assert m["eval/judge_failures"] == 1 and m["eval/judge_failure_rate"] == pytest.approx(1 / 4)
    assert m["eval/category_math_accuracy"] == 1.0
    assert len(prompts) == 4 and all("[correct_answer]: " in p for p in prompts)
    by_id = {s["id"]: s for s in run.samples}
    assert by_id["h3"]["extracted"] == "B" and by_id["h3"]["confidence"] == 60.0
    assert "Answer: {your chosen answer}" in by_id["h3"]["messages"][-1]["content"]
    assert "Exact Answer: {your succinct, final answer}" in by_id["h1"]["messages"][-1]["content"]
    assert by_id["h5"]["method"] == "no_answer" and "h6" not in by_id


def test_string_match_mode_needs_no_judge(scripted):
    run = scripted.evaluation(
        HLEEvalEnv, ["--env.dataset_path", DATA, "--env.use_llm_judge", "false"], respond, server_type=None
    )
    m = run.metrics
    # 4, B and 127 match; Sydney does not; the unclosed reply has no answer
    assert m["eval/accuracy"] == pytest.approx(3 / 5) and "eval/unscored" not in m
    by_id = {s["id"]: s for s in run.samples}
    assert by_id["h4"]["extracted"] == "127" and by_id["h4"]["confidence"] == 99.0
    assert by_id["h2"]["extracted"] == "Sydney" and by_id["h2"]["score"] == 0.0


def test_string_match_rules():
    assert string_match("42.0", "42") and string_match("The answer: Canberra.", "canberra")
    assert not string_match("42.0", "42", fuzzy=False) and not string_match(
        "canberra", "Canberra", case_sensitive=True
    )
    assert reply_answer("Explanation: x\nExact Answer: 7\nConfidence: 50%") == "7"
    assert reply_answer("<answer>seven</answer>") == "seven" and reply_answer("so\nit is 7") == "it is 7"
