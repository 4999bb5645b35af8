"""atroposlib.evals.eed: PHYBench's Expression Edit Distance score, its tree distance and its worker pool."""

from __future__ import annotations

import asyncio

import pytest

from atroposlib.evals.eed import (
    EEDScorer,
    Node,
    clean_latex,
    eed_score,
    expression_tree,
    score_from_distance,
    subtree_cost,
    tree_edit_distance,
)


def leaf(label: str) -> Node:
    return Node("symbol", label, [])


def op(label: str, *children: Node) -> Node:
    return Node("operator", label, list(children))


def test_tree_edit_distance_on_small_trees():
    a = op("f", leaf("x"), leaf("y"))
    assert tree_edit_distance(a, a) == 0
    assert tree_edit_distance(op("f", leaf("x")), a) == 1  # insert y
    assert tree_edit_distance(a, op("f", leaf("x"))) == 1  # delete y
    assert tree_edit_distance(a, op("f", leaf("x"), leaf("z"))) == 1  # relabel y
    assert tree_edit_distance(a, op("g", leaf("x"), leaf("y"))) == 1  # relabel the root
    # the textbook Zhang-Shasha pair: f(d(a, c(b)), e) -> f(c(d(a, b)), e) costs 2
    one = op("f", op("d", leaf("a"), op("c", leaf("b"))), leaf("e"))
    two = op("f", op("c", op("d", leaf("a"), leaf("b"))), leaf("e"))
    assert tree_edit_distance(one, two) == 2


def test_a_large_missing_subtree_is_discounted():
    assert subtree_cost(1) == 1 and subtree_cost(5) == 5
    assert subtree_cost(10) == pytest.approx(8.0)  # 0.6 * (10 - 5) + 5
    big = op("g", *(leaf(f"x{i}") for i in range(9)))  # 10 nodes
    with_big = op("f", leaf("y"), big)
    assert tree_edit_distance(op("f", leaf("y")), with_big) == pytest.approx(8.0)
    assert tree_edit_distance(with_big, op("f", leaf("y"))) == pytest.approx(8.0)


def test_score_from_distance_follows_the_papers_piecewise_rule():
    assert score_from_distance(0, 10) == 100
    assert score_from_distance(1, 10) == pytest.approx(50.0)  # 60 - 100 * 0.1
    assert score_from_distance(5, 10) == pytest.approx(10.0)
    assert score_from_distance(6, 10) == 0
    assert score_from_distance(20, 10) == 0


def test_expression_tree_of_a_sympy_expression():
    import sympy

    x, y = sympy.symbols("x y")
    tree = expression_tree(2 * sympy.sin(x) + y)
    assert (tree.kind, tree.label) == ("operator", "Add")
    assert sorted((child.kind, child.label) for child in tree.children) == [
        ("operator", "Mul"),
        ("symbol", "y"),
    ]
    assert tree.size() == 6  # Add, y, Mul, 2, sin, x
    assert expression_tree(sympy.pi).kind == "number"


def test_clean_latex_keeps_the_expression():
    assert clean_latex(r"\boxed{v = \sqrt{gL}}") == r"\sqrt{gL}"
    assert clean_latex(r"$T = \left(m + M\right) g$") == "(m + M ) g"
    assert clean_latex(r"\frac{1}{2}\,\text{kg}") == r"\frac{1}{2} kg"
    assert clean_latex(r"F \approx \dfrac{mg}{2}.") == r"\frac{mg}{2}"
    assert clean_latex(r"f(x=1)") == "f(x=1)"  # an = inside brackets is not a relation


@pytest.mark.parametrize(
    "answer",
    [
        r"\sqrt{\frac{2g}{3R}}",
        r"\sqrt{2g/(3R)}",
        r"\boxed{v = \sqrt{\frac{2 g}{3 R}}}",
        r"\frac{\sqrt{6gR}}{3R}",
    ],
)
def test_equivalent_answers_score_100(answer):
    result = eed_score(r"\sqrt{\frac{2g}{3R}}", answer)
    assert result.score == 100 and result.equivalent and result.distance == 0


def test_near_misses_get_partial_credit_and_far_misses_none():
    coefficient = eed_score(r"\frac{\mu_0 I}{2\pi r}", r"\frac{\mu_0 I}{4 \pi r}")
    assert (coefficient.distance, coefficient.gold_size) == (1.0, 10)
    assert coefficient.score == pytest.approx(50.0)
    function = eed_score(r"mg\sin\theta", r"mg\cos\theta")
    assert function.score == pytest.approx(40.0)  # one relabel in a 5-node tree
    assert eed_score(r"mg\sin\theta", r"\frac{k q^2}{r^3} + e^{x}").score == 0
    # case matters: R is not r, and I is a current, not the imaginary unit
    assert eed_score(r"I R", r"I r").score < 100
    assert eed_score(r"I R", r"R I").score == 100


@pytest.mark.parametrize("answer", [None, "", "   ", r"\frac{", "x = = ="])
def test_missing_or_unparsable_answers_score_0(answer):
    result = eed_score(r"\frac{1}{2} m v^2", answer)
    assert result.score == 0 and result.distance is None


def test_scorer_runs_in_workers_and_bounds_time():
    async def run():
        scorer = EEDScorer(timeout_s=20, workers=1)
        try:
            good = await scorer.score(r"\frac{1}{2} m v^2", r"0.5 m v^2")
            partial = await scorer.score(r"\frac{\mu_0 I}{2\pi r}", r"\frac{\mu_0 I}{4 \pi r}")
            missing = await scorer.score(r"x", None)
            bad_gold = await scorer.score(r"\frac{", "x")
        finally:
            scorer.close()
        return good, partial, missing, bad_gold, scorer.failures

    good, partial, missing, bad_gold, failures = asyncio.run(run())
    assert good.score == 100 and partial.score == pytest.approx(50.0)
    assert missing.score == 0 and bad_gold.score == 0 and failures == 1


def test_a_score_that_runs_over_is_0_and_the_worker_is_replaced():
    async def run():
        scorer = EEDScorer(timeout_s=2, workers=1)
        try:
            slow = await scorer.score("x", "9^{9^{9^{9}}}")  # sympy would compute this integer forever
            after = await scorer.score("x", "x")
        finally:
            scorer.close()
        return slow, after, scorer.timeouts

    slow, after, timeouts = asyncio.run(run())
    assert slow.score == 0 and timeouts == 1 and after.score == 100
