"""Poker actions: the winning player's action of a data row and the decision a model's reply states.

An action is a type (``fold``, ``check``, ``call``, ``bet``, ``raise``, ``re-raise``, ``all-in``) and, for
``call``/``bet``/``raise``/``re-raise``, an optional amount (``raise 4.00``). Accepted spellings: any case,
``reraise`` / ``re raise``, ``all in`` / ``allin`` / ``shove``, ``raise to 4``, ``$4``, a trailing full stop,
markdown emphasis or backticks, and a leading ``Action:`` / ``Answer:`` / ``Decision:`` / ``I will`` /
``I'll`` / ``I`` (and ``go all in``).

A reply's decision is the last non-empty line of its answer section (after the ``<think>`` block, which never
counts), which must be exactly one action. Another line of the answer section that is itself a different
action statement makes the reply a hedge (no decision), as do a malformed think block, prose around the
action on its last line, or no answer at all.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from atroposlib.utils.replies import answer_section

ACTION_TYPES = ("fold", "check", "call", "bet", "raise", "re-raise", "all-in")
#: Actions that may carry an amount.
SIZED = ("call", "bet", "raise", "re-raise")
#: Families for partial credit: a different action of the same family is a related action.
AGGRESSIVE = ("bet", "raise", "re-raise", "all-in")
PASSIVE = ("check", "call")

_SPELLINGS = {
    "reraise": "re-raise",
    "re-raise": "re-raise",
    "re raise": "re-raise",
    "all-in": "all-in",
    "all in": "all-in",
    "allin": "all-in",
    "shove": "all-in",
}
_TYPE = r"(re-?\s?raise|all[-\s]?in|shove|fold|check|call|bet|raise)"
_STATEMENT = re.compile(
    rf"^(?:(?:action|answer|decision|my action|final answer)\s*[:\-]\s*|i\s*will\s+|i'll\s+|i\s+)?"
    rf"(?:go\s+)?{_TYPE}(?:\s+(?:to\s+)?\$?\s*(\d+(?:\.\d+)?))?\s*\.?$",
    re.IGNORECASE,
)
_DECORATION = re.compile(r"[*`_]")


@dataclass(frozen=True)
class PokerAction:
    """An action type and, for sized actions, the amount (None when not given)."""

    kind: str
    amount: Optional[float] = None

    def __str__(self) -> str:
        return self.kind if self.amount is None else f"{self.kind} {self.amount:.2f}"

    def related(self, other: PokerAction) -> bool:
        """Whether ``other`` is a different action of the same family (aggressive or passive)."""
        if self.kind == other.kind:
            return False
        return any(self.kind in family and other.kind in family for family in (AGGRESSIVE, PASSIVE))


def parse_action(text: str) -> Optional[PokerAction]:
    """The action ``text`` states (one action, nothing else; see the module docstring), or None."""
    cleaned = " ".join(_DECORATION.sub("", text).split())
    match = _STATEMENT.match(cleaned)
    if match is None:
        return None
    word = " ".join(match.group(1).lower().split())
    kind = _SPELLINGS.get(word, _SPELLINGS.get(word.replace(" ", ""), word))
    amount = match.group(2)
    if amount is not None and kind not in SIZED:
        return None  # "fold 4" is no action
    return PokerAction(kind, float(amount) if amount is not None else None)


def reply_action(reply: str) -> Optional[PokerAction]:
    """The decision of a model's reply (see the module docstring), or None."""
    section = answer_section(reply or "")
    if section is None:
        return None
    lines = [line.strip() for line in section.splitlines() if line.strip()]
    if not lines:
        return None
    decision = parse_action(lines[-1])
    if decision is None:
        return None
    for line in lines[:-1]:
        other = parse_action(line)
        if other is not None and other != decision:
            return None
    return decision
