"""The letter-counting environment: questions, boxed-count scoring, ``process`` and ``evaluate``."""

from __future__ import annotations

import re

import pytest
from pydantic import ValidationError

from atroposlib.envs.data_loading import DatasetError
from environments.letter_counting_environment import (
    DEFAULT_WORD_LIST,
    LetterCountingConfig,
    LetterCountingEnv,
    LetterCountingTask,
    count_letter,
    parse_count,
    read_word_list,
    score_reply,
)
from tests.helpers.single_turn_runs import (
    check_groups,
    check_scored_group,
    prompt_text,
)

WORDS = read_word_list(DEFAULT_WORD_LIST)
QUESTION = re.compile(r"letter '(\w)' appear in \"([^\"]*)\"")


def _task(**settings) -> LetterCountingTask:
    return LetterCountingTask(WORDS, LetterCountingConfig(**settings))


def test_shipped_word_list():
    assert len(WORDS) >= 3000
    assert all(w.isalpha() and w.islower() for w in WORDS)


def test_items_are_deterministic_and_eval_words_are_held_out():
    task = _task(random_seed=7)
    again = _task(random_seed=7)
    assert [task.train_item(i) for i in range(50)] == [again.train_item(i) for i in range(50)]
    assert [task.train_item(i) for i in range(50)] != [_task(random_seed=8).train_item(i) for i in range(50)]
    assert task.eval_items == again.eval_items and len(task.eval_items) == 200
    held_out = set(task.eval_words)
    assert not held_out & set(task.train_words)
    assert all(item.text.lower() in held_out for item in task.eval_items)
    for i in range(300):
        item = task.train_item(i)
        assert item.count == count_letter(item.text, item.letter)
        assert item.text.lower() in set(task.train_words)


def test_letter_choice_random_strings_and_case():
    task = _task(present_letter_bias=1.0, random_string_percentage=1.0, random_string_min_length=5,
                 random_string_max_length=8, use_all_letters=False, custom_letters="AE")  # fmt: skip
    items = [task.train_item(i) for i in range(100)]
    assert all(5 <= len(item.text) <= 8 for item in items)
    assert {item.letter for item in items} <= {"a", "e"}
    assert all(item.count > 0 for item in items if set(item.text.lower()) & {"a", "e"})
    assert count_letter("StRawbeRRy", "r") == 3
    upper = _task(uppercase_word_percentage=1.0, capitalized_word_percentage=0.0)
    assert all(upper.train_item(i).text.isupper() for i in range(20))


def test_invalid_settings_and_word_lists(tmp_path):
    with pytest.raises(ValidationError, match="min_word_length"):
        LetterCountingConfig(min_word_length=9, max_word_length=3)
    with pytest.raises(ValidationError, match="random_string_min_length"):
        LetterCountingConfig(random_string_min_length=9, random_string_max_length=3)
    with pytest.raises(DatasetError, match="need at least 2"):
        _task(min_word_length=30)
    empty = tmp_path / "words.txt"
    empty.write_text("123\n\n")
    with pytest.raises(DatasetError, match="no words"):
        read_word_list(empty)
    with pytest.raises(DatasetError, match="no such file"):
        read_word_list(tmp_path / "missing.txt")


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("\\boxed{3}", 1.0),
        ("<think>s-t-r-a-w-b-e-r-r-y: r at 3, 8, 9</think>There are \\boxed{3} r's.", 1.0),
        ("\\boxed{ 3 }", 1.0),
        ("\\boxed{\\text{3}}", 1.0),
        ("\\boxed{three}", 1.0),
        ("\\boxed{3} ... so the answer is \\boxed{3}", 1.0),  # the same answer repeated
        ("\\boxed{2}", 0.0),
        ("3", 0.0),  # not boxed
        ("<think>\\boxed{3}</think>I am not sure.", 0.0),  # answer only inside the reasoning
        ("\\boxed{2} or \\boxed{3}", 0.0),  # several answers
        ("\\boxed{2 or 3}", 0.0),  # a hedge inside one box
        ("\\boxed{3.0}", 0.0),
        ("\\boxed{-3}", 0.0),
        ("<think>unfinished \\boxed{3}", 0.0),  # reasoning never closed
        ("\\boxed{}", 0.0),
        ("", 0.0),
    ],
)
def test_scoring(reply, expected):
    assert score_reply(reply, 3) == expected


def test_parse_count():
    assert parse_count("12") == 12 and parse_count("Twenty") == 20 and parse_count("zero") == 0
    assert parse_count("twenty-one") is None and parse_count("٣") is None and parse_count("3x") is None


def _responder():
    """Right count for even choice indices, count + 1 for odd ones."""

    def respond(prompt, index):
        match = QUESTION.search(prompt_text(prompt))
        if not match:
            return "no question found"
        count = count_letter(match.group(2), match.group(1))
        return f"<think>Spelling it out letter by letter.</think>The letter appears \\boxed{{{count + index % 2}}} times."

    return respond


def test_process_writes_scored_groups(scripted):
    groups = scripted.process(
        LetterCountingEnv,
        ["--env.group_size", "2", "--env.total_steps", "2", "--env.max_tokens", "64"],
        _responder(),
    )
    check_groups(groups, 2, [0.0, 1.0])
    for group in groups:
        replies = [m[-1]["content"] for m in group["messages"]]
        assert all("\\boxed{" in r for r in replies)
        assert "How many times does the letter" in group["messages"][0][1]["content"]


def test_evaluate_reports_accuracy(scripted):
    metrics, samples, out = scripted.evaluate(
        LetterCountingEnv, ["--env.eval_sample_size", "6", "--env.max_tokens", "64"], _responder()
    )
    assert metrics["eval/percent_correct"] == 1.0  # eval replies are choice 0: always right
    assert len(samples) == 6 and all(s["correct"] and s["score"] == 1.0 for s in samples)
    assert {"question", "gold_answer", "messages"} <= set(samples[0])
    assert "letter_counting evaluation: percent_correct=1.0000" in out


def test_serve_sends_groups_to_the_api(scripted, api):
    served = scripted.serve(
        LetterCountingEnv,
        ["--env.group_size", "2", "--env.max_tokens", "64", "--env.total_steps", "100"],
        _responder(),
        api,
    )
    assert served.registration["desired_name"] == "letter_counting" and served.registration["group_size"] == 2
    check_scored_group(served.group, [0.0, 1.0])
    assert "Traceback" not in served.log
