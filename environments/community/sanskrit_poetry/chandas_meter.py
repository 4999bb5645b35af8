"""Sanskrit prosody (chandas) of verse written in IAST: syllables, their weights and the classical metres.

A syllable is heavy (guru, ``G``) when its vowel is long (``ā ī ū ṝ ḹ e ai o au``), when an anusvāra
(``ṃ``/``ṁ``) or visarga (``ḥ``) follows it, or when two or more consonants follow before the next vowel (word
boundaries inside a line do not matter); otherwise it is light (laghu, ``L``). Aspirates (``kh``, ``bh``...)
are single consonants. The last syllable of a pāda may be either weight.

Metres (``METERS``): a pāda count and, per pāda, a pattern of ``G``, ``L`` and ``x`` (either):
``anustubh`` (śloka: 4 x 8, 5th light, 6th heavy, 7th heavy in odd and light in even pādas), ``tristubh``
(4 x 11, the indravajrā/upendravajrā/upajāti family ``xGLGGLLGLGx``), ``jagati`` (4 x 12, vaṃśastha/
indravaṃśā ``xGLGGLLGLGLx``), ``indravajra``, ``upendravajra``, ``vasantatilaka`` (4 x 14) and ``gayatri``
(3 x 8, syllable count only).
"""

from __future__ import annotations

import re
import unicodedata
from dataclasses import dataclass

LONG_VOWELS = ("ai", "au", "ā", "ī", "ū", "ṝ", "ḹ", "e", "o")
SHORT_VOWELS = ("a", "i", "u", "ṛ", "ḷ")
ASPIRATES = ("kh", "gh", "ch", "jh", "ṭh", "ḍh", "th", "dh", "ph", "bh")
CONSONANTS = set("kgcjṭḍtdpbṅñṇnmyrlvśṣsh")
MARKS = {"ṃ", "ṁ", "ḥ"}
_TOKEN = re.compile("|".join(re.escape(t) for t in (*ASPIRATES, *LONG_VOWELS)) + "|.", re.DOTALL)


@dataclass(frozen=True)
class Meter:
    """A metre: the pattern of each pāda (``G`` heavy, ``L`` light, ``x`` either)."""

    name: str
    padas: tuple[str, ...]


def _same(pattern: str, count: int = 4) -> tuple[str, ...]:
    return (pattern,) * count


METERS = {
    "anustubh": Meter("anustubh", ("xxxxLGGx", "xxxxLGLx", "xxxxLGGx", "xxxxLGLx")),
    "tristubh": Meter("tristubh", _same("xGLGGLLGLGx")),
    "jagati": Meter("jagati", _same("xGLGGLLGLGLx")),
    "indravajra": Meter("indravajra", _same("GGLGGLLGLGx")),
    "upendravajra": Meter("upendravajra", _same("LGLGGLLGLGx")),
    "vasantatilaka": Meter("vasantatilaka", _same("GGLGLLLGLLGLGx")),
    "gayatri": Meter("gayatri", _same("xxxxxxxx", 3)),
}
#: spellings of metre names that mean the same metre
ALIASES = {"anuṣṭubh": "anustubh", "shloka": "anustubh", "śloka": "anustubh", "sloka": "anustubh",
           "triṣṭubh": "tristubh", "trishtubh": "tristubh", "jagatī": "jagati", "gāyatrī": "gayatri",
           "indravajrā": "indravajra", "upendravajrā": "upendravajra", "vasantatilakā": "vasantatilaka"}  # fmt: skip


def meter_named(name: str) -> Meter:
    """The metre called ``name`` (IAST or plain spelling); KeyError naming the known metres otherwise."""
    key = unicodedata.normalize("NFC", name.strip().lower())
    key = ALIASES.get(key, key)
    if key not in METERS:
        raise KeyError(f"unknown metre {name!r}; known: {', '.join(METERS)}")
    return METERS[key]


def weights(line: str) -> str:
    """The syllable weights of one line of IAST verse, e.g. ``"GGLG..."`` (empty for no vowels)."""
    tokens = [t for t in _TOKEN.findall(unicodedata.normalize("NFC", line.lower())) if t.strip()]
    kinds = []
    for token in tokens:
        if token in LONG_VOWELS:
            kinds.append("V")
        elif token in SHORT_VOWELS:
            kinds.append("v")
        elif token in MARKS:
            kinds.append("M")
        elif token in ASPIRATES or token in CONSONANTS:
            kinds.append("C")
    pattern = []
    for i, kind in enumerate(kinds):
        if kind not in "Vv":
            continue
        following = kinds[i + 1 :]
        consonants = 0
        for nxt in following:
            if nxt in "Vv":
                break
            consonants += 1 if nxt == "C" else 2  # a mark makes the syllable heavy
        pattern.append("G" if kind == "V" or consonants >= 2 else "L")
    return "".join(pattern)


def pada_score(line_weights: str, pattern: str) -> float:
    """The share of the pattern's fixed positions a pāda satisfies; 0.0 when its syllable count differs."""
    if len(line_weights) != len(pattern):
        return 0.0
    fixed = [(w, p) for w, p in zip(line_weights, pattern, strict=True) if p != "x"]
    if not fixed:
        return 1.0
    return sum(w == p for w, p in fixed) / len(fixed)


def verse_lines(text: str) -> list[str]:
    """The non-empty lines of a verse, with verse numbers and daṇḍas (``|``, ``।``, ``॥``) removed."""
    lines = []
    for line in text.splitlines():
        line = re.sub(r"[|।॥/.]+|\d+", " ", line).strip()
        if re.search(r"[^\W\d_]", line):
            lines.append(line)
    return lines


def meter_score(text: str, meter: Meter) -> float:
    """How well ``text`` is in ``meter``: the mean pāda score over the metre's pādas (missing pādas score 0),
    scaled down by ``pādas / lines`` when there are more lines than pādas. 1.0 is a perfect verse."""
    lines = verse_lines(text)
    if not lines:
        return 0.0
    padas = meter.padas
    scores = [pada_score(weights(line), pattern) for line, pattern in zip(lines, padas, strict=False)]
    score = sum(scores) / len(padas)
    if len(lines) > len(padas):
        score *= len(padas) / len(lines)
    return round(score, 6)
