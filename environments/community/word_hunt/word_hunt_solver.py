"""Word Hunt boards: generating them, finding every dictionary word they hold, and scoring a list of words.

A word is traced through horizontally, vertically or diagonally adjacent cells, each cell used at most once,
without wrapping around the edges. Points per word follow GamePigeon's Word Hunt (3 letters 100, 4 letters 400,
5 letters 800, 6 or more ``1400 + 400 * (length - 6)``) or, when not official, ``2 ** (length - 2)``.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from atroposlib.envs.data_loading import DatasetError

Board = tuple[tuple[str, ...], ...]

#: English letter frequencies (percent) used when boards favour common letters
LETTER_FREQUENCIES = {
    "E": 12.0, "A": 8.2, "R": 6.7, "I": 6.3, "O": 6.1, "T": 5.9, "N": 5.7, "S": 5.3, "L": 4.0, "C": 3.8,
    "U": 3.0, "D": 2.8, "P": 2.7, "M": 2.4, "H": 2.3, "G": 2.0, "B": 1.5, "F": 1.4, "Y": 1.4, "W": 1.3,
    "K": 0.8, "V": 0.6, "X": 0.2, "Z": 0.1, "J": 0.1, "Q": 0.1,
}  # fmt: skip
VOWELS = frozenset("AEIOU")


def word_points(length: int, official: bool = True) -> int:
    """The points of a word of ``length`` letters."""
    if not official:
        return 2 ** (length - 2)
    return {3: 100, 4: 400, 5: 800}.get(length, 1400 + 400 * (length - 6) if length >= 6 else 0)


def generate_board(rng: random.Random, size: int, vowel_weight: float, common_letters: bool) -> Board:
    """A ``size`` x ``size`` board: each cell a vowel with probability ``vowel_weight``, else a consonant,
    letters drawn by English frequency when ``common_letters`` (else uniformly)."""
    weights = LETTER_FREQUENCIES if common_letters else dict.fromkeys(LETTER_FREQUENCIES, 1.0)
    vowels = [c for c in weights if c in VOWELS]
    consonants = [c for c in weights if c not in VOWELS]

    def cell() -> str:
        pool = vowels if rng.random() < vowel_weight else consonants
        return rng.choices(pool, weights=[weights[c] for c in pool])[0]

    return tuple(tuple(cell() for _ in range(size)) for _ in range(size))


@dataclass
class Dictionary:
    """The valid words (upper case, letters only, within the length limits) and all their prefixes."""

    words: frozenset[str]
    prefixes: frozenset[str] = field(init=False)

    def __post_init__(self) -> None:
        self.prefixes = frozenset(w[:i] for w in self.words for i in range(1, len(w) + 1))

    @classmethod
    def load(cls, path: str | Path, min_length: int, max_length: int) -> Dictionary:
        """The words of a file with one word per line; :class:`DatasetError` when it is missing or empty."""
        path = Path(path)
        if not path.is_file():
            raise DatasetError(f"{path}: no such dictionary file (one word per line)")
        words = {
            w.strip().upper()
            for w in path.read_text(encoding="utf-8", errors="replace").splitlines()
            if w.strip().isalpha() and w.strip().isascii()
        }
        words = {w for w in words if min_length <= len(w) <= max_length}
        if not words:
            raise DatasetError(f"{path}: no words of {min_length}-{max_length} letters")
        return cls(frozenset(words))


def _neighbours(size: int, r: int, c: int) -> Iterable[tuple[int, int]]:
    for dr in (-1, 0, 1):
        for dc in (-1, 0, 1):
            if (dr or dc) and 0 <= r + dr < size and 0 <= c + dc < size:
                yield r + dr, c + dc


def can_trace(board: Board, word: str) -> bool:
    """Whether ``word`` (upper case) has a path of adjacent, unrepeated cells on ``board``."""
    size = len(board)

    def walk(r: int, c: int, i: int, used: frozenset) -> bool:
        if board[r][c] != word[i]:
            return False
        if i == len(word) - 1:
            return True
        used = used | {(r, c)}
        return any(walk(nr, nc, i + 1, used) for nr, nc in _neighbours(size, r, c) if (nr, nc) not in used)

    return bool(word) and any(walk(r, c, 0, frozenset()) for r in range(size) for c in range(size))


def solve_board(board: Board, dictionary: Dictionary) -> frozenset[str]:
    """Every dictionary word that can be traced on ``board``."""
    size, found = len(board), set()

    def walk(r: int, c: int, prefix: str, used: frozenset) -> None:
        prefix += board[r][c]
        if prefix not in dictionary.prefixes:
            return
        if prefix in dictionary.words:
            found.add(prefix)
        used = used | {(r, c)}
        for nr, nc in _neighbours(size, r, c):
            if (nr, nc) not in used:
                walk(nr, nc, prefix, used)

    for r in range(size):
        for c in range(size):
            walk(r, c, "", frozenset())
    return frozenset(found)


@dataclass(frozen=True)
class HuntResult:
    """A scored answer: its ``points``, the ``best`` points the board allows, the words that counted and
    those that did not."""

    points: int
    best: int
    valid: tuple[str, ...]
    invalid: tuple[str, ...]

    @property
    def normalized(self) -> float:
        """``points / best`` (0.0 for a board without words)."""
        return self.points / self.best if self.best else 0.0


def score_words(
    words: Sequence[str],
    board: Board,
    dictionary: Dictionary,
    official: bool = True,
    validate_words: bool = True,
    validate_paths: bool = True,
    min_length: int = 3,
) -> HuntResult:
    """Score the distinct ``words`` (any case) on ``board``: a word counts when it is long enough, in the
    dictionary (``validate_words``) and traceable (``validate_paths``)."""
    possible = solve_board(board, dictionary)
    submitted = {w.upper() for w in words if w}
    valid = {
        w
        for w in submitted
        if len(w) >= min_length
        and (not validate_words or w in dictionary.words)
        and (
            w in possible
            or (not validate_paths and w in dictionary.words)
            or (not validate_words and can_trace(board, w))
        )
    }
    return HuntResult(
        points=sum(word_points(len(w), official) for w in valid),
        best=sum(word_points(len(w), official) for w in possible),
        valid=tuple(sorted(valid)),
        invalid=tuple(sorted(submitted - valid)),
    )


def reply_words(answer: str) -> list[str]:
    """The words of an answer: runs of ASCII letters (commas, spaces, numbering and the like separate them)."""
    return re.findall(r"[A-Za-z]+", answer)
