"""MedQA (USMLE, four options) items and reading the option a doctor's diagnosis names.

Rows use the hub set's schema (``GBaker/MedQA-USMLE-4-options``): ``question`` (the case and its question),
``options`` (``{"A": text, ..., "D": text}``, or that object as a JSON string), ``answer`` (the right
option's text) and optionally ``answer_idx`` (its letter; when given it must name the option whose text is
``answer``). Other fields (``meta_info``, ``metamap_phrases``) are ignored.

A diagnosis (the text after "The diagnosis is:") names an option by its letter (``C``, ``(C)``, ``C.``,
``C. Hemothorax``) when the options were shown, or by containing the option's text (case, punctuation and
spacing aside). An option whose text lies inside a longer named option's text (``Hemothorax`` within
``Tension hemothorax``) is not named by that occurrence. A diagnosis naming several options is a hedge and
names none.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

from atroposlib.envs.data_loading import DatasetError, check_rows
from atroposlib.utils.replies import answer_section

HUB_DATASET = "GBaker/MedQA-USMLE-4-options"
#: What the doctor writes before the diagnosis (the original's marker).
FINAL_MESSAGE = "The diagnosis is:"

_MARKER = re.compile(r"the\s+diagnosis\s+is\s*:", re.IGNORECASE)
_LETTER_ONLY = re.compile(r"^[\s*_]*\(?([A-Za-z])\)?[\s*_.:)]*$")
_LETTER_PREFIX = re.compile(r"^[\s*_]*(?:option\s+)?\(?([A-Z])(?:\)|\.|:|\s-)\s*(.+)$", re.DOTALL)


@dataclass(frozen=True)
class MedQAItem:
    """One case: the question (what the patient knows), the options by letter and the right letter."""

    question: str
    options: tuple[tuple[str, str], ...]
    answer_idx: str

    @property
    def answer(self) -> str:
        """The right option's text."""
        return dict(self.options)[self.answer_idx]


def _options(value: Any, where: str) -> tuple[tuple[str, str], ...]:
    if isinstance(value, str):
        try:
            value = json.loads(value)
        except json.JSONDecodeError:
            value = None
    if not isinstance(value, dict) or not value:
        raise DatasetError(f"{where}: field 'options' must map option letters to texts")
    options = tuple(
        (str(k).strip().upper(), str(v).strip()) for k, v in sorted(value.items()) if v is not None
    )
    if any(not _LETTER_ONLY.match(k) or not text for k, text in options) or len(options) < 2:
        raise DatasetError(f"{where}: field 'options' must map single letters to non-empty texts")
    return options


def item_from_row(row: dict[str, Any], source: str, index: int) -> MedQAItem:
    """The item of one hub-schema row; :class:`DatasetError` naming ``source``, the row and the field."""
    where = f"{source}: row {index}"
    options = _options(row["options"], where)
    answer = str(row["answer"]).strip()
    by_text = [k for k, text in options if _normalize(text) == _normalize(answer)]
    letter = row.get("answer_idx")
    if letter is not None and str(letter).strip():
        letter = str(letter).strip().upper()
        if letter not in dict(options):
            raise DatasetError(f"{where}: field 'answer_idx' is {letter!r}, not one of the options")
        if by_text and letter not in by_text:
            raise DatasetError(
                f"{where}: field 'answer_idx' ({letter}) is not the option whose text is 'answer'"
            )
    elif len(by_text) == 1:
        letter = by_text[0]
    else:
        raise DatasetError(f"{where}: field 'answer' is not the text of exactly one option")
    question = str(row["question"]).strip()
    if not question:
        raise DatasetError(f"{where}: field 'question' is empty")
    return MedQAItem(question, options, letter)


def items_from_rows(rows: Sequence[dict[str, Any]], source: str) -> list[MedQAItem]:
    """Items of hub-schema rows (checked for ``question``, ``options`` and ``answer``)."""
    check_rows(rows, ["question", "options", "answer"], source)
    return [item_from_row(row, source, i) for i, row in enumerate(rows)]


def _normalize(text: str) -> str:
    """Lower case, punctuation as spaces, single spaces: the form option texts are compared in."""
    return " ".join(re.sub(r"[^\w]+", " ", text.lower()).split())


def states_diagnosis(section: str) -> bool:
    """Whether the visible part of a doctor's reply states a diagnosis ("The diagnosis is:" in it)."""
    return _MARKER.search(section) is not None


def diagnosis_of(reply: str) -> Optional[str]:
    """The diagnosis a doctor's reply states: the rest of the line after its one "The diagnosis is:" (after
    the reasoning; an explanation on later lines is not part of it), or None when there is none, the
    reasoning is malformed, or it is stated twice."""
    section = answer_section(reply)
    if section is None:
        return None
    parts = _MARKER.split(section)
    if len(parts) != 2:
        return None
    lines = parts[1].strip().splitlines()
    diagnosis = lines[0].strip() if lines else ""
    return diagnosis or None


def _texts_named(diagnosis: str, options: Sequence[tuple[str, str]]) -> set[str]:
    text = f" {_normalize(diagnosis)} "
    spans: dict[str, list[tuple[int, int]]] = {}
    for letter, option in options:
        needle = f" {_normalize(option)} "
        if needle.strip():
            spans[letter] = [
                (m.start(), m.start() + len(needle)) for m in re.finditer(re.escape(needle), text)
            ]
    longer = [(s, e) for letter in spans for s, e in spans[letter]]

    def inside_longer(start: int, end: int) -> bool:
        return any(s <= start and end <= e and (e - s) > (end - start) for s, e in longer)

    return {letter for letter, found in spans.items() if any(not inside_longer(s, e) for s, e in found)}


def named_option(diagnosis: Optional[str], item: MedQAItem, letters: bool) -> Optional[str]:
    """The letter of the one option ``diagnosis`` names (see the module docstring), or None. ``letters``:
    whether a letter may name an option (the options were shown)."""
    if not diagnosis:
        return None
    labels = dict(item.options)
    if letters:
        lone = _LETTER_ONLY.match(diagnosis)
        if lone:
            letter = lone.group(1).upper()
            return letter if letter in labels else None
        prefixed = _LETTER_PREFIX.match(diagnosis.strip())
        if prefixed and prefixed.group(1) in labels:
            letter = prefixed.group(1)
            named = _texts_named(prefixed.group(2), item.options)
            return letter if named <= {letter} else None
    named = _texts_named(diagnosis, item.options)
    return named.pop() if len(named) == 1 else None
