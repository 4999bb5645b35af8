"""Counting words, sentences and capital words, and detecting the language of a text, for IFEval checks."""

from __future__ import annotations

import re
import threading
from typing import Optional

_WORD = re.compile(r"\w+")
# A sentence ends at ., ! or ? (repeats allowed), optionally followed by closing quotes or brackets, then
# whitespace or the end of the text.
_SENTENCE_END = re.compile(r"[.!?]+[\"'”’)\]]*(?=\s|$)")
# Single letters joined by periods: an initial ("j"), or an acronym ("u.s", "p.m", "e.g").
_INITIALS = re.compile(r"[^\W\d_](?:\.[^\W\d_])*")
_ABBREVIATIONS = frozenset(
    "mr mrs ms dr prof st jr sr vs etc inc ltd co corp no fig al e.g i.e approx dept est jan feb mar apr "
    "jun jul aug sep sept oct nov dec mt ft".split()
)


def count_words(text: str) -> int:
    """Number of runs of word characters (letters, digits, underscore) in ``text``."""
    return len(_WORD.findall(text))


def split_sentences(text: str) -> list[str]:
    """The sentences of ``text``, split after ``.``, ``!`` or ``?`` followed by whitespace or the end.

    A period does not end a sentence after a common abbreviation ("Dr.", "Prof."), a single-letter initial
    ("J. Smith"), an acronym of single letters ("U.S.", "p.m.") or when more text follows without a space
    ("3.14", "example.com"). Text after the last
    end mark counts as a sentence when it holds a word.
    """
    sentences, start = [], 0
    for match in _SENTENCE_END.finditer(text):
        if match.group().startswith(".") and len(match.group().rstrip("\"'”’)]")) == 1:
            before = text[start : match.start()].split()
            last = before[-1].lower().rstrip(".") if before else ""
            if last in _ABBREVIATIONS or _INITIALS.fullmatch(last):
                continue
        sentence = text[start : match.end()].strip()
        if _WORD.search(sentence):
            sentences.append(sentence)
        start = match.end()
    tail = text[start:].strip()
    if _WORD.search(tail):
        sentences.append(tail)
    return sentences


def count_sentences(text: str) -> int:
    """Number of sentences of ``text`` (see :func:`split_sentences`)."""
    return len(split_sentences(text))


def capital_words(text: str) -> list[str]:
    """The words of ``text`` written entirely in capital letters (``NASA``, ``I``; digits alone do not count)."""
    return [word for word in _WORD.findall(text) if word.isupper()]


_factory_lock = threading.Lock()
_factory = None


def _detector_factory():
    global _factory
    with _factory_lock:
        if _factory is None:
            from langdetect.detector_factory import PROFILES_DIRECTORY, DetectorFactory

            factory = DetectorFactory()
            factory.load_profile(PROFILES_DIRECTORY)
            # langdetect samples at random; a fixed seed makes every detection repeatable.
            factory.seed = 0
            _factory = factory
        return _factory


def detect_language(text: str) -> Optional[str]:
    """The ISO 639-1 code ``langdetect`` assigns to ``text`` (``"en"``, ``"de"``, ``"zh-cn"`` ...), or None
    when the text has no detectable language (no letters). Repeatable: the detector is seeded."""
    from langdetect.lang_detect_exception import LangDetectException

    detector = _detector_factory().create()
    detector.append(text)
    try:
        return detector.detect()
    except LangDetectException:
        return None
