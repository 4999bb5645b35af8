"""Reading the chosen option of a multiple-choice reply: a letter (``B``), a number (``2``) or a word
(``yes`` / ``no`` / ``maybe``).

A reply may open with one ``<think>...</think>`` block; nothing inside it counts, and a reply whose
``<think>`` never closes has no answer (:func:`atroposlib.utils.replies.answer_section`). After the
reasoning, the option is read from the *explicit* answer forms:

* ``<answer>B</answer>`` (also ``<answer>(B)</answer>``, ``<answer>Final answer: B</answer>`` or the exact
  text of one option);
* ``\\boxed{B}`` (also ``\\boxed{(B)}``, ``\\boxed{\\text{B}}``);
* ``Answer: B``, ``The answer is (B)``, ``Final answer: B`` (a letter must be upper case here: "the answer
  is a ..." names no option).

Every explicit answer in the reply must name the same one option: a reply naming two
(``<answer>A or B</answer>``, ``\\boxed{A}`` beside ``Answer: C``, ``Answer: A, B``) has no answer. Without any
explicit form, a reply whose last line ends in a lone option (``B``, ``(B)``, ``**B.**``, ``I choose B.``)
chooses it. An option past the last one (``<answer>E</answer>`` of four) is no answer.

:func:`extract_letter`, :func:`extract_number` and :func:`extract_word` return the option (or None) and how
it was read, which ``samples.jsonl`` keeps.
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Optional

from atroposlib.utils.replies import THINK_OPEN, answer_section, boxed_answers

LETTERS = string.ascii_uppercase

#: ``method`` values for a reply without an answer.
NO_ANSWER_METHODS = ("empty", "unclosed_think", "ambiguous", "no_answer", "out_of_range")

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_WRAPPER = re.compile(r"^\\(?:text|textbf|textrm|mathrm|mathbf|mbox)\s*\{(.*)\}$", re.DOTALL)
_PREFIX = re.compile(
    r"^(?:(?:the|my)\s+)?(?:final\s+|correct\s+|best\s+)?(?:answer|choice|option)(?:\s+is)?\s*[:\-]?\s*",
    re.IGNORECASE,
)
_NOT_WORD = r"(?![A-Za-z0-9'])"


@dataclass(frozen=True)
class _Kind:
    """How options are named: ``token`` matches one (any letter, any number ...), ``phrase_token`` the form
    accepted after "Answer:" and at the end of a reply; ``fold`` normalises a match."""

    token: str
    phrase_token: str
    fold: str  # "upper" or "lower"


_LETTER = _Kind(r"[A-Za-z]", r"[A-Z]", "upper")
_NUMBER = _Kind(r"\d{1,2}", r"\d{1,2}", "upper")


def _word_kind(words: Sequence[str]) -> _Kind:
    alternation = "|".join(re.escape(w) for w in sorted(words, key=len, reverse=True))
    return _Kind(f"(?i:{alternation})", f"(?i:{alternation})", "lower")


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def _unwrap(text: str) -> str:
    text = text.strip()
    while (match := _WRAPPER.match(text)) is not None:
        text = match.group(1).strip()
    return text


def _fold(kind: _Kind, value: str) -> str:
    return value.upper() if kind.fold == "upper" else value.lower()


def _named_in(kind: _Kind, content: str, labels: Sequence[str], choices: Sequence[str]) -> set[str]:
    """The options one answer (a tag's or a box's content) names: a lone option (any case), the exact text
    of one option, else every standalone option in it (several: a hedge)."""
    text = _PREFIX.sub("", _unwrap(content), count=1).strip()
    lone = re.fullmatch(rf"[\s*_]*\(?\s*({kind.token})\s*\)?[\s*_.:)]*", text)
    if lone:
        return {_fold(kind, lone.group(1))}
    if text:
        normalized = _norm(text)
        matches = {
            labels[i] for i, choice in enumerate(choices[: len(labels)]) if _norm(str(choice)) == normalized
        }
        if len(matches) == 1:
            return matches
    found = re.findall(rf"(?<![A-Za-z0-9'])({kind.phrase_token}){_NOT_WORD}", text)
    return {_fold(kind, f) for f in found if _fold(kind, f) in labels}


def _phrase_named(kind: _Kind, section: str, labels: Sequence[str]) -> set[str]:
    """Options named by answer phrases ("Answer: B", "the answer is (B)", "Answer: A or B"); a token that is
    no option ("Answer: I think B") is a word, not an answer."""
    phrase = re.compile(
        rf"\banswer\b[*_]*(?:\s+is)?\s*(?::|\bis\b)?\s*[*_]*\s*\(?({kind.phrase_token})\)?{_NOT_WORD}(?=[*_]*([^\n]*))",
        re.IGNORECASE if kind.fold == "lower" else 0,
    )
    phrase_ci = re.compile(r"(?i)answer")  # "Answer"/"answer"/"ANSWER" all count
    joined = re.compile(rf"^\s*[.]?\s*(?:,|/|&|\bor\b|\band\b)\s*[*_]*\(?({kind.phrase_token})\)?{_NOT_WORD}")
    named: set[str] = set()
    for match in phrase.finditer(_case_free_answer(section, phrase_ci)):
        option = _fold(kind, match.group(1))
        if option not in labels:
            continue
        named.add(option)
        rest = match.group(2)
        while (more := joined.match(rest)) is not None:
            named.add(_fold(kind, more.group(1)))
            rest = rest[more.end() :]
    return named


def _case_free_answer(section: str, pattern: re.Pattern) -> str:
    # The phrase regex is case-sensitive for letters (so "is a" is no option A); the word "answer" is not.
    return pattern.sub("answer", section)


def _extract(
    reply: Optional[str], kind: _Kind, labels: Sequence[str], choices: Sequence[str]
) -> tuple[Optional[str], str]:
    if not reply or not reply.strip():
        return None, "empty"
    section = answer_section(reply)
    if section is None:
        return None, "unclosed_think" if THINK_OPEN in reply else "no_answer"
    found: dict[str, set[str]] = {}
    tags = _ANSWER_TAG.findall(section)
    if tags:
        found["answer_tag"] = set().union(*(_named_in(kind, tag, labels, choices) for tag in tags))
    boxes = boxed_answers(section)
    if boxes:
        found["boxed"] = set().union(*(_named_in(kind, box, labels, choices) for box in boxes))
    phrases = _phrase_named(kind, _ANSWER_TAG.sub(" ", section), labels)
    if phrases:
        found["answer_phrase"] = phrases
    if found:
        named = set().union(*found.values())
        if len(named) != 1:
            return None, "ambiguous" if named else "no_answer"
        option = named.pop()
        if option not in labels:
            return None, "out_of_range"
        return option, next(m for m, options in found.items() if option in options)
    lines = [line for line in section.strip().splitlines() if line.strip()]
    trailing = (
        re.search(rf"(?:^|[\s:*_])\(?({kind.phrase_token})\)?[\s*_.)!]*$", lines[-1]) if lines else None
    )
    if trailing is None or _fold(kind, trailing.group(1)) not in labels:
        return None, "no_answer"
    return _fold(kind, trailing.group(1)), "trailing"


def extract_letter(
    reply: Optional[str], num_choices: int, choices: Sequence[str] = ()
) -> tuple[Optional[str], str]:
    """``(letter, method)``: the option letter a reply chooses (see the module docstring) and how it was read:
    ``answer_tag``, ``boxed``, ``answer_phrase`` or ``trailing``; with no letter, one of
    :data:`NO_ANSWER_METHODS`. ``choices`` (the option texts in letter order) lets an answer tag or box name
    an option by its text."""
    return _extract(reply, _LETTER, LETTERS[:num_choices], choices)


def extract_number(
    reply: Optional[str], num_choices: int, choices: Sequence[str] = ()
) -> tuple[Optional[str], str]:
    """As :func:`extract_letter` for options numbered ``1`` to ``num_choices``; the number is returned as a
    string (``"2"``)."""
    return _extract(reply, _NUMBER, [str(i) for i in range(1, num_choices + 1)], choices)


def extract_word(reply: Optional[str], words: Sequence[str]) -> tuple[Optional[str], str]:
    """As :func:`extract_letter` for options that are words (``yes`` / ``no`` / ``maybe``, any case); the word
    is returned in lower case."""
    labels = [w.lower() for w in words]
    return _extract(reply, _word_kind(labels), labels, ())


__all__ = ["LETTERS", "NO_ANSWER_METHODS", "extract_letter", "extract_number", "extract_word"]
