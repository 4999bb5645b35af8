"""Math answer checking: gold and reply extraction, math_verify equality, worker pool with a time limit."""

from __future__ import annotations

import asyncio
import os
import time

import pytest

from atroposlib.utils.math_checking import MathChecker, answers_match, gold_latex, reply_answers
from tests.helpers.event_loop import count_ticks

EQUIVALENT = [
    ("\\frac{1}{2}", "0.5"),
    ("2\\sqrt{2}", "\\sqrt{8}"),
    ("x^2+2x+1", "(x+1)^2"),
    ("3", "x = 3"),
    ("\\frac{14}{3}", "14/3"),
    ("\\left( 2, \\frac{\\pi}{2} \\right)", "(2, \\pi/2)"),
    ("(-2,2)", "(-2, 2)"),
    ("720", "720^\\circ"),
    ("5", "5.0"),
]
DIFFERENT = [
    ("\\frac{1}{2}", "0.51"),
    ("3", "x = 4"),
    ("3", "3, 4"),  # a hedge inside one box
    ("(-2,2)", "[-2,2]"),
    ("x^2+2x+1", "x^2+2x"),
    ("\\pi", "3.14159"),
]


def sleepy_match(gold: str, answer: str) -> bool:
    """A comparison that never finishes for the answer "slow"."""
    if answer == "slow":
        time.sleep(120)
    return gold == answer


def raising_match(gold: str, answer: str) -> bool:
    raise RuntimeError("parser exploded")


def dying_match(gold: str, answer: str) -> bool:
    os._exit(3)


@pytest.fixture(scope="module")
def checker():
    checker = MathChecker(timeout_s=10.0, workers=2)
    yield checker
    checker.close()


def test_gold_latex_reads_boxed_numeric_and_plain_answers():
    assert gold_latex("The answer is \\boxed{\\frac{1}{2}}.") == "\\frac{1}{2}"
    assert gold_latex(27.0) == "27" and gold_latex(2.5) == "2.5" and gold_latex(7) == "7"
    assert gold_latex("  6\\sqrt{2} ") == "6\\sqrt{2}"


@pytest.mark.parametrize(
    "reply, answers",
    [
        ("<think>1/2</think>So \\boxed{\\frac{1}{2}}.", ["\\frac{1}{2}"]),
        ("\\boxed{5} and again \\boxed{ 5 }", ["5"]),  # the same answer repeated
        ("\\boxed{0.5}, that is \\boxed{\\frac{1}{2}}", ["0.5", "\\frac{1}{2}"]),  # equal in value?
        ("<think>it is \\boxed{5}</think>The answer is 5.", None),  # boxed only inside the think block
        ("The answer is 5.", None),  # unboxed
        ("<think>still thinking \\boxed{5}", None),  # unclosed think block
        ("<think>a</think><think>b</think>\\boxed{5}", None),  # two think blocks
        ("", None),
        ("\\boxed{}", None),
    ],
)
def test_reply_answers(reply, answers):
    assert reply_answers(reply) == answers


@pytest.mark.parametrize("gold, answer", EQUIVALENT)
def test_equivalent_forms_match(gold, answer):
    assert answers_match(gold, answer)


@pytest.mark.parametrize("gold, answer", DIFFERENT)
def test_different_answers_do_not_match(gold, answer):
    assert not answers_match(gold, answer)


def test_unparsable_gold_matches_nothing():
    assert not answers_match("", "5")


async def test_checker_runs_checks_in_workers(checker):
    golds, answers = zip(*EQUIVALENT, *DIFFERENT, strict=True)
    results = await asyncio.gather(*(checker.matches(g, a) for g, a in zip(golds, answers, strict=True)))
    assert results == [True] * len(EQUIVALENT) + [False] * len(DIFFERENT)
    assert await checker.matches("5", None) is False
    assert await checker.matches_many("5", ["5", "6", None]) == [True, False, False]
    assert await checker.matches_all("\\frac{1}{2}", ["0.5", "\\frac{1}{2}"])  # one value in two forms
    assert not await checker.matches_all("\\frac{1}{2}", ["0.5", "0.25"])  # a hedge
    assert not await checker.matches_all("5", None) and not await checker.matches_all("5", [])


async def test_hostile_input_times_out_without_stalling_the_loop():
    checker = MathChecker(timeout_s=1.0, workers=2)
    try:
        assert await checker.matches("2", "2")  # pool started
        async with count_ticks(0.01) as ticks:
            # sympy evaluates this tower of powers for ever; the worker is killed after the limit.
            hostile = asyncio.create_task(checker.matches("2", "9^{9^{9^{9}}}"))
            normal = await checker.matches_many("2", ["2", "x = 2", "4/2", "2.0"])
            assert normal == [True] * 4  # the other worker keeps answering meanwhile
            assert await hostile is False
        assert ticks.count >= 5  # the event loop kept running while the check was stuck
        assert checker.timeouts == 1
        assert await checker.matches("\\frac{1}{2}", "0.5")  # the killed worker was replaced
    finally:
        checker.close()


async def test_a_hanging_check_scores_wrong_and_later_checks_still_run():
    checker = MathChecker(timeout_s=0.5, workers=1, match_fn=sleepy_match)
    try:
        results = await checker.matches_many("fast", ["slow", "fast", "fast"])
        assert results == [False, True, True]  # queued checks ran on the replacement worker
        assert checker.timeouts == 1
    finally:
        checker.close()


async def test_failing_or_dying_checks_score_wrong():
    raising = MathChecker(timeout_s=5.0, workers=1, match_fn=raising_match)
    dying = MathChecker(timeout_s=5.0, workers=1, match_fn=dying_match)
    try:
        assert await raising.matches("1", "1") is False and raising.failures == 1
        assert await dying.matches("1", "1") is False and dying.failures == 1
    finally:
        raising.close()
        dying.close()


async def test_close_then_reuse_starts_a_new_pool():
    checker = MathChecker(timeout_s=5.0, workers=1)
    assert await checker.matches("1", "1")
    checker.close()
    assert await checker.matches("2", "2")
    checker.close()


def test_timeout_must_be_positive():
    with pytest.raises(ValueError, match="timeout_s"):
        MathChecker(timeout_s=0)
