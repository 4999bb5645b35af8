"""Math answer verification shared by the accuracy-style rewards (math_verify with a numeric fallback)."""

from __future__ import annotations

import logging
import re
from typing import Any

from latex2sympy2_extended import NormalizationConfig
from math_verify import LatexExtractionConfig, parse, verify

logger = logging.getLogger(__name__)

BOXED_RE = re.compile(r"\\boxed\{([^}]+)\}")
GSM8K_FINAL_RE = re.compile(r"####\s*(.*?)(?:\s*$|\n)")
GSM8K_NUMBER_RE = re.compile(r"####\s*(-?[\d,]*\.?\d+)")

_ANSWER_EXTRACTION = [
    LatexExtractionConfig(
        normalization_config=NormalizationConfig(
            nits=False,
            malformed_operators=False,
            basic_latex=True,
            equations=False,  # deprecated in latex2sympy2_extended>=1.1: equations are handled by the parser
            boxed="all",
            units=True,
        ),
        boxed_match_priority=0,  # a \boxed{} answer wins over other LaTeX in the text
        try_extract_without_anchor=False,
    )
]
_GOLD_EXTRACTION = [LatexExtractionConfig()]


def to_number(text: str) -> float:
    """``"1,234.5"`` -> 1234.5. Raises ValueError when the text is not a number."""
    return float(str(text).replace(",", "").strip())


def extract_final_answer(text: str) -> str:
    """The final answer of a worked solution: after ``####`` (GSM8K), else inside the first ``\\boxed{}``,
    else the text itself."""
    if "####" in text:
        match = GSM8K_FINAL_RE.search(text)
        if match:
            return match.group(1).strip()
    match = BOXED_RE.search(text)
    if match:
        return match.group(1).strip()
    return text


def _gold_number(gold: Any) -> float | None:
    if isinstance(gold, bool):
        return None
    if isinstance(gold, (int, float)):
        return float(gold)
    if isinstance(gold, str):
        candidate = gold.replace("\\boxed{", "").replace("}", "") if "\\boxed{" in gold else gold
        try:
            return to_number(candidate)
        except ValueError:
            return None
    return None


def verify_answer(content: str, gold_answer: Any, tolerance: float = 1e-6) -> bool:
    """Whether ``content`` (a model answer) states ``gold_answer``.

    The gold may be a number, a plain answer string, a ``\\boxed{}`` string, or a GSM8K worked solution
    ending in ``#### answer``. The answer is parsed with math_verify (``\\boxed{}`` first) and verified
    symbolically; if that is inconclusive and the gold is numeric, the first ``\\boxed{}`` (or a ``####``
    number) of the content is compared within ``tolerance``.
    """
    if isinstance(gold_answer, str) and "####" in gold_answer:
        gold_answer = extract_final_answer(gold_answer)
    gold_value = _gold_number(gold_answer)

    try:
        answer_parsed = parse(content, extraction_config=_ANSWER_EXTRACTION, extraction_mode="first_match")
        if answer_parsed:
            gold_text = str(gold_answer)
            if "\\boxed" not in gold_text:
                gold_text = f"\\boxed{{{gold_text}}}"
            gold_parsed = parse(gold_text, extraction_mode="first_match", extraction_config=_GOLD_EXTRACTION)
            if gold_parsed and verify(gold_parsed, answer_parsed):
                return True
    except Exception as exc:  # math_verify can raise on exotic LaTeX; fall back to numbers
        logger.debug("math_verify could not check %r: %s", content[:200], exc)

    if gold_value is None:
        return False
    boxed = BOXED_RE.findall(content)
    if boxed:
        try:
            return abs(to_number(boxed[0]) - gold_value) < tolerance
        except ValueError:
            pass
    match = GSM8K_NUMBER_RE.search(content)
    if match:
        try:
            return abs(to_number(match.group(1)) - gold_value) < tolerance
        except ValueError:
            pass
    return False


def answer_part(content: str, split_on_think_tag: bool = True) -> str:
    """The text after the last ``</think>`` (or all of it)."""
    if split_on_think_tag and "</think>" in content:
        return content.split("</think>")[-1]
    return content
