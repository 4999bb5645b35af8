"""atroposlib.evals.math: the evaluations' math check (reading replies, verdicts, hub gold answers)."""

from __future__ import annotations

import asyncio

import pytest

from atroposlib.evals.math import MathScorer, gsm8k_gold, solution_gold, strip_math_delimiters


@pytest.fixture(scope="module")
def scorer():
    scorer = MathScorer(workers=2)
    yield scorer
    scorer.close()


def verdicts(scorer, replies, gold):
    async def run():
        return await asyncio.gather(*(scorer.score(reply, gold) for reply in replies))

    return asyncio.run(run())


@pytest.mark.parametrize(
    ("reply", "correct", "reason", "answer"),
    [
        ("\\boxed{0.5}", True, "correct", "0.5"),
        ("<think>1 over 2</think>So the answer is $\\boxed{\\frac{1}{2}}$.", True, "correct", "\\frac{1}{2}"),
        ("Therefore, the final answer is: $\\boxed{1/2}$. I hope it is correct", True, "correct", "1/2"),
        ("\\boxed{x = \\frac{1}{2}}", True, "correct", "x = \\frac{1}{2}"),
        ("\\boxed{1/2} and again \\boxed{0.5}", True, "correct", "0.5"),  # one value, two forms
        ("\\boxed{1/3}", False, "wrong", "1/3"),
        ("\\boxed{1/2} or maybe \\boxed{1/3}", False, "hedge", "1/3"),
        ("", False, "empty", None),
        ("   \n", False, "empty", None),
        ("<think>let me think about 1/2 for a long", False, "unclosed_think", None),
        ("<think>\\boxed{1/2}</think>I am not sure.", False, "no_answer", None),
        ("The answer is 1/2.", False, "no_answer", None),
    ],
)
def test_verdicts(scorer, reply, correct, reason, answer):
    (verdict,) = verdicts(scorer, [reply], "\\frac{1}{2}")
    assert (verdict.correct, verdict.reason, verdict.answer) == (correct, reason, answer)


def test_score_any_accepts_any_listed_form_but_not_a_hedge_across_them(scorer):
    async def run():
        one = await scorer.score_any("\\boxed{2}", ["$1$", "$2$"])
        hedge = await scorer.score_any("\\boxed{1} \\boxed{2}", ["$1$", "$2$"])
        return one, hedge

    one, hedge = asyncio.run(run())
    assert one.correct and not hedge.correct and hedge.reason == "hedge"


def test_read_does_not_compare():
    verdict = MathScorer().read("<think>x</think>\\boxed{7}")
    assert (verdict.correct, verdict.reason, verdict.answers) == (False, "wrong", ("7",))


def test_hub_gold_answers():
    assert gsm8k_gold("He has 3 + 4 = 7 apples.\n#### 1,234") == "1234"
    assert gsm8k_gold(" 72 ") == "72"
    assert solution_gold("So $x = 2$, and the answer is $\\boxed{\\frac{3}{4}}$.") == "\\frac{3}{4}"
    assert solution_gold(18.0) == "18"
    assert strip_math_delimiters("$\\frac{1}{2}$") == "\\frac{1}{2}"
    assert strip_math_delimiters("\\(x^2\\)") == "x^2"
    assert strip_math_delimiters("$") == "$"
