"""The letter-counting environment: questions, boxed-count scoring, ``process`` and ``evaluate``."""

from __future__ import annotations

import json
import re

import pytest
from pydantic import ValidationError

from atroposlib.envs.data_loading import DatasetError
from environments.letter_counting_environment import (
    DEFAULT_WORD_LIST,
    DifficultyCurriculum,
    LetterCountingConfig,
    LetterCountingEnv,
    LetterCountingTask,
    count_letter,
    parse_count,
    parse_counts,
    read_word_list,
    score_reply,
)
from tests.helpers.cli_runs import read_jsonl
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


# ----------------------------------------------------------------------------- 0.4.0's options
MULTI_QUESTION = re.compile(r"each of the letters (.*?) appear in \"([^\"]*)\"")


def test_several_letters_are_asked_and_scored_as_one_json_object():
    task = _task(max_letters_to_count=4, multi_letter_probability=1.0)
    items = [task.train_item(i) for i in range(40)]
    assert all(2 <= len(item.letters) <= 4 and item.multi for item in items)
    item = items[0]
    assert item.counts == {c: count_letter(item.text, c) for c in item.letters}
    assert "each of the letters" in item.question and "\\boxed{{" in item.question
    right = json.dumps(item.counts)
    assert score_reply(f"<think>counting</think>\\boxed{{{right}}}", item.counts) == 1.0
    assert (
        score_reply(f"\\boxed{{{json.dumps(dict(reversed(list(item.counts.items()))))}}}", item.counts) == 1.0
    )
    wrong = {**item.counts, item.letters[0]: item.counts[item.letters[0]] + 1}
    assert score_reply(f"\\boxed{{{json.dumps(wrong)}}}", item.counts) == 0.0
    missing = dict(list(item.counts.items())[:-1])
    assert score_reply(f"\\boxed{{{json.dumps(missing)}}}", item.counts) == 0.0
    as_strings = {k: str(v) for k, v in item.counts.items()}
    assert score_reply(f"\\boxed{{{json.dumps(as_strings)}}}", item.counts) == 0.0
    assert parse_counts('{"a": 1, "A": 2}') is None and parse_counts("[1]") is None
    assert all(not _task().train_item(i).multi for i in range(40))  # max_letters_to_count 1: one letter


def test_difficulty_tiers_shape_the_questions():
    task = _task()
    easy = [task.train_item(i, level=1) for i in range(30)]
    assert all(3 <= len(item.text) <= 8 and item.text.isalpha() and not item.multi for item in easy)
    assert all(item.level == 1 for item in easy)
    hard = [task.train_item(i, level=6) for i in range(30)]
    assert all(40 <= len(item.text) <= 80 and 8 <= len(item.letters) <= 12 for item in hard)
    assert not set(item.text for item in hard) & set(WORDS)  # random strings, not words
    top = task.train_item(0, level=10)
    assert 400 <= len(top.text) <= 500 and len(top.letters) == 26


def test_curriculum_moves_one_tier_on_a_full_window_and_filters_groups():
    config = LetterCountingConfig(difficulty_window_size=20, starting_difficulty_level=3)
    assert config.curriculum_enabled  # turned on by a difficulty_* setting
    assert not LetterCountingConfig().curriculum_enabled
    assert not LetterCountingConfig(adaptive_difficulty=False, starting_difficulty_level=2).curriculum_enabled
    assert LetterCountingConfig(adaptive_difficulty=True).curriculum_enabled
    curriculum = DifficultyCurriculum(config)
    for _ in range(9):
        curriculum.record(3, 1.0)
    assert curriculum.level == 3  # fewer than max(10, window / 2) groups: no decision yet
    curriculum.record(2, 1.0)  # a group of another tier does not count
    assert curriculum.level == 3
    curriculum.record(3, 1.0)
    assert curriculum.level == 4 and curriculum.window == []
    for _ in range(10):
        curriculum.record(4, 0.0)
    assert curriculum.level == 3
    for _ in range(30):
        curriculum.record(3, 0.5)
    assert curriculum.level == 3 and len(curriculum.window) == 20  # within the thresholds, window kept full
    assert curriculum.trains_on(0.5) and not curriculum.trains_on(0.9) and not curriculum.trains_on(0.1)
    capped = DifficultyCurriculum(LetterCountingConfig(max_difficulty_level=3, starting_difficulty_level=3))
    for _ in range(75):
        capped.record(3, 1.0)
    assert capped.level == 3
    with pytest.raises(ValidationError, match="min_difficulty_level"):
        LetterCountingConfig(min_difficulty_level=5, max_difficulty_level=2)
    with pytest.raises(ValidationError, match="difficulty_decrease_threshold"):
        LetterCountingConfig(difficulty_decrease_threshold=0.9, difficulty_increase_threshold=0.5)


def _multi_responder():
    """Right counts for even choice indices, wrong ones for odd ones (one or several letters)."""

    def respond(prompt, index):
        text = prompt_text(prompt)
        multi = MULTI_QUESTION.search(text)
        if multi:
            counts = {c: count_letter(multi.group(2), c) for c in re.findall(r"'(\w)'", multi.group(1))}
            counts = {k: v + index % 2 for k, v in counts.items()}
            return f"<think>counting</think>\\boxed{{{json.dumps(counts)}}}"
        match = QUESTION.search(text)
        count = count_letter(match.group(2), match.group(1)) if match else 0
        return f"<think>counting</think>\\boxed{{{count + index % 2}}}"

    return respond


def test_a_config_in_0_4_0_form_runs_the_curriculum(scripted, tmp_path):
    config = tmp_path / "letters.yaml"
    config.write_text(
        "env:\n  group_size: 2\n  total_steps: 2\n  starting_difficulty_level: 6\n"
        "  difficulty_increase_threshold: 0.9\n  difficulty_decrease_threshold: 0.1\n"
        "  generation_temperature: 0.5\n  max_generation_tokens: 1024\n"
    )
    requests = scripted.command(LetterCountingEnv, "process", ["--config", config], _multi_responder())
    groups = read_jsonl(tmp_path / "data" / "letter_counting.jsonl")
    check_groups(groups, 2, [0.0, 1.0])
    for group in groups:
        question = group["messages"][0][1]["content"]
        multi = MULTI_QUESTION.search(question)
        assert multi and 40 <= len(multi.group(2)) <= 80  # tier 6: a random string, 8-12 letters
    sampled = [r["body"] for r in requests if r["path"] == "/generate"]
    assert sampled and all(b["max_tokens"] == 1024 and b["temperature"] == 0.5 for b in sampled)


def test_too_easy_groups_are_not_trained(scripted, tmp_path):
    config = tmp_path / "easy.yaml"
    config.write_text("env:\n  group_size: 2\n  total_steps: 1\n  max_group_average_for_training: 0.4\n"
                      "  max_tokens: 64\n  process_max_consecutive_failures: 2\n")  # fmt: skip
    with pytest.raises(AssertionError, match="items in a row produced no usable group"):
        scripted.command(LetterCountingEnv, "process", ["--config", config], _multi_responder())
    assert not (tmp_path / "data" / "letter_counting.jsonl").exists()
    config.write_text(config.read_text().replace("0.4", "0.5"))  # a group scoring 0.5 is kept
    scripted.command(LetterCountingEnv, "process", ["--config", config], _multi_responder())
    check_groups(read_jsonl(tmp_path / "data" / "letter_counting.jsonl"), 1, [0.0, 1.0])
