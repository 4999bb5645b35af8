"""The regex-generation environment: example-based scoring, interruptible matching, the shipped problems,
local data, ``process`` and ``evaluate``."""

from __future__ import annotations

import time

import pytest

from environments.community.regex_generation.regex_env import (
    PROBLEMS,
    RegexEnv,
    RegexProblem,
    check_pattern,
    reply_pattern,
)
from tests.environments.community.community_runs import always, bad_rows_error, evaluate_local, process_local
from tests.helpers.cli_runs import FIXTURES, read_jsonl
from tests.helpers.single_turn_runs import check_groups, offline_env, prompt_text, setup_failure

SAMPLE = FIXTURES / "community" / "regex_sample.jsonl"
DIGITS = RegexProblem("Exactly three digits.", ("123", "000", "907"), ("12", "1234", "12a", ""))


def _score(reply: str) -> float:
    return check_pattern(reply_pattern(reply), DIGITS).score


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("<answer>\\d{3}</answer>", 1.0),
        ("<think>three digits</think><answer> [0-9][0-9][0-9] </answer>", 1.0),  # another form, spaces around
        ("<answer>^\\d\\d\\d$</answer>", 1.0),  # anchors are harmless under full matching
        ("<answer>(?:\\d){3}</answer> so: <answer>(?:\\d){3}</answer>", 1.0),  # the same answer twice
        ("<answer>\\d+</answer>", 5 / 7),  # wrongly accepts 12 and 1234
        ("<answer>[a-z]+</answer>", 4 / 7),  # rejects every negative, matches no positive
        ("<answer>\\d{3}</answer> or <answer>\\d+</answer>", 0.0),  # hedged
        ("<answer>[0-9</answer>", 0.0),  # does not compile
        ("<answer>\\p{N}{3}</answer>", 0.0),  # not Python re syntax
        ("\\d{3}", 0.0),  # no answer tags
        ("<think><answer>\\d{3}</answer></think>", 0.0),  # only inside the reasoning
        ("<answer></answer>", 0.0),
        ("", 0.0),
    ],
)
def test_scoring(reply, expected):
    assert _score(reply) == pytest.approx(expected)


def test_validity_and_counts():
    result = check_pattern("\\d+", DIGITS)
    assert result.valid and (result.pos_pass, result.neg_pass) == (3, 2)
    assert not check_pattern("(", DIGITS).valid and not check_pattern(None, DIGITS).valid


def test_catastrophic_backtracking_is_cut_short():
    slow = RegexProblem("x", ("x" * 5 + "y",), ("x" * 3000 + "!",))
    start = time.monotonic()
    result = check_pattern("(x+x+)+y", slow, time_limit=0.1)
    assert result == result.__class__(0.0, True) and time.monotonic() - start < 5


def test_the_shipped_problems_are_solvable():
    rows = read_jsonl(PROBLEMS)
    assert len(rows) == 27 and {r["difficulty"] for r in rows} == {"easy", "medium", "hard"}
    for row in rows:
        problem = RegexProblem(row["description"], tuple(row["positive"]), tuple(row["negative"]))
        assert check_pattern(row["solution"], problem).score == 1.0, row["description"]


async def test_split_and_difficulties(tiny_model_dir):
    env = offline_env(RegexEnv, tiny_model_dir)
    await env.setup()
    assert (len(env.train), len(env.test)) == (21, 6)
    again = offline_env(RegexEnv, tiny_model_dir)
    await again.setup()
    assert env.test == again.test  # seeded
    hard = offline_env(RegexEnv, tiny_model_dir, difficulties=["hard"])
    await hard.setup()
    assert {p.difficulty for p in hard.train + hard.test} == {"hard"} and len(hard.train + hard.test) == 9
    none = offline_env(RegexEnv, tiny_model_dir, difficulties=["expert"])
    await setup_failure(none, "no problems of difficulties")
    prompt = env.prompt_messages(DIGITS)[1]["content"]
    assert "  - '123'" in prompt and "  - ''" in prompt


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"positive": ["a"], "negative": []}, "row 1: missing field 'description'"),
        (
            {"description": "d", "positive": "a", "negative": []},
            "row 1: field 'positive' must be a list of strings",
        ),
        ({"description": "d", "positive": ["a"], "negative": [1]}, "row 1: field 'negative' must be a list"),
        (
            {"description": "d", "positive": [], "negative": []},
            "row 1: fields 'positive' and 'negative' are both empty",
        ),
    ],
)
async def test_bad_local_rows(tiny_model_dir, tmp_path, row, message):
    await bad_rows_error(RegexEnv, tiny_model_dir, tmp_path, [read_jsonl(SAMPLE)[0], row], message)


ANSWERS = {
    "Exactly three digits.": "\\d{3}",
    "A lower-case word followed by one digit.": "[a-z]+\\d",
    "A string of x characters of even length (possibly empty).": "(xx)*",
    "The word 'yes' or 'no' in lower case.": "yes|no",
}


def _responder():
    """The right pattern for even choices, one matching everything for odd ones."""

    def respond(prompt, index):
        description = prompt_text(prompt).split("Description: ", 1)[-1].split("\n", 1)[0]
        pattern = ANSWERS[description] if index % 2 == 0 else ".*"
        return f"<think>Looking at the examples.</think><answer>{pattern}</answer>"

    return respond


def test_process_with_a_local_file(scripted):
    groups = process_local(
        scripted, RegexEnv, SAMPLE, _responder(), group_size=2, total_steps=2, max_tokens=128
    )
    assert len(groups) == 2
    for group in groups:
        check_groups([group], 1, sorted(group["scores"]))
        assert max(group["scores"]) == 1.0 and min(group["scores"]) < 1.0


def test_evaluate_reports_the_original_metrics(scripted):
    evaluation = evaluate_local(scripted, RegexEnv, SAMPLE, always("<answer>\\d{3}</answer>"), max_tokens=128)
    metrics = evaluation.metrics
    # \d{3} is right on the first problem, rejects every negative and no positive elsewhere (x* problem: 4/7)
    assert metrics["eval/percent_perfect"] == metrics["eval/percent_correct"] == 0.25
    assert (
        metrics["eval/avg_score"]
        == metrics["eval/mean_score"]
        == pytest.approx((1 + 4 / 7 + 4 / 7 + 4 / 6) / 4)
    )
    assert metrics["eval/percent_valid_regex"] == 1.0
    assert {s["pattern"] for s in evaluation.samples} == {"\\d{3}"}
    assert "regex_generation evaluation: percent_correct=0.2500" in evaluation.out
