"""Word Hunt: tracing and solving boards, scoring word lists, generated boards, ``process`` and ``evaluate``."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from environments.community.word_hunt.word_hunt_env import (
    DEFAULT_DICTIONARY,
    WordHuntBoard,
    WordHuntEnv,
    WordHuntEnvConfig,
    board_prompt,
)
from environments.community.word_hunt.word_hunt_solver import (
    Dictionary,
    can_trace,
    score_words,
    solve_board,
    word_points,
)
from tests.helpers.cli_runs import FIXTURES
from tests.helpers.single_turn_runs import offline_env, prompt_text, setup_failure

WORDS = FIXTURES / "community" / "word_hunt_words.txt"
# C A T S
# O Z Q X
# A T Q X
# S Q Q X
BOARD = (("C", "A", "T", "S"), ("O", "Z", "Q", "X"), ("A", "T", "Q", "X"), ("S", "Q", "Q", "X"))
DICT = Dictionary.load(WORDS, 3, 16)
# traceable dictionary words (STOAT from the bottom-left S); not ACT (C and T do not touch), SCAT, TACOS
ON_BOARD = {"CAT", "CATS", "COAT", "COATS", "OAT", "OATS", "TACO", "STOAT"}


def test_tracing_and_solving():
    assert can_trace(BOARD, "CATS") and can_trace(BOARD, "COATS") and can_trace(BOARD, "ZQX")
    assert not can_trace(BOARD, "SCAT")  # S and C do not touch (no wrapping)
    assert not can_trace(BOARD, "CAC")  # a cell is used once
    assert solve_board(BOARD, DICT) == ON_BOARD
    assert "AT" not in DICT.words  # shorter than min_word_length


def test_points():
    assert [word_points(n) for n in (3, 4, 5, 6, 8)] == [100, 400, 800, 1400, 2200]
    assert [word_points(n, official=False) for n in (3, 4, 6)] == [2, 4, 16]


BEST = 100 * 2 + 400 * 4 + 800 * 2  # CAT OAT; CATS COAT OATS TACO; COATS STOAT


@pytest.mark.parametrize(
    ("reply", "points"),
    [
        ("CAT, CATS, STOAT, COAT, COATS, OAT, OATS, TACO", BEST),
        ("<think>corner first</think>cats; coats\n1. taco", 400 + 800 + 400),  # any case, any separators
        ("CAT, cat, Cat", 100),  # each word once
        ("CATS, ACT, SCAT, DOG, ZQX, AT", 400),  # not traceable, not on the board, not a word, too short
        ("<think>CATS COATS</think>", 0),  # only inside the reasoning
        ("<think>never closed CATS", 0),
        ("", 0),
    ],
)
def test_scoring(tiny_model_dir, reply, points):
    env = offline_env(WordHuntEnv, tiny_model_dir, dictionary_path=str(WORDS))
    env.dictionary = DICT
    item = WordHuntBoard(BOARD, "fixed")
    assert env.result(reply, item).points == points and env.result(reply, item).best == BEST
    assert env.score_reply(reply, item) == pytest.approx(points / BEST)


def test_word_and_path_checks_can_be_turned_off():
    assert score_words(["ZQX"], BOARD, DICT, validate_words=False).valid == ("ZQX",)
    assert score_words(["SCAT"], BOARD, DICT, validate_paths=False).valid == ("SCAT",)
    assert score_words(["SCAT", "ZQX"], BOARD, DICT).valid == ()


async def test_boards_are_seeded_and_shuffled_per_epoch(tiny_model_dir):
    env = offline_env(WordHuntEnv, tiny_model_dir, boards_per_epoch=5, eval_board_count=3)
    await env.setup()
    first = [(await env.get_next_item()).seed for _ in range(10)]
    assert sorted(first[:5]) == [f"train:{i}" for i in range(5)] and sorted(first[5:]) == [
        f"train:{i}" for i in range(5, 10)
    ]
    assert first[:5] != [f"train:{i}" for i in range(5)]  # shuffled
    again = offline_env(WordHuntEnv, tiny_model_dir, boards_per_epoch=5, shuffle_boards=False)
    await again.setup()
    assert [(await again.get_next_item()).seed for _ in range(3)] == ["train:0", "train:1", "train:2"]
    assert env.board("train:3") == again.board("train:3") and len(env.test) == 3
    assert all(len(row) == 4 for row in env.test[0].board)
    vowels = offline_env(WordHuntEnv, tiny_model_dir, vowel_weight=1.0)
    assert set("".join("".join(r) for r in vowels.board("x").board)) <= set("AEIOU")


def test_prompt_styles():
    cfg = WordHuntEnvConfig(prompt_style="both", include_instructions=False, use_official_scoring=False)
    text = board_prompt(BOARD, cfg)
    assert "C A T S\nO Z Q X" in text and "Letters: C A T S O Z Q X" in text
    assert "comma-separated" not in text and "3 letters: 2" in text
    assert "Board:" not in board_prompt(BOARD, WordHuntEnvConfig(prompt_style="text_description"))
    with pytest.raises(ValidationError, match="min_word_length"):
        WordHuntEnvConfig(min_word_length=5, max_word_length=4)


async def test_missing_dictionary(tiny_model_dir, tmp_path):
    env = offline_env(WordHuntEnv, tiny_model_dir, dictionary_path=str(tmp_path / "none.txt"))
    await setup_failure(env, "none.txt: no such dictionary file")


def _board_of(prompt) -> tuple:
    text = prompt_text(prompt)
    rows = text.split("Board:\n", 1)[1].split("\n\n", 1)[0].splitlines()
    return tuple(tuple(row.split()) for row in rows)


def _responder(dictionary: Dictionary):
    """Even choices list every word of the board (the solver's answer), odd ones only the shortest."""

    def respond(prompt, index):
        words = sorted(solve_board(_board_of(prompt), dictionary), key=len)
        chosen = words if index % 2 == 0 else words[:1]
        return "<think>Tracing.</think>" + ", ".join(chosen)

    return respond


def test_process_plays_generated_boards(scripted):
    groups = scripted.process(
        WordHuntEnv, ["--env.group_size", "2", "--env.total_steps", "2", "--env.max_tokens", "256"],
        _responder(Dictionary.load(DEFAULT_DICTIONARY, 3, 16)),
    )  # fmt: skip
    assert len(groups) == 2
    for group in groups:
        assert max(group["scores"]) == 1.0 and 0.0 < min(group["scores"]) < 1.0
        assert "Found words:" in group["messages"][0][0]["content"]


def test_evaluate_reports_points(scripted):
    dictionary = Dictionary.load(DEFAULT_DICTIONARY, 3, 16)
    evaluation = scripted.evaluation(
        WordHuntEnv, ["--env.eval_board_count", "3", "--env.max_tokens", "256"], _responder(dictionary)
    )
    metrics, samples = evaluation.metrics, evaluation.samples
    bests = [s["best"] for s in samples]
    assert len(samples) == 3 and [s["points"] for s in samples] == bests  # every word found
    assert metrics["eval/percent_correct"] == metrics["eval/mean_score"] == 1.0
    assert metrics["eval/total_score"] == sum(bests) and metrics["eval/avg_score"] == pytest.approx(
        sum(bests) / 3
    )
