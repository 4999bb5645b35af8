"""WikiText continuation items and the original's text-similarity score.

An item is a passage split into a prompt and the next words (:func:`split_passage`); a continuation is
scored by the Jaccard similarity of its lower-cased word set with the real next words' and by how close its
length in characters is to theirs (:func:`similarity_score`).
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any, Optional

from atroposlib.envs.data_loading import DatasetError

#: passages need this many words to be split into a prompt and a target of at least five words each
MIN_WORDS = 11
TARGET_WORDS = 20


@dataclass(frozen=True)
class Continuation:
    """A prompt (the passage's first words) and the target (the words after it)."""

    prompt: str
    target: str


def passages(rows: list[dict[str, Any]], source: str, max_chars: int) -> list[str]:
    """The usable passages of rows with a ``text`` field: cut to ``max_chars`` and of at least
    :data:`MIN_WORDS` words (WikiText's blank lines and headings are left out); :class:`DatasetError`
    naming the source and row for a missing or non-text field, or when none is usable."""
    texts = []
    for index, row in enumerate(rows):
        text = row.get("text")
        if not isinstance(text, str):
            problem = "missing field" if text is None else "not text in field"
            raise DatasetError(f"{source}: row {index}: {problem} 'text'")
        text = text.strip()[:max_chars]
        if len(text.split()) >= MIN_WORDS:
            texts.append(text)
    if not texts:
        raise DatasetError(f"{source}: no passage of at least {MIN_WORDS} words")
    return texts


def split_passage(text: str, rng: Optional[random.Random] = None) -> Continuation:
    """A training split at a random word (5 to 20, leaving 5 after it) with the next 20 words as target,
    or, without ``rng``, the evaluation split: the first half of the words and the rest."""
    words = text.split()
    if rng is None:
        cut = len(words) // 2
        return Continuation(" ".join(words[:cut]), " ".join(words[cut:]))
    cut = rng.randint(5, min(len(words) - 5, TARGET_WORDS))
    return Continuation(" ".join(words[:cut]), " ".join(words[cut : cut + TARGET_WORDS]))


def jaccard(completion: str, target: str) -> float:
    """Jaccard similarity of the lower-cased whitespace-separated word sets (0 when either is empty)."""
    ours, theirs = set(completion.lower().split()), set(target.lower().split())
    if not ours or not theirs:
        return 0.0
    return len(ours & theirs) / len(ours | theirs)


def length_score(completion: str, target: str) -> float:
    """1 at the target's length in characters, falling linearly to 0 at none or twice it."""
    ratio = len(completion) / max(len(target), 1)
    return max(0.0, 1.0 - abs(1.0 - ratio))


def similarity_score(completion: str, target: str) -> float:
    """The original's perplexity proxy: 0.7 x :func:`jaccard` + 0.3 x :func:`length_score`."""
    return 0.7 * jaccard(completion, target) + 0.3 * length_score(completion, target)
