"""Reading and comparing short answers about pictures (counts, words, titles, clock times, points).

* :func:`tagged_answer` - the one ``<answer>...</answer>`` after a reply's reasoning (None when absent,
  malformed, or when several tags disagree: a hedge);
* :func:`number_value` - a count or number written as digits (``1,024``, ``3.0``) or a word up to ninety;
* :func:`same_answer` - numbers by value, everything else by its letters and digits, case, articles and
  punctuation ignored (``J.K. Rowling`` = ``jk rowling``, ``Yes.`` = ``yes``);
* :func:`clock_minutes` - a clock reading ``H:MM`` (optional seconds and am/pm) as minutes on a 12-hour dial;
* :func:`parse_points` / :func:`point_score` - Molmo-style ``<point x= y=>`` / ``<points x1= y1= ...>``
  coordinates (percent of width and height) and their match to annotated points.
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from typing import Optional

from atroposlib.utils.replies import answer_section

_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_UNITS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen"
).split()
_TENS = {
    "twenty": 20,
    "thirty": 30,
    "forty": 40,
    "fifty": 50,
    "sixty": 60,
    "seventy": 70,
    "eighty": 80,
    "ninety": 90,
}
_ARTICLES = re.compile(r"\b(a|an|the)\b")


def tagged_answer(reply: str, tag: str = "answer") -> Optional[str]:
    """The text of the one ``<tag>...</tag>`` after the reply's reasoning, stripped; None when there is
    none, the reasoning is malformed, or the tags hold different answers."""
    section = answer_section(reply)
    if section is None:
        return None
    pattern = (
        _ANSWER_TAG if tag == "answer" else re.compile(rf"<{tag}>(.*?)</{tag}>", re.DOTALL | re.IGNORECASE)
    )
    answers = [a.strip() for a in pattern.findall(section) if a.strip()]
    if not answers or len({a.lower() for a in answers}) > 1:
        return None
    return answers[-1]


def tagged_or_bare(text: str) -> str:
    """The text of the first ``<answer>`` tag of a gold answer, or the whole text, stripped."""
    found = _ANSWER_TAG.search(text)
    return (found.group(1) if found else text).strip()


def number_value(text: str) -> Optional[float]:
    """The number ``text`` states: digits (thousands commas allowed) or a word (``seven``,
    ``twenty-one``); None otherwise. A trailing full stop is ignored."""
    value = re.sub(r"\\text\{([^}]*)\}", r"\1", text).strip().strip(".").strip().lower()
    if re.fullmatch(r"[-+]?\d{1,3}(,\d{3})+(\.\d+)?|[-+]?\d+(\.\d+)?", value):
        return float(value.replace(",", ""))
    if value in _UNITS:
        return float(_UNITS.index(value))
    parts = re.split(r"[-\s]+", value)
    if parts and parts[0] in _TENS and len(parts) <= 2:
        if len(parts) == 1:
            return float(_TENS[parts[0]])
        if parts[1] in _UNITS[1:10]:
            return float(_TENS[parts[0]] + _UNITS.index(parts[1]))
    return None


def compact(text: str) -> str:
    """Lower-case letters and digits of ``text``, articles dropped."""
    lowered = re.sub(r"\\text\{([^}]*)\}", r"\1", text).lower()
    return re.sub(r"[\W_]+", "", _ARTICLES.sub(" ", lowered))


def same_answer(answer: Optional[str], gold: str) -> bool:
    """Whether ``answer`` says what ``gold`` says (see the module docstring); False for None or empty."""
    if answer is None or not answer.strip():
        return False
    gold_number = number_value(gold)
    if gold_number is not None:
        got = number_value(answer)
        return got is not None and math.isclose(got, gold_number, rel_tol=0, abs_tol=1e-9)
    return bool(compact(answer)) and compact(answer) == compact(gold)


_CLOCK = re.compile(r"(\d{1,2})\s*:\s*(\d{2})(?:\s*:\s*(\d{2}))?\s*(a\.?m\.?|p\.?m\.?)?", re.IGNORECASE)


def clock_minutes(text: str) -> Optional[int]:
    """Minutes past twelve on a 12-hour dial of the one clock time ``text`` states (``3:05``, ``03:05``,
    ``15:05``, ``3:05 pm`` all give 185); None for no time, several times or an impossible one."""
    found = _CLOCK.findall(text)
    rest = _CLOCK.sub("", text).strip().strip(".").strip()
    if len(found) != 1 or rest:
        return None
    hour, minute = int(found[0][0]), int(found[0][1])
    if hour > 23 or minute > 59 or (found[0][3] and not 1 <= hour <= 12):
        return None
    return (hour % 12) * 60 + minute


_POINT = re.compile(r"<point\b([^>]*)>", re.IGNORECASE)
_POINTS = re.compile(r"<points\b([^>]*)>", re.IGNORECASE)
_ATTR = re.compile(r'(\w+)\s*=\s*"([^"]*)"')


def _coordinate(value: str) -> Optional[float]:
    try:
        number = float(value)
    except ValueError:
        return None
    return number if 0.0 <= number <= 100.0 else None


def parse_points(text: str) -> Optional[list[tuple[float, float]]]:
    """Every point of ``<point x="" y="">`` and ``<points x1="" y1="" x2="" ...>`` tags in ``text`` (percent
    coordinates); None when a tag is malformed (a missing or unpaired coordinate, one outside 0-100)."""
    points: list[tuple[float, float]] = []
    for attrs in _POINT.findall(text):
        values = dict(_ATTR.findall(attrs))
        x, y = _coordinate(values.get("x", "")), _coordinate(values.get("y", ""))
        if x is None or y is None:
            return None
        points.append((x, y))
    for attrs in _POINTS.findall(text):
        values = dict(_ATTR.findall(attrs))
        xs = sorted(k for k in values if re.fullmatch(r"x\d+", k))
        if not xs:
            return None
        for key in xs:
            x, y = _coordinate(values[key]), _coordinate(values.get("y" + key[1:], ""))
            if x is None or y is None:
                return None
            points.append((x, y))
    return points


def point_score(
    predicted: Sequence[tuple[float, float]], gold: Sequence[tuple[float, float]], radius: float
) -> float:
    """How well ``predicted`` points hit ``gold`` points, in [0, 1].

    Pairs are matched greedily, closest first, each point used once; a pair at distance ``d`` earns
    ``max(0, 1 - d / radius)``. The sum is divided by the larger of the two counts, so missing points and
    extra points both cost. No gold points: 1 when nothing is predicted, else 0."""
    if not gold:
        return 1.0 if not predicted else 0.0
    if not predicted:
        return 0.0
    pairs = sorted((math.dist(p, g), i, j) for i, p in enumerate(predicted) for j, g in enumerate(gold))
    used_p: set[int] = set()
    used_g: set[int] = set()
    total = 0.0
    for distance, i, j in pairs:
        if i in used_p or j in used_g:
            continue
        used_p.add(i)
        used_g.add(j)
        total += max(0.0, 1.0 - distance / radius)
    return total / max(len(predicted), len(gold))
