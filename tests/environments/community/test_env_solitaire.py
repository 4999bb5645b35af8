"""Solitaire winning probability: safe formula evaluation, graded closeness, the shipped games, local CSV,
``process`` and ``evaluate``."""

from __future__ import annotations

import itertools
import re
from fractions import Fraction

import pytest

from environments.community.solitaire_winning_probability.formula import evaluate_formula
from environments.community.solitaire_winning_probability.solitaire_server import (
    GAMES,
    SolitaireEnv,
    closeness,
    games_from_rows,
    reply_value,
)
from tests.environments.community.community_runs import always, evaluate_local, process_local
from tests.helpers.cli_runs import FIXTURES, read_jsonl
from tests.helpers.single_turn_runs import check_groups, offline_env, prompt_text, setup_failure, write_jsonl

SAMPLE = FIXTURES / "community" / "solitaire_sample.csv"
QUARTER = Fraction(1, 4)


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ("<think>one card in four</think><formula>1/4</formula>", 1.0),
        ("<formula>C(3,0)*factorial(3)/factorial(4)</formula>", 1.0),  # another form of 1/4
        ("<formula>\\frac{1}{4}</formula>", 1.0),
        ("The chance is \\boxed{0.25}", 1.0),  # boxed instead of the formula tag
        ("<reasoning>count the aces</reasoning>\n<formula>2^-2</formula>", 1.0),  # the original's sections
        ("<formula>0.28</formula>", 1.0),  # within the 20 % closeness bonus
        ("<formula>1/2</formula>", 0.2),  # relative error 1
        ("<formula>1</formula>", -0.8),  # relative error 3, capped at 2: 1.2 - 2
        ("<formula>1/4</formula> or <formula>1/3</formula>", -1.0),  # hedged
        ("<formula>one in four</formula>", -1.0),  # not a formula
        ("<formula>__import__('os').getpid()</formula>", -1.0),  # never executed
        ("<think><formula>1/4</formula></think>", -1.0),  # only inside the reasoning
        ("<formula></formula>", -1.0),
        ("", -1.0),
    ],
)
def test_scoring(reply, score):
    assert closeness(reply_value(reply), QUARTER) == pytest.approx(score)


def test_formulas_are_exact_and_bounded():
    assert evaluate_formula("1 - (5/6)^3") == Fraction(91, 216)
    assert evaluate_formula("P(4,2)/C(4,2)") == 2
    assert evaluate_formula("$\\frac{\\frac{1}{2}}{2}$") == QUARTER
    for bad in (
        "9**9**9",
        "factorial(10**6)",
        "(((10**64)**64)**64)**64",
        "1/0",
        "x + 1",
        "abs(-1)",
        "1" * 600,
    ):
        assert evaluate_formula(bad) is None


def test_the_shipped_games_have_their_exact_probabilities():
    rows = read_jsonl(GAMES)
    assert len(rows) == 12
    simulate = {  # an independent count for a few of them
        "no_match_four": Fraction(sum(all(c != i + 1 for i, c in enumerate(p)) for p in itertools.permutations(range(1, 5))), 24),
        "high_three_dice": Fraction(sum(sum(p) >= 15 for p in itertools.product(range(1, 7), repeat=3)), 216),
        "six_in_three": 1 - Fraction(5, 6) ** 3,
    }  # fmt: skip
    golds = {row["name"]: evaluate_formula(row["answer"]) for row in rows}
    assert all(golds[name] == value for name, value in simulate.items())
    assert all("```python" in row["question"] for row in rows)


async def test_local_csv_in_the_original_schema(tiny_model_dir, tmp_path):
    env = offline_env(SolitaireEnv, tiny_model_dir, dataset_path=str(SAMPLE))
    await env.setup()
    assert len(env.test) == 2 and len(env.train) == 2
    assert {g.probability for g in env.train + env.test} == {
        Fraction(1, 3),
        QUARTER,
        Fraction(3, 10),
        Fraction(1, 6),
    }
    shipped = offline_env(SolitaireEnv, tiny_model_dir)
    await shipped.setup()
    assert (len(shipped.train), len(shipped.test)) == (10, 2)
    bad = write_jsonl(
        tmp_path / "bad.jsonl", [{"question": "q", "answer": "1/2"}, {"question": "q", "answer": "2"}]
    )
    error = await setup_failure(
        offline_env(SolitaireEnv, tiny_model_dir, dataset_path=bad), "row 1: field 'answer'"
    )
    assert bad in str(error)
    with pytest.raises(Exception, match="row 0: missing field 'answer'"):
        games_from_rows([{"question": "q"}], "x")


ANSWERS = {
    "Roll one fair six-sided die": "C(2,1)/6",
    "Flip two fair coins": "(1/2)^2",
    "Draw one card from ten cards": "3/10",
    "Shuffle three cards numbered 1 to 3": "1/factorial(3)",
}


def _responder():
    """The exact formula for even choices, twice the probability for odd ones."""

    def respond(prompt, index):
        text = prompt_text(prompt)
        formula = next(f for start, f in ANSWERS.items() if start in text)
        formula = formula if index % 2 == 0 else f"2*({formula})"
        return f"<think>Counting outcomes.</think><formula>{formula}</formula>"

    return respond


def test_process_with_a_local_csv(scripted):
    groups = process_local(
        scripted, SolitaireEnv, SAMPLE, _responder(), group_size=2, total_steps=2, max_tokens=128
    )
    check_groups(groups, 2, [0.2, 1.0])  # twice the probability: relative error 1


def test_evaluate_reports_exact_answers(scripted):
    evaluation = evaluate_local(
        scripted, SolitaireEnv, SAMPLE, always("<formula>1/4</formula>"), max_tokens=128
    )
    metrics = evaluation.metrics
    # 1/4 is exact for the coins, within 20 % of 3/10 (error 1/6: score 1.0), 1/4 off 1/3 (error 1/4: 0.95),
    # 1/2 off 1/6 (error 1/2: 0.7)
    assert metrics["eval/percent_exact"] == 0.25 and metrics["eval/percent_correct"] == 0.5
    assert metrics["eval/mean_score"] == pytest.approx((1.0 + 1.0 + 0.95 + 0.7) / 4)
    assert sorted(s["gold_probability"] for s in evaluation.samples) == ["1/3", "1/4", "1/6", "3/10"]
    assert re.search(r"percent_correct=0\.5000", evaluation.out)
