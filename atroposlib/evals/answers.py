"""Reading the chosen letter of a multiple-choice reply.

A reply may open with one ``<think>...</think>`` block; nothing inside it counts, and a reply whose
``<think>`` never closes has no answer (:func:`atroposlib.utils.replies.answer_section`). After the
reasoning, the letter is read from the *explicit* answer forms:

* ``<answer>B</answer>`` (also ``<answer>(B)</answer>``, ``<answer>Final answer: B</answer>`` or the exact
  text of one option);
* ``\\boxed{B}`` (also ``\\boxed{(B)}``, ``\\boxed{\\text{B}}``);
* ``Answer: B``, ``The answer is (B)``, ``Final answer: B`` (an upper-case letter).

Every explicit answer in the reply must name the same one letter: a reply naming two letters
(``<answer>A or B</answer>``, ``\\boxed{A}`` beside ``Answer: C``, ``Answer: A, B``) has no answer.
Without any explicit form, a reply whose last line is a lone letter (``B``, ``(B)``, ``**B.**``, ``I choose
B.``) chooses that letter. A letter past the last option is no answer.

:func:`extract_letter` returns the letter (or None) and how it was found, which ``samples.jsonl`` keeps.
"""

from __future__ import annotations

import re
import string
from collections.abc import Sequence
from typing import Optional

from atroposlib.utils.replies import THINK_OPEN, answer_section, boxed_answers

LETTERS = string.ascii_uppercase

#: ``method`` values of :func:`extract_letter` for a reply without an answer.
NO_ANSWER_METHODS = ("empty", "unclosed_think", "ambiguous", "no_answer", "out_of_range")

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_WRAPPER = re.compile(r"^\\(?:text|textbf|textrm|mathrm|mathbf|mbox)\s*\{(.*)\}$", re.DOTALL)
_PREFIX = re.compile(
    r"^(?:(?:the|my)\s+)?(?:final\s+|correct\s+|best\s+)?(?:answer|choice|option)(?:\s+is)?\s*[:\-]?\s*",
    re.IGNORECASE,
)
_LONE = re.compile(r"^[\s*_]*\(?\s*([A-Za-z])\s*\)?[\s*_.:)]*$")
# "Answer: B", "answer is (B)", "Final Answer: **C**" ... then what follows on the line.
_PHRASE = re.compile(
    r"\banswer\b(?:\s+is)?\s*(?::|\bis\b)?\s*[*_]*\s*\(?([A-Z])\)?(?![A-Za-z0-9'])(?=[*_]*([^\n]*))",
    re.IGNORECASE,
)
_JOINED = re.compile(r"^\s*[.]?\s*(?:,|/|&|\bor\b|\band\b)\s*[*_]*\(?([A-Z])\)?(?![A-Za-z0-9'])")
_TRAILING = re.compile(r"(?:^|[\s:*_])\(?([A-Z])\)?[\s*_.)!]*$")
_STANDALONE = re.compile(r"(?<![A-Za-z0-9'])([A-Z])(?![A-Za-z0-9'])")


def _norm(text: str) -> str:
    return re.sub(r"\s+", " ", text).strip().lower()


def _unwrap(text: str) -> str:
    text = text.strip()
    while (match := _WRAPPER.match(text)) is not None:
        text = match.group(1).strip()
    return text


def _letters_in(content: str, choices: Sequence[str]) -> set[str]:
    """The letters one answer (a tag's or a box's content) names: a lone letter (any case), the exact text
    of one option, else every standalone upper-case letter in it (several letters: a hedge)."""
    text = _unwrap(content)
    text = _PREFIX.sub("", text, count=1).strip()
    lone = _LONE.match(text)
    if lone:
        return {lone.group(1).upper()}
    if text:
        normalized = _norm(text)
        matches = {LETTERS[i] for i, choice in enumerate(choices) if _norm(str(choice)) == normalized}
        if len(matches) == 1:
            return matches
    return set(_STANDALONE.findall(text))


def _phrase_letters(section: str, valid: str) -> set[str]:
    """Letters named by answer phrases; a letter past the options ("Answer: I think B") is a word."""
    letters: set[str] = set()
    for match in _PHRASE.finditer(section):
        letter = match.group(1)
        if letter not in valid:
            continue  # "the answer is a ..." is an article, not option A
        letters.add(letter)
        rest = match.group(2)
        while (joined := _JOINED.match(rest)) is not None:  # "Answer: A or B", "Answer: A, C"
            letters.add(joined.group(1))
            rest = rest[joined.end() :]
    return letters


def extract_letter(
    reply: Optional[str], num_choices: int, choices: Sequence[str] = ()
) -> tuple[Optional[str], str]:
    """``(letter, method)``: the option letter a reply chooses (see the module docstring) and how it was
    read: ``answer_tag``, ``boxed``, ``answer_phrase`` or ``trailing_letter``; with no letter, one of
    :data:`NO_ANSWER_METHODS`.

    ``num_choices`` bounds the valid letters; ``choices`` (the option texts, in letter order) lets an answer
    tag or box name an option by its text.
    """
    if not reply or not reply.strip():
        return None, "empty"
    section = answer_section(reply)
    if section is None:
        return None, "unclosed_think" if THINK_OPEN in reply else "no_answer"
    valid = LETTERS[:num_choices]
    found: dict[str, set[str]] = {}
    tags = _ANSWER_TAG.findall(section)
    if tags:
        found["answer_tag"] = set().union(*(_letters_in(tag, choices) for tag in tags))
    boxes = boxed_answers(section)
    if boxes:
        found["boxed"] = set().union(*(_letters_in(box, choices) for box in boxes))
    phrases = _phrase_letters(_ANSWER_TAG.sub(" ", section), valid)
    if phrases:
        found["answer_phrase"] = phrases
    if found:
        named = set().union(*found.values())
        if len(named) != 1:
            return None, "ambiguous" if named else "no_answer"
        letter = named.pop()
        if letter not in valid:
            return None, "out_of_range"
        return letter, next(m for m, letters in found.items() if letter in letters)
    lines = [line for line in section.strip().splitlines() if line.strip()]
    trailing = _TRAILING.search(lines[-1]) if lines else None
    if trailing is None or trailing.group(1) not in valid:
        return None, "no_answer"
    return trailing.group(1), "trailing_letter"


__all__ = ["LETTERS", "NO_ANSWER_METHODS", "extract_letter"]
