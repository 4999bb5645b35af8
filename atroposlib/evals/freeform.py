"""Free-form answers: SQuAD and DROP normalisation, exact match and token F1, and exact grid match.

* SQuAD (:func:`squad_normalize`, :func:`squad_exact_match`, :func:`squad_f1`): lower case, punctuation and
  the articles *a*, *an*, *the* removed, whitespace collapsed; F1 over the multiset of tokens.
* DROP (:func:`drop_metrics`, :func:`drop_score`), as the official DROP evaluation script and
  lm-evaluation-harness score it: an answer is one or several spans; each span is split on spaces and
  hyphens, every token lower-cased, stripped of punctuation unless it is a number, numbers written as
  floats (``"3"`` = ``"3.0"``), articles removed. Exact match needs the same set of spans; F1 aligns
  predicted and gold spans one to one (best total), scores each pair by the F1 of their token sets (0 when
  the gold span holds numbers and the predicted span holds none of them), averages over the larger number
  of spans and rounds to two decimals. :func:`drop_score` takes the best over a question's gold answers.
  :func:`drop_gold_answers` reads those answers from a row of the hub set (``answer`` and
  ``validated_answers``, each a number, a date or spans).
* ARC grids (:func:`parse_grid`, :func:`grids_equal`): a reply's grid (JSON or Python lists, or one
  bracketed row per line) and a cell-for-cell comparison (shape included).
* Reading a free-form reply (:func:`extract_freeform`): after any ``<think>`` block, the ``<answer>`` tag's
  content, else the ``\\boxed{}`` content, else what follows "the answer is" / "Answer:", else the last
  line. Tags (or boxes) that differ are a hedge: no answer.
"""

from __future__ import annotations

import ast
import json
import re
import string
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any, Optional, Union

from atroposlib.utils.replies import answer_section, boxed_answers

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)

Answer = Union[str, Sequence[str]]
Grid = list[list[int]]


# --------------------------------------------------------------------------------------------- SQuAD


