"""The multiple-choice environment: MMLU rows, boxed-letter scoring, seeded option shuffling, ``process``
and ``evaluate``."""

from __future__ import annotations

from typing import Any

import pytest

from environments.mcqa_thinking_env import (
    MCQAItem,
    MCQAThinkingEnv,
    box_letter,
    reply_letter,
    row_to_item,
    shuffled,
    user_prompt,
)
from tests.helpers.cli_runs import FIXTURES, read_jsonl
from tests.helpers.single_turn_runs import (
    check_groups,
    offline_env,
    prompt_text,
    setup_failure,
    write_jsonl,
)

SAMPLE = FIXTURES / "mmlu_sample.jsonl"
ROWS = read_jsonl(SAMPLE)
ITEM = MCQAItem("Which planet is largest?", "astronomy", ("Mars", "Jupiter", "Venus", "Mercury"), 1)


def _env(tiny_model_dir, **overrides) -> MCQAThinkingEnv:
    return offline_env(MCQAThinkingEnv, tiny_model_dir, **{"dataset_path": str(SAMPLE), **overrides})


def _item_of(prompt: Any) -> MCQAItem:
    """The item (options as shown in the prompt) a scripted-server request is about."""
    text = prompt_text(prompt)
    index, row = next((i, r) for i, r in enumerate(ROWS) if r["question"] in text)
    item = row_to_item(row, index, "fixture")
    shown = [line.split(". ", 1)[1] for line in text.splitlines() if len(line) > 2 and line[1:3] == ". "]
    shown = shown[-len(item.choices) :]
    return MCQAItem(item.question, item.subject, tuple(shown), shown.index(item.choices[item.answer]))


def alternating_responder(prompt: Any, index: int) -> str:
    item = _item_of(prompt)
    letter = item.letter if index % 2 == 0 else "ABCDE"[(item.answer + 1) % len(item.choices)]
    return f"<think>Weighing each option in turn before deciding.</think>The answer is \\boxed{{{letter}}}."


def first_rows_right_responder(prompt: Any, index: int) -> str:
    """Right on the fixture's first four questions, wrong on the others."""
    item = _item_of(prompt)
    right = [r["question"] for r in ROWS].index(item.question) < 4
    letter = item.letter if right else "ABCDE"[(item.answer + 1) % len(item.choices)]
    return f"<think>Considering it.</think>\\boxed{{({letter})}}"


# -- data ------------------------------------------------------------------------------------------------
def test_rows_become_items():
    items = [row_to_item(row, i, "f") for i, row in enumerate(ROWS)]
    assert items[1] == MCQAItem(ROWS[1]["question"], "college_biology", tuple(ROWS[1]["choices"]), 2)
    assert items[1].letter == "C"
    assert len(items[8].choices) == 3 and len(items[9].choices) == 5 and items[9].letter == "D"
    assert row_to_item({"question": "q", "choices": ["a", "b"], "answer": "1"}, 0, "f").answer == 1


@pytest.mark.parametrize(
    "row, message",
    [
        ({"question": "q", "subject": "s", "answer": 0}, r"bad\.jsonl: row 1: missing field 'choices'"),
        ({"question": "q", "choices": ["a", "b"]}, r"bad\.jsonl: row 1: missing field 'answer'"),
        (
            {"question": "q", "choices": ["a", "b"], "answer": 2},
            r"row 1: field 'answer' must be an option index",
        ),
        ({"question": "q", "choices": ["a", "b"], "answer": "B"}, r"row 1: field 'answer'"),
        ({"question": "q", "choices": "a b", "answer": 0}, r"row 1: field 'choices' must be a list"),
        ({"question": "q", "choices": ["only one"], "answer": 0}, r"row 1: field 'choices'"),
    ],
)
async def test_bad_rows_stop_setup_with_one_line(tiny_model_dir, tmp_path, row, message):
    env = _env(tiny_model_dir, dataset_path=write_jsonl(tmp_path / "bad.jsonl", [ROWS[0], row]))
    await setup_failure(env, message)


async def test_setup_reads_a_local_file_and_empty_sets_are_errors(tiny_model_dir, tmp_path):
    env = _env(tiny_model_dir)
    await env.setup()
    assert sorted(i.question for i in env.train) == sorted(r["question"] for r in ROWS)
    assert [i.question for i in env.test] == [r["question"] for r in ROWS]
    assert [i.choices for i in env.test] == [tuple(r["choices"]) for r in ROWS]  # not shuffled by default
    assert await env.get_next_item() == env.train[0]
    empty = _env(tiny_model_dir, dataset_path=write_jsonl(tmp_path / "empty.jsonl", []))
    await setup_failure(empty, "empty.jsonl: no rows")


async def test_default_data_is_mmlu_on_the_hub(tiny_model_dir, hub_offline):
    env = _env(tiny_model_dir, dataset_path=None)
    await setup_failure(env, r"cais/mmlu \(auxiliary_train\): cannot load from the hub")


