"""Letter extraction for multiple choice: every explicit form, hedges, think blocks, trailing letters."""

from __future__ import annotations

import pytest

from atroposlib.evals.answers import extract_letter, extract_number, extract_word

CHOICES = ["Mars", "Jupiter", "Venus", "Mercury"]


@pytest.mark.parametrize(
    "reply, letter, method",
    [
        ("<answer>B</answer>", "B", "answer_tag"),
        ("<answer>(b).</answer>", "B", "answer_tag"),
        ("<answer>Final answer: B</answer>", "B", "answer_tag"),
        ("<answer>Jupiter</answer>", "B", "answer_tag"),  # the option's text
        ("\\boxed{B}", "B", "boxed"),
        ("\\boxed{\\text{(B)}}", "B", "boxed"),
        ("Answer: B", "B", "answer_phrase"),
        ("The answer is (B).", "B", "answer_phrase"),
        ("Final Answer: **B**", "B", "answer_phrase"),
        ("**Answer**: B", "B", "answer_phrase"),
        ("Answer: B. Option A is wrong because...", "B", "answer_phrase"),
        ("the answer is a close call. Answer: B", "B", "answer_phrase"),  # "a" is an article
        ("<answer>B</answer> so \\boxed{B} and Answer: B", "B", "answer_tag"),  # one letter, three forms
        ("<think>A looks right... no.</think>\\boxed{B}", "B", "boxed"),  # the think block is ignored
        ("I have weighed them all and pick B.", "B", "trailing"),
        ("**(B)**", "B", "trailing"),
        ("<answer>A or B</answer>", None, "ambiguous"),
        ("Answer: A or B", None, "ambiguous"),
        ("Answer: A, C", None, "ambiguous"),
        ("\\boxed{A} ... Answer: C", None, "ambiguous"),
        ("\\boxed{A, B}", None, "ambiguous"),
        ("<answer>E</answer>", None, "out_of_range"),
        ("<answer>Pluto</answer>", None, "no_answer"),
        ("I am not sure.", None, "no_answer"),
        ("<think>it must be B", None, "unclosed_think"),
        ("<think>B</think>", None, "no_answer"),  # the letter only inside the think block
        ("", None, "empty"),
        ("   \n", None, "empty"),
    ],
)
def test_extract_letter(reply, letter, method):
    assert extract_letter(reply, 4, CHOICES) == (letter, method)


def test_more_options_and_no_texts():
    assert extract_letter("<answer>J</answer>", 10) == ("J", "answer_tag")
    assert extract_letter("Answer: I think it is B", 4) == ("B", "trailing")  # "I" is no option of 4


@pytest.mark.parametrize(
    "reply, number, method",
    [
        ("<answer>2</answer>", "2", "answer_tag"),
        ("<answer>Option 2</answer>", "2", "answer_tag"),
        ("\\boxed{3}", "3", "boxed"),
        ("The answer is 1.", "1", "answer_phrase"),
        ("<answer>1 or 2</answer>", None, "ambiguous"),
        ("<answer>7</answer>", None, "out_of_range"),
        ("After all that, 3", "3", "trailing"),
        ("<think>2", None, "unclosed_think"),
    ],
)
def test_extract_number(reply, number, method):
    assert extract_number(reply, 3) == (number, method)


@pytest.mark.parametrize(
    "reply, word, method",
    [
        ("<answer>yes</answer>", "yes", "answer_tag"),
        ("<answer>Maybe</answer>", "maybe", "answer_tag"),
        ("The answer is no.", "no", "answer_phrase"),
        ("\\boxed{\\text{No}}", "no", "boxed"),
        ("<answer>yes or no</answer>", None, "ambiguous"),
        ("So, overall: no", "no", "trailing"),
        ("I cannot tell.", None, "no_answer"),
    ],
)
def test_extract_word(reply, word, method):
    assert extract_word(reply, ("yes", "no", "maybe")) == (word, method)
