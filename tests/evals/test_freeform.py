"""atroposlib.evals.freeform: SQuAD and DROP normalisation, exact match and F1, DROP gold answers, grids."""

from __future__ import annotations

import pytest

from atroposlib.evals.freeform import (
    drop_gold_answers,
    drop_metrics,
    drop_normalize,
    drop_score,
    extract_freeform,
    grids_equal,
    parse_grid,
    squad_exact_match,
    squad_f1,
    squad_normalize,
)


def test_squad_normalisation_drops_case_punctuation_articles_and_spaces():
    assert squad_normalize("  The  Eiffel-Tower, in PARIS! ") == "eiffeltower in paris"
    assert squad_normalize("an apple a day") == "apple day"


def test_squad_exact_match_and_f1():
    assert squad_exact_match("The Beatles.", "beatles") == 1.0
    assert squad_exact_match("Beatles band", "beatles") == 0.0
    # 2 shared tokens of 3 predicted and 2 gold: P = 2/3, R = 1, F1 = 0.8
    assert squad_f1("john lennon sang", "John Lennon") == pytest.approx(0.8)
    assert squad_f1("paul", "john lennon") == 0.0
    assert squad_f1("the", "a") == 1.0  # both empty after normalisation
    assert squad_f1("", "john") == 0.0
    # tokens counted with multiplicity: "a b b" vs "b b c" share two tokens
    assert squad_f1("x y y", "y y z") == pytest.approx(2 / 3)


def test_drop_normalisation_numbers_hyphens_and_articles():
    assert drop_normalize("3") == drop_normalize("3.0") == "3.0"
    assert drop_normalize("The 49ers") == "49ers"
    assert drop_normalize("half-time") == "half time"
    assert drop_normalize("1,000") == drop_normalize("1000") == "1000.0"  # punctuation out, then a number


@pytest.mark.parametrize(
    ("predicted", "gold", "em", "f1"),
    [
        ("3", ("3",), 1.0, 1.0),
        ("3.0", ("3",), 1.0, 1.0),
        ("three", ("3",), 0.0, 0.0),
        ("the Chicago Bears", ("Chicago Bears",), 1.0, 1.0),
        ("Bears", ("Chicago Bears",), 0.0, 0.67),
        # the gold span holds a number the prediction does not: F1 0 whatever else is shared
        ("7 yards", ("12 yards",), 0.0, 0.0),
        # two gold spans, one predicted: aligned to one of them, averaged over two
        ("Chicago Bears", ("Chicago Bears", "Green Bay Packers"), 0.0, 0.5),
        (["Green Bay Packers", "Chicago Bears"], ("Chicago Bears", "Green Bay Packers"), 1.0, 1.0),
        ("", ("3",), 0.0, 0.0),
    ],
)
def test_drop_metrics(predicted, gold, em, f1):
    assert drop_metrics(predicted, gold) == (em, f1)


def test_drop_score_takes_the_best_gold_answer_for_each_metric():
    assert drop_score("Bears", [("Chicago Bears",), ("Bears",)]) == (1.0, 1.0)
    assert drop_score("Chicago", [("Chicago Bears",), ("Chicago Bulls",)]) == (0.0, 0.67)
    assert drop_score("anything", []) == (0.0, 0.0)


def test_drop_gold_answers_from_a_hub_row():
    row = {
        "answer": {"number": "", "date": {"day": "", "month": "", "year": ""}, "spans": ["Chicago Bears"]},
        "validated_answers": {
            "number": ["", "4", ""],
            "date": [
                {"day": "", "month": "", "year": ""},
                {"day": "", "month": "", "year": ""},
                {"day": "12", "month": "May", "year": "1990"},
            ],
            "spans": [["Chicago Bears"], [], []],
        },
    }
    assert drop_gold_answers(row) == [("Chicago Bears",), ("4",), ("12 May 1990",)]
    # validated answers as a list of dicts (JSON exports) read the same way
    listed = {"answer": row["answer"], "validated_answers": [{"number": "4", "spans": []}]}
    assert drop_gold_answers(listed) == [("Chicago Bears",), ("4",)]
    assert drop_gold_answers({"answer": {"number": "", "spans": [], "date": {}}}) == []


@pytest.mark.parametrize(
    "text",
    [
        "[[1, 2], [3, 4]]",
        "  [[1,2],[3,4]]  ",
        "Here it is:\n[[1, 2],\n [3, 4]]\nDone.",
        "[1, 2]\n[3, 4]",
        "((1, 2), (3, 4))",
    ],
)
def test_parse_grid_reads_json_python_and_row_per_line(text):
    assert parse_grid(text) == [[1, 2], [3, 4]]


@pytest.mark.parametrize("text", [None, "", "no grid", "[[1, 2], [3]]", "[[1, 'a']]", "[[true]]", "[]"])
def test_parse_grid_rejects_ragged_empty_and_non_integer(text):
    assert parse_grid(text) is None


def test_grids_equal_needs_the_same_shape_and_cells():
    assert grids_equal([[1, 2], [3, 4]], [[1, 2], [3, 4]])
    assert grids_equal(((1, 2), (3, 4)), [[1, 2], [3, 4]])
    assert not grids_equal([[1, 2], [3, 5]], [[1, 2], [3, 4]])
    assert not grids_equal([[1, 2]], [[1, 2], [3, 4]])
    assert not grids_equal(None, [[1]])


@pytest.mark.parametrize(
    ("reply", "answer", "method"),
    [
        ("<think>2 + 2</think><answer> 4 </answer>", "4", "answer_tag"),
        ("<answer>4</answer> and again <answer>4</answer>", "4", "answer_tag"),
        ("<answer>4</answer> or <answer>5</answer>", None, "ambiguous"),
        ("So it is \\boxed{Chicago Bears}.", "Chicago Bears", "boxed"),
        ("\\boxed{1} \\boxed{2}", None, "ambiguous"),
        ("Working...\nThe answer is **Green Bay**.", "Green Bay", "answer_phrase"),
        ("Final answer: 12 yards", "12 yards", "answer_phrase"),
        ("Some thoughts.\nMatt Forte", "Matt Forte", "last_line"),
        ("", None, "empty"),
        ("<think>never closed", None, "unclosed_think"),
        ("<think>done</think>   ", None, "no_answer"),
    ],
)
def test_extract_freeform(reply, answer, method):
    assert extract_freeform(reply) == (answer, method)
