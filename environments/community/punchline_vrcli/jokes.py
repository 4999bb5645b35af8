"""The jokes: question-and-answer posts of Reddit's joke subreddits (``SocialGrep/one-million-reddit-jokes``).

A post is a joke here when, as in the original, its title is the setup and its body the punchline: the body is
one line without ``;`` (not ``[removed]`` / ``[deleted]``), the title a question starting with ``What``,
``Why`` or ``How`` and free of ``(`` and ``[``, and the post has at least ``min_score`` upvotes. Local files
(``--env.dataset_path``) use the hub set's schema: ``title``, ``selftext`` (text or empty) and ``score``;
other columns are ignored.
"""

from __future__ import annotations

from collections.abc import Iterable
from numbers import Real
from typing import Any, Optional, TypedDict

from atroposlib.envs.data_loading import DatasetError, load_rows

HUB_SET = "SocialGrep/one-million-reddit-jokes"
FIELDS = ("title", "selftext", "score")
_STARTS = ("What", "Why", "How")


class PunchlineRow(TypedDict):
    """One joke: the setup (``question``) and the real punchline (``answer``)."""

    question: str
    answer: str


def is_joke(title: Optional[str], selftext: Optional[str], score: Optional[float], min_score: int) -> bool:
    """Whether a post passes the question-and-answer filter (see the module docstring)."""
    title, selftext = (title or "").strip(), selftext or ""
    return bool(
        selftext.strip()
        and (score or 0) >= min_score
        and selftext not in ("[removed]", "[deleted]")
        and title.endswith("?")
        and title.startswith(_STARTS)
        and "(" not in title
        and "[" not in title
        and not any(mark in selftext for mark in ("\n", "\r", ";"))
    )


def check_post(row: dict[str, Any], index: int, source: str) -> None:
    """Raise :class:`DatasetError` naming the source, row and field when a post lacks a field or holds a
    value of the wrong type (texts may be empty or null, the score must be a number)."""
    for field in FIELDS:
        if field not in row:
            raise DatasetError(f"{source}: row {index}: missing field {field!r}")
    for field in ("title", "selftext"):
        if row[field] is not None and not isinstance(row[field], str):
            raise DatasetError(f"{source}: row {index}: field {field!r} must be text")
    score = row["score"]
    if score is not None and (isinstance(score, bool) or not isinstance(score, Real)):
        raise DatasetError(f"{source}: row {index}: field 'score' must be a number")


def jokes_from_posts(posts: Iterable[dict[str, Any]], source: str, min_score: int) -> list[PunchlineRow]:
    """The jokes among checked posts (:func:`check_post`, :func:`is_joke`); :class:`DatasetError` when none
    passes the filter."""
    jokes: list[PunchlineRow] = []
    for index, row in enumerate(posts):
        check_post(row, index, source)
        if is_joke(row["title"], row["selftext"], row["score"], min_score):
            jokes.append({"question": row["title"].strip(), "answer": row["selftext"].strip()})
    if not jokes:
        raise DatasetError(
            f"{source}: no question-and-answer jokes with at least {min_score} upvotes (see the filter in "
            "jokes.py)"
        )
    return jokes


def _hub_posts(min_score: int):
    """The hub loader: the training split's columns of :data:`FIELDS`, filtered in Arrow batches (a million
    posts, of which a few thousand are jokes)."""

    def load():
        from datasets import load_dataset

        data = load_dataset(HUB_SET, split="train").select_columns(list(FIELDS))
        return data.filter(
            lambda batch: [
                is_joke(*post, min_score) for post in zip(*(batch[f] for f in FIELDS), strict=True)
            ],
            batched=True,
        )

    return load


def load_jokes(path: Optional[str], min_score: int) -> list[PunchlineRow]:
    """The jokes of a local file in the hub set's schema, or of the hub set when ``path`` is None."""
    posts = load_rows(path, _hub_posts(min_score), [], HUB_SET)
    return jokes_from_posts(posts, str(path or HUB_SET), min_score)
