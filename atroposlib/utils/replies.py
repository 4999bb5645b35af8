"""Reading a model's reply by the environments' conventions.

A reply may open with one ``<think>...</think>`` block; nothing inside it counts. (Chat templates that open
the block in the prompt leave only the closing tag in the reply: that form is accepted too.) The answer is
then read from the rest: math and multiple-choice answers from ``\\boxed{...}`` (braces may nest), code from
the last fenced block. A reply whose reasoning never closes, or that has several think blocks, has no answer.
"""

from __future__ import annotations

import re
from typing import Optional

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
_BOXED = re.compile(r"\\(?:boxed|fbox)\s*\{")
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)


def answer_section(reply: str) -> Optional[str]:
    """The part of ``reply`` after its reasoning, or None when the reasoning is malformed.

    Malformed: a ``<think>`` that never closes, more than one ``<think>`` or ``</think>``, or a
    ``</think>`` before the ``<think>``. A reply without tags is all answer.
    """
    opens, closes = reply.count(THINK_OPEN), reply.count(THINK_CLOSE)
    if opens > 1 or closes > 1:
        return None
    if opens == 1 and (closes == 0 or reply.index(THINK_CLOSE) < reply.index(THINK_OPEN)):
        return None
    if closes == 1:
        return reply.split(THINK_CLOSE, 1)[1]
    return reply


def boxed_answers(text: str) -> list[str]:
    """The contents of every ``\\boxed{...}`` (or ``\\fbox{...}``) in ``text``, in order, braces balanced.

    An unclosed box is ignored.
    """
    found = []
    for match in _BOXED.finditer(text):
        depth, start = 1, match.end()
        for pos in range(start, len(text)):
            char = text[pos]
            if char == "{":
                depth += 1
            elif char == "}":
                depth -= 1
                if depth == 0:
                    found.append(text[start:pos].strip())
                    break
    return found


def final_boxed_answer(reply: str, allow_repeats: bool = True) -> Optional[str]:
    """The one boxed answer of a reply's answer section, or None.

    None when the reasoning is malformed (:func:`answer_section`), no box holds an answer, or the boxes
    hold different answers (a hedge). Repeating the same answer is fine unless ``allow_repeats`` is False.
    """
    section = answer_section(reply)
    if section is None:
        return None
    answers = [a for a in boxed_answers(section) if a]
    if not answers:
        return None
    normalized = {re.sub(r"\s+", "", a) for a in answers}
    if len(normalized) > 1 or (not allow_repeats and len(answers) > 1):
        return None
    return answers[-1]


def last_code_block(reply: str, languages: tuple[str, ...] = ("python", "py", "python3")) -> Optional[str]:
    """The body of the last fenced code block in the answer section tagged with one of ``languages``.

    None when the reasoning is malformed or there is no such block. An empty ``languages`` accepts any tag.
    """
    section = answer_section(reply)
    if section is None:
        return None
    blocks = [body for tag, body in _FENCE.findall(section) if not languages or tag.lower() in languages]
    return blocks[-1] if blocks else None
