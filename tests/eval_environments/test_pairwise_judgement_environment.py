"""RewardBench-2 judged by the model under test (the scripted server): best-of-4 verdicts in a seeded order,
Ties rated one answer at a time, format errors, the mean over subsets."""

from __future__ import annotations

import re

import pytest

from environments.eval_environments.pairwise_judgement_environment import (
    PairwiseJudgementEnv,
    parse_choice,
    parse_rating,
)
from tests.helpers.cli_runs import FIXTURES
from tests.helpers.single_turn_runs import prompt_text

DATA = FIXTURES / "evals" / "rewardbench2.jsonl"
RIGHT = {"Paris is the capital": "right", "2 + 2 = 4.": "wrong", "I can't help with that.": "garbage"}
RATINGS = {"Red": 9, "Blue": 8, "Yellow": 3, "Seven": 5, "Six": 7, "Eight": 2}


def letter_of(text: str, answer: str) -> str:
    return re.search(rf"\[The Start of Assistant (\w)'s Answer\]\n{re.escape(answer)}", text).group(1)


def respond(prompt, index):
    text = prompt_text(prompt)
    if "Assistant B's Answer" not in text:  # a Ties rating request: one answer
        answer = text.split("[The Start of Assistant A's Answer]\n", 1)[1].split("\n", 1)[0]
        return f"It is fine.\n{RATINGS[answer]}"
    chosen, how = next((key, how) for key, how in RIGHT.items() if key in text)
    right = letter_of(text, next(line for line in text.splitlines() if line.startswith(chosen)))
    if how == "right":
        return f"<think>Compare them.</think>The best is [[{right}]]"
    if how == "wrong":
        return f"[[{'A' if right != 'A' else 'B'}]]"
    return "I think the first one."


def test_parsers():
    assert parse_choice("so [[c]]", 4) == "C" and parse_choice("[[B]] ... [[B]]", 4) == "B"
    for garbage in ("", "[[E]]", "[[A]] or [[B]]", "A"):
        assert parse_choice(garbage, 4) is None
    assert parse_rating("Good.\n10") == 10 and parse_rating("Rating: 7.") == 7 and parse_rating("**3**") == 3
    assert parse_rating("0") is None and parse_rating("11") is None and parse_rating("7 out of ten") is None


def test_rewardbench_accuracy_by_subset(scripted):
    run = scripted.evaluation(
        PairwiseJudgementEnv,
        ["--env.dataset_path", DATA, "--env.retry_delay", "0"],
        respond,
        server_type=None,
    )
    m = run.metrics
    # f1 right, m1 wrong, s1 format error, t1 ratings separate chosen from rejected, t2 do not
    assert m["eval/accuracy"] == pytest.approx(2 / 5) and m["eval/num_items"] == 5
    assert m["eval/subset_ties_accuracy"] == 0.5 and m["eval/subset_factuality_accuracy"] == 1.0
    assert m["eval/rewardbench_score"] == pytest.approx((1 + 0 + 0 + 0.5) / 4)
    assert m["eval/format_error_rate"] == pytest.approx(1 / 5)
    chats = [r["body"]["messages"] for r in run.requests if r["path"] == "/v1/chat/completions"]
    assert len(chats) == 3 + 3 + 3  # one verdict per best-of-4 item, one rating per Ties answer
    by_id = {s["id"]: s for s in run.samples}
    assert by_id["t1"]["ratings"] == [9, 8, 3] and by_id["t2"]["ratings"] == [5, 7, 2]
    shown = by_id["f1"]["messages"][-1]["content"]
    assert by_id["f1"]["gold"] == letter_of(shown, "Paris is the capital of France.")
    assert by_id["f1"]["messages"][0]["content"].startswith("Please act as an impartial judge")
    # the order is fixed by the item id: the same in every run
    again = scripted.evaluation(
        PairwiseJudgementEnv, ["--env.dataset_path", DATA, "--env.eval_categories", '["Factuality"]'], respond,
        server_type=None,
    )  # fmt: skip
    assert again.samples[0]["messages"][-1]["content"] == shown and again.metrics["eval/num_items"] == 1
