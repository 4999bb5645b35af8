"""The cat's communication rules, the judge's verdict and the prompts' data.

A cat reply (after its ``<think>`` block, which never counts) is one to three lines, each a cat sound and
then what the cat does in parentheses: ``Mew! (Looks up at you)`` or ``~Silent~ (Rubs against your legs)``.
The sound is ``~Silent~`` or cat sounds only (meow, mew, mrrp, purr, hiss, growl, yowl, chirp, trill,
chatter, hack, with the letters drawn out as you like, joined by spaces or hyphens, ending in ``!``, ``?``
or ``.``). Broken rules: English speech (anything else outside the parentheses, or the cat speaking in the
first person inside them: ``I``, ``me``, ``my``, ``we``, ``us``, ``our``, or quotation marks), emojis or any
other non-ASCII character, an empty reply or a malformed think block.

The judge's verdict is its one ``\\boxed{purr}`` or ``\\boxed{meow}`` after its reasoning; anything else
cannot be read.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Optional

from atroposlib.utils.replies import answer_section, final_boxed_answer

HERE = Path(__file__).resolve().parent
CAT_BEHAVIORS_FILEPATH = HERE / "cat_behaviors.json"
CAT_SCENARIOS_FILEPATH = HERE / "cat_scenarios.json"

_SOUND_WORD = r"(?:m+e+o+w+|m+e+w+|m+r+r+p*|p+u+r+r+|h+i+s+s+|g+r+o+w+l+|y+o+w+l+|c+h+i+r+p+|t+r+i+l+l+|c+h+a+t+t+e+r+|h+a+c+k+)"
_SOUND = re.compile(rf"^(?:~silent~|{_SOUND_WORD}(?:[\s-]+{_SOUND_WORD})*[!?.]*)$", re.IGNORECASE)
_LINE = re.compile(r"^(?P<sound>[^()]+?)\s*\((?P<context>[^()]+)\)$")
_FIRST_PERSON = re.compile(r"\b(?:i|i'm|i've|i'd|me|my|mine|we|us|our)\b|\"", re.IGNORECASE)


def rule_broken(reply: str) -> Optional[str]:
    """Why a cat reply breaks the rules (see the module docstring), or None when it keeps them."""
    section = answer_section(reply or "")
    if section is None:
        return "malformed <think> block"
    if not section.isascii():
        return "emoji or non-ASCII text"
    lines = [line.strip() for line in section.strip().splitlines() if line.strip()]
    if not lines:
        return "no cat communication"
    if len(lines) > 3:
        return "more than three lines"
    for line in lines:
        match = _LINE.match(line)
        if match is None:
            return f"not 'Sound! (context)': {line[:60]!r}"
        if not _SOUND.match(match.group("sound").strip()):
            return f"not a cat sound: {match.group('sound').strip()[:40]!r}"
        if _FIRST_PERSON.search(match.group("context")):
            return f"the cat speaks in the context: {match.group('context')[:60]!r}"
    return None


_VERDICT = re.compile(r"^(?:\\text(?:bf)?\s*\{)?\s*(purr|meow)\s*\}?[.!]?$", re.IGNORECASE)


def cat_verdict(text: str) -> Optional[float]:
    """The judge's verdict as a score: 1.0 for ``\\boxed{purr}``, 0.0 for ``\\boxed{meow}``, None when it
    cannot be read (no box, several different boxes, anything else: "not a purr" is no verdict)."""
    match = _VERDICT.match((final_boxed_answer(text) or "").strip())
    return None if match is None else (1.0 if match.group(1).lower() == "purr" else 0.0)


def load_cat_behaviors_for_prompt(filepath: Path | str = CAT_BEHAVIORS_FILEPATH) -> str:
    """The behaviours list appended to the cat's system prompt."""
    behaviors = json.loads(Path(filepath).read_text(encoding="utf-8"))
    lines = ["Behaviours you can use and what they generally mean:"]
    lines += [f"- {b['behavior']}: {b['description']}" for b in behaviors]
    return "\n".join(lines)