def squad_normalize(text: str) -> str:
    """SQuAD's answer normalisation: lower case, no punctuation, no articles, single spaces."""
    text = "".join(ch for ch in str(text).lower() if ch not in _PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def squad_exact_match(prediction: str, gold: str) -> float:
    """1.0 when the normalised strings are equal, else 0.0."""
    return float(squad_normalize(prediction) == squad_normalize(gold))


def squad_f1(prediction: str, gold: str) -> float:
    """Token F1 of the normalised strings (tokens counted with multiplicity); when either side has no
    token, 1.0 if both are empty and 0.0 otherwise."""
    predicted = squad_normalize(prediction).split()
    expected = squad_normalize(gold).split()
    if not predicted or not expected:
        return float(predicted == expected)
    common = sum((Counter(predicted) & Counter(expected)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(predicted), common / len(expected)
    return 2 * precision * recall / (precision + recall)


# ---------------------------------------------------------------------------------------------- DROP


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _drop_token(token: str) -> str:
    token = token.lower()
    if not _is_number(token):
        token = "".join(ch for ch in token if ch not in _PUNCTUATION)
    if _is_number(token):
        token = str(float(token))
    return " ".join(_ARTICLES.sub(" ", token).split())


def drop_normalize(text: str) -> str:
    """DROP's normalisation of one span (see the module docstring)."""
    tokens = (_drop_token(token) for token in re.split(" |-", str(text)))
    return " ".join(token for token in tokens if token.strip()).strip()


def _bags(answer: Answer) -> tuple[list[str], list[set[str]]]:
    spans = [answer] if isinstance(answer, str) else list(answer)
    normalized = [drop_normalize(span) for span in spans]
    return normalized, [set(span.split()) for span in normalized]


def _bag_f1(predicted: set[str], gold: set[str]) -> float:
    common = len(predicted & gold)
    precision = common / len(predicted) if predicted else 1.0
    recall = common / len(gold) if gold else 1.0
    if precision == 0.0 and recall == 0.0:
        return 0.0
    return 2 * precision * recall / (precision + recall)


def _numbers_agree(gold: set[str], predicted: set[str]) -> bool:
    gold_numbers = {token for token in gold if _is_number(token)}
    return not gold_numbers or bool(gold_numbers & {token for token in predicted if _is_number(token)})


def _best_assignment(scores: list[list[float]]) -> float:
    """The largest total of a one-to-one assignment of rows to columns (each used at most once)."""
    rows = len(scores)
    cols = len(scores[0]) if rows else 0
    if rows == 0 or cols == 0:
        return 0.0
    if rows > cols:  # assign over the smaller side: the memo is keyed by subsets of the larger one
        scores = [list(column) for column in zip(*scores, strict=True)]
        rows, cols = cols, rows
    if cols > 16:  # no real DROP answer has this many spans; greedy keeps it bounded
        used: set[int] = set()
        total = 0.0
        for row in scores:
            free = [(value, col) for col, value in enumerate(row) if col not in used]
            value, col = max(free)
            used.add(col)
            total += value
        return total
    memo: dict[tuple[int, int], float] = {}

    def best(row: int, used: int) -> float:
        if row == rows:
            return 0.0
        key = (row, used)
        if key not in memo:
            memo[key] = max(
                scores[row][col] + best(row + 1, used | (1 << col))
                for col in range(cols)
                if not used & (1 << col)
            )
        return memo[key]

    return best(0, 0)


def drop_metrics(predicted: Answer, gold: Answer) -> tuple[float, float]:
    """``(exact_match, f1)`` of a predicted answer against one gold answer (each a span or spans)."""
    predicted_spans, predicted_bags = _bags(predicted)
    gold_spans, gold_bags = _bags(gold)
    exact = float(set(predicted_spans) == set(gold_spans) and len(predicted_spans) == len(gold_spans))
    scores = [[_bag_f1(p, g) if _numbers_agree(g, p) else 0.0 for p in predicted_bags] for g in gold_bags]
    total = _best_assignment(scores)
    f1 = total / max(len(gold_bags), len(predicted_bags), 1)
    return exact, round(f1, 2)


def drop_score(predicted: Answer, gold_answers: Sequence[Answer]) -> tuple[float, float]:
    """The best ``(exact_match, f1)`` of ``predicted`` over ``gold_answers`` (each maximised apart, as
    DROP does); ``(0.0, 0.0)`` without gold answers."""
    best_em = best_f1 = 0.0
    for gold in gold_answers:
        em, f1 = drop_metrics(predicted, gold)
        best_em, best_f1 = max(best_em, em), max(best_f1, f1)
    return best_em, best_f1


def _drop_answer(answer: Mapping[str, Any]) -> tuple[str, ...]:
    number = answer.get("number")
    if number not in (None, ""):
        return (str(number),)
    spans = [str(span) for span in answer.get("spans") or []]
    if spans:
        return tuple(spans)
    date = answer.get("date") or {}
    return (" ".join(str(date.get(key) or "") for key in ("day", "month", "year")).strip(),)


def drop_gold_answers(row: Mapping[str, Any]) -> list[tuple[str, ...]]:
    """The distinct gold answers of a DROP row: ``answer`` first, then each of ``validated_answers``
    (a dict of parallel ``number`` / ``date`` / ``spans`` lists, or a list of answer dicts). An answer is a
    number, else its spans, else its date as ``"day month year"``; empty answers are left out."""
    candidates: list[Mapping[str, Any]] = []
    if isinstance(row.get("answer"), Mapping):
        candidates.append(row["answer"])
    validated = row.get("validated_answers") or []
    if isinstance(validated, Mapping):
        count = max((len(validated.get(key) or []) for key in ("number", "date", "spans")), default=0)
        for index in range(count):
            candidates.append(
                {key: (validated.get(key) or [None] * count)[index] for key in ("number", "date", "spans")}
            )
    else:
        candidates.extend(item for item in validated if isinstance(item, Mapping))
    answers: list[tuple[str, ...]] = []
    for candidate in candidates:
        answer = _drop_answer(candidate)
        if any(span.strip() for span in answer) and answer not in answers:
            answers.append(answer)
    return answers


# --------------------------------------------------------------------------------------------- grids

_NESTED = re.compile(r"\[\s*\[[\d,\s\[\]]*\]\s*\]")
_ROW = re.compile(r"\[\s*\d+(?:\s*,\s*\d+)*\s*\]")


def is_grid(value: Any) -> bool:
    """A non-empty rectangular list of non-empty lists of integers (bools are not integers)."""
    if not isinstance(value, list) or not value:
        return False
    if not all(isinstance(row, list) and row for row in value):
        return False
    width = len(value[0])
    return all(
        len(row) == width and all(isinstance(cell, int) and not isinstance(cell, bool) for cell in row)
        for row in value
    )


def _as_lists(value: Any) -> Any:
    if isinstance(value, (list, tuple)):
        return [_as_lists(item) for item in value]
    return value


def _literal(text: str) -> Any:
    for parse in (json.loads, ast.literal_eval):
        try:
            return _as_lists(parse(text))
        except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
            continue
    return None


def parse_grid(text: Optional[str]) -> Optional[Grid]:
    """The grid written in ``text``, or None.

    Tried in order: the whole text as JSON or a Python literal (tuples read as lists); the last ``[[...]]`` block in it; the
    bracketed rows ``[1, 2, 3]`` in it, one grid row each. A ragged or non-integer grid is None.
    """
    if not text or not text.strip():
        return None
    text = text.strip()
    value = _literal(text)
    if is_grid(value):
        return value
    for block in reversed(_NESTED.findall(text)):
        value = _literal(block)
        if is_grid(value):
            return value
    rows = [_literal(row) for row in _ROW.findall(text)]
    return rows if is_grid(rows) else None


def grids_equal(predicted: Optional[Sequence[Sequence[int]]], gold: Sequence[Sequence[int]]) -> bool:
    """Whether ``predicted`` has ``gold``'s shape and every cell equal."""
    if predicted is None:
        return False
    return [list(row) for row in predicted] == [list(row) for row in gold]


# --------------------------------------------------------------------------------------- free-form replies

ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)
_PHRASE = re.compile(
    r"(?:final\s+answer|the\s+answer\s+is|\banswer\s*:)\s*(?:is)?\s*:?\s*(.+)", re.IGNORECASE
)


def _one(candidates: Sequence[str]) -> tuple[Optional[str], bool]:
    """The one distinct candidate (whitespace ignored), or ``(None, True)`` when they differ."""
    distinct = list(dict.fromkeys(" ".join(c.split()) for c in candidates if c.strip()))
    if len(distinct) > 1:
        return None, True
    return (distinct[0] if distinct else None), False


def extract_freeform(reply: Optional[str]) -> tuple[Optional[str], str]:
    """``(answer, method)`` of a free-form reply (see the module docstring). ``method``: ``answer_tag``,
    ``boxed``, ``answer_phrase`` or ``last_line``; without an answer ``empty``, ``unclosed_think``,
    ``ambiguous`` (tags or boxes that differ) or ``no_answer``."""
    if reply is None or not reply.strip():
        return None, "empty"
    section = answer_section(reply)
    if section is None:
        return None, "unclosed_think"
    for method, candidates in (
        ("answer_tag", ANSWER_TAG.findall(section)),
        ("boxed", boxed_answers(section)),
    ):
        if candidates:
            answer, ambiguous = _one(candidates)
            if ambiguous:
                return None, "ambiguous"
            if answer is not None:
                return answer, method
    lines = [line.strip() for line in section.strip().splitlines() if line.strip()]
    if not lines:
        return None, "no_answer"
    phrases = [m.group(1) for line in lines for m in [_PHRASE.search(line)] if m]
    if phrases:
        answer = phrases[-1].strip().rstrip(".").strip(" *_").rstrip(".").strip()
        if answer:
            return answer, "answer_phrase"
    return lines[-1].strip("*").strip(), "last_line"
