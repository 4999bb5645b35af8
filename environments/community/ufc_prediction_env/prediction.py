"""Reading the predicted winner from a commentary reply.

A reply may open with ``<think>...</think>``; nothing inside it counts. The rest is the commentary, ending
with the prediction in a box: ``\\boxed{fighter name}`` when the prompt names the fighters
(:func:`predicted_corner`), ``\\boxed{Red}`` or ``\\boxed{Blue}`` when it only shows them
(:func:`predicted_colour`). A box names a fighter when it is the fighter's full name or, when the two
fighters' last names differ, the last name alone, ignoring case, accents, punctuation and spacing
(``\\boxed{jose alvarez.}`` names José Álvarez); it names a colour when it is ``red`` or ``blue`` (optionally
followed by ``corner``), ignoring case and punctuation. The reply predicts a corner when:

* every box names the same corner (a box naming both, neither, the other kind of answer or the prompt's
  ``fighter name`` placeholder is no prediction, and boxes naming different corners are a hedge);
* nothing but punctuation, emoji and spacing follows the last box (the prediction ends the reply);
* at least ``min_words`` words of commentary come before the first box.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from typing import Optional

from atroposlib.utils.replies import answer_section, boxed_answers

_BOX = re.compile(r"\\(?:boxed|fbox)\s*\{")
_WORD = re.compile(r"[^\W_]+")


def normalized_name(text: str) -> str:
    """``text`` lower-cased, without accents, punctuation or repeated spaces."""
    plain = unicodedata.normalize("NFKD", text).encode("ascii", "ignore").decode()
    return " ".join(_WORD.findall(plain.lower()))


def named_corner(box: str, red: str, blue: str) -> Optional[str]:
    """``"Red"`` or ``"Blue"`` when ``box`` names that corner's fighter (full name, or an unambiguous last
    name), else None."""
    said = normalized_name(box)
    names = {"Red": normalized_name(red), "Blue": normalized_name(blue)}
    for corner, name in names.items():
        if said == name:
            return corner
    last = {corner: name.split(" ")[-1] for corner, name in names.items()}
    if last["Red"] != last["Blue"]:
        for corner, surname in last.items():
            if said == surname:
                return corner
    return None


def named_colour(box: str) -> Optional[str]:
    """``"Red"`` or ``"Blue"`` when ``box`` names that corner's colour (``red``, ``Blue corner``), else None."""
    said = normalized_name(box).removesuffix(" corner")
    return said.capitalize() if said in ("red", "blue") else None


def predicted_corner(reply: str, red: str, blue: str, min_words: int) -> Optional[str]:
    """The corner the reply predicts to win by naming its fighter (see the module docstring), or None."""
    return _predicted(reply, lambda box: named_corner(box, red, blue), min_words)


def predicted_colour(reply: str, min_words: int) -> Optional[str]:
    """The corner the reply predicts to win by naming its colour (see the module docstring), or None."""
    return _predicted(reply, named_colour, min_words)


def _predicted(reply: str, corner_of: Callable[[str], Optional[str]], min_words: int) -> Optional[str]:
    """The one corner every box of the reply's answer section names (``corner_of`` reads a box), when the
    last box ends the reply and ``min_words`` words come before the first; else None."""
    section = answer_section(reply)
    if section is None:
        return None
    boxes = boxed_answers(section)
    if not boxes:
        return None
    corners = {corner_of(box) for box in boxes}
    if len(corners) != 1 or None in corners:
        return None
    starts = list(_BOX.finditer(section))
    end = _box_end(section, starts[-1].end())
    if (
        end is None
        or _WORD.search(section[end:])
        or len(_WORD.findall(section[: starts[0].start()])) < min_words
    ):
        return None
    return corners.pop()


def _box_end(text: str, start: int) -> Optional[int]:
    """The index after the brace closing the box whose contents begin at ``start`` (None if it never closes)."""
    depth = 1
    for pos in range(start, len(text)):
        depth += {"{": 1, "}": -1}.get(text[pos], 0)
        if depth == 0:
            return pos + 1
    return None