# -- shuffling -------------------------------------------------------------------------------------------
def test_shuffle_is_seeded_per_item_and_remaps_the_answer():
    items = [row_to_item(row, i, "f") for i, row in enumerate(ROWS)]
    once = [shuffled(item, 0) for item in items]
    assert once == [shuffled(item, 0) for item in items]  # deterministic
    for item, moved in zip(items, once, strict=True):
        assert sorted(moved.choices) == sorted(item.choices)
        assert moved.choices[moved.answer] == item.choices[item.answer]
    assert any(m.choices != i.choices for m, i in zip(once, items, strict=True))
    assert len({m.letter for m in once}) > 1  # the right letter moves around
    assert [shuffled(i, 1).choices for i in items] != [m.choices for m in once]  # the seed matters


async def test_shuffle_choices_flag(tiny_model_dir):
    env = _env(tiny_model_dir, shuffle_choices=True)
    await env.setup()
    by_question = {i.question: i for i in env.test}
    assert [by_question[r["question"]] for r in ROWS] == [
        shuffled(row_to_item(r, i, "f"), 0) for i, r in enumerate(ROWS)
    ]


# -- prompt and scoring ----------------------------------------------------------------------------------
def test_user_prompt_lists_lettered_options():
    text = user_prompt(ITEM)
    assert "about astronomy" in text and "A. Mars\nB. Jupiter\nC. Venus\nD. Mercury" in text
    five = user_prompt(MCQAItem("q", "", ("a", "b", "c", "d", "e"), 4))
    assert "E. e" in five and "(A to E)" in five and "multiple choice question about" not in five


@pytest.mark.parametrize(
    "content, letter",
    [("B", "B"), ("b", "B"), ("(B)", "B"), ("B)", "B"), ("B.", "B"), (" \\text{B} ", "B"), ("\\textbf{(b)}", "B"),
     ("A, B", None), ("AB", None), ("Jupiter", None), ("B. Jupiter", None), ("", None), ("2", None)],
)  # fmt: skip
def test_box_letter(content, letter):
    assert box_letter(content) == letter


@pytest.mark.parametrize(
    "reply, score",
    [
        ("<think>Jupiter is the largest.</think>\\boxed{B}", 1.0),
        ("\\boxed{(b)}", 1.0),
        ("<think>x</think>\\boxed{\\text{B}} - that is \\boxed{B)}", 1.0),  # one letter, two forms
        ("<think>x</think>\\boxed{C}", -1.0),
        ("<think>x</think>\\boxed{A, B}", -1.0),  # several letters in one box
        ("<think>x</think>\\boxed{AB}", -1.0),
        ("<think>x</think>\\boxed{B} or maybe \\boxed{C}", -1.0),  # two different letters
        ("<think>x</think>\\boxed{Jupiter}", -1.0),  # the option's text, not its letter
        ("<think>it is \\boxed{B}</think>I cannot decide.", -1.0),  # letter only in the think block
        ("<think>x</think>The answer is B.", -1.0),  # unboxed
        ("<think>still weighing \\boxed{B}", -1.0),  # unclosed think block
        ("", -1.0),
    ],
)
def test_score_reply(reply, score):
    env = MCQAThinkingEnv.__new__(MCQAThinkingEnv)  # scoring needs no tokenizer or server
    assert env.score_reply(reply, ITEM) == score


def test_a_word_after_the_answer_phrase_is_not_a_letter():
    # The original read "The answer is clearly \boxed{B}" with its phrase patterns as the letters C
    # (the first letter of "clearly") and B, a conflict it scored as wrong. Only the box counts here.
    assert reply_letter("<think>x</think>The answer is clearly \\boxed{B}.") == "B"
    assert reply_letter("<think>x</think>The answer is definitely Jupiter.") is None


def test_any_number_of_choices():
    many = MCQAItem("q", "", tuple(f"option {i}" for i in range(10)), 9)
    assert many.letter == "J" and reply_letter("\\boxed{j}") == "J"
    env = MCQAThinkingEnv.__new__(MCQAThinkingEnv)
    assert env.score_reply("\\boxed{J}", many) == 1.0 and env.score_reply("\\boxed{I}", many) == -1.0


# -- process and evaluate --------------------------------------------------------------------------------
@pytest.mark.parametrize("shuffle", [False, True])
def test_process_writes_groups(scripted, shuffle):
    args = ["--env.dataset_path", SAMPLE, "--env.group_size", "4", "--env.total_steps", "3",
            "--env.max_tokens", "64", "--env.shuffle_choices", str(shuffle).lower()]  # fmt: skip
    groups = scripted.process(MCQAThinkingEnv, args, alternating_responder)
    check_groups(groups, 3, [-1.0, -1.0, 1.0, 1.0])
    for group in groups:
        question = group["messages"][0][1]["content"]
        item = _item_of(question)
        for messages, score in zip(group["messages"], group["scores"], strict=True):
            assert (f"\\boxed{{{item.letter}}}" in messages[-1]["content"]) == (score == 1.0)


def test_evaluate_reports_accuracy(scripted):
    metrics, samples, out = scripted.evaluate(
        MCQAThinkingEnv, ["--env.dataset_path", SAMPLE, "--env.max_tokens", "64"], first_rows_right_responder
    )
    assert metrics["eval/percent_correct"] == pytest.approx(4 / 10)
    assert metrics["eval/mean_score"] == pytest.approx((4 - 6) / 10)
    assert len(samples) == 10
    assert [s["correct"] for s in samples] == [i < 4 for i in range(10)]
    assert samples[1]["gold_letter"] == "C" and samples[1]["subject"] == "college_biology"
    assert "mcqa evaluation: percent_correct=0.4000" in out
