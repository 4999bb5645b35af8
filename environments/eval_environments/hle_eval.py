"""Humanity's Last Exam, graded as its official evaluation grades: an LLM judge decides whether the final
answer matches, and accuracy comes with the calibration error of the model's stated confidence.

Data: ``cais/hle`` (configuration ``default``, split ``test``): ``id``, ``question``, ``answer``,
``answer_type`` (``exactMatch`` or ``multipleChoice``), ``category``, ``image``. Questions with an image
are left out (the evaluation is text-only). ``--env.dataset_path`` reads a local file in that schema.

Prompt: the question, then HLE's response format: an explanation, the final answer (``Exact Answer:``, or
``Answer:`` for multiple choice) and ``Confidence:`` as a percentage.

Grading: the judge reads the question, the model's reply (after its think block) and the correct answer,
and answers in HLE's judge format: ``extracted_final_answer:``, ``reasoning:``, ``correct: yes|no``,
``confidence:`` (the confidence the reply states, 100 when it states none). A judgement without one
``correct: yes`` or ``correct: no`` is a judge failure (counted apart). A reply with no answer (empty, or a
think block that never closes) is wrong, with confidence 100, without a judge.

``--env.use_llm_judge false`` grades without a judge, by the original's string match: the answer after
``Exact Answer:`` / ``Answer:`` (else an ``<answer>`` tag, else the last line), normalised (case folded
unless ``case_sensitive``, end punctuation and extra spaces dropped), equal to the gold answer or, with
``fuzzy_match``, containing it, contained in it or numerically equal; the confidence is read from the
reply's ``Confidence:`` line (100 when absent).

Reports: ``eval/accuracy`` with its standard error, ``eval/accuracy_ci95`` (HLE's 1.96 * sqrt(p(1-p)/n)),
``eval/calibration_error`` (HLE's RMS calibration error, in percent: items sorted by confidence, bins of
``calibration_bin_size`` with the remainder in the last bin), accuracy by category.

``python environments/eval_environments/hle_eval.py evaluate --openai.base_url ... --openai.model_name MODEL
--judge.base_url https://api.openai.com/v1 --judge.model_name o3-mini-2025-01-31 --judge.api_key KEY``
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

from pydantic import Field

from atroposlib.evals import EvalItem, Reply, Row, Score
from atroposlib.evals.judged import JudgedEval, JudgedEvalConfig, answer_text, judged_score

EXACT_FORMAT = (
    "Your response should be in the following format:\nExplanation: {your explanation for your final answer}\n"
    "Exact Answer: {your succinct, final answer}\nConfidence: {your confidence score between 0% and 100% for "
    "your answer}"
)
CHOICE_FORMAT = (
    "Your response should be in the following format:\nExplanation: {your explanation for your answer choice}\n"
    "Answer: {your chosen answer}\nConfidence: {your confidence score between 0% and 100% for your answer}"
)
JUDGE_PROMPT = """Decide whether the response below answers the question correctly, judging only by the precise and unambiguous correct answer given.

[question]: {question}

[response]: {response}

[correct_answer]: {correct_answer}

Answer in exactly this format:

extracted_final_answer: the final exact answer taken from the response, or None when there is none.

reasoning: why the extracted answer is or is not the correct answer. Only look for meaningful differences between them; do not solve the problem again and do not argue for another answer.

correct: yes if the extracted answer matches the correct answer, or is within a small margin of error for numerical problems; no otherwise (any inconsistency, ambiguity, non-equivalence, or a wrong answer).

confidence: the confidence score between 0% and 100% stated in the response, or 100 when it states none."""

_CORRECT = re.compile(r"^\W*correct\W*:\W*(yes|no)\b", re.IGNORECASE | re.MULTILINE)
_CONFIDENCE = re.compile(r"^\W*confidence\W*:\W*(\d+(?:\.\d+)?)\s*%?", re.IGNORECASE | re.MULTILINE)
_EXTRACTED = re.compile(r"^\W*extracted_final_answer\W*:[\s*]*(.*?)[\s*]*$", re.IGNORECASE | re.MULTILINE)


@dataclass(frozen=True)
class HLEVerdict:
    """The judge's verdict: whether the answer is right, the reply's confidence (0-100) and the answer it
    read."""

    correct: bool
    confidence: float
    extracted: Optional[str]


def parse_judgement(text: str) -> Optional[HLEVerdict]:
    """The verdict of a judge reply in HLE's format; None when ``correct:`` is missing or says both."""
    verdicts = {v.lower() for v in _CORRECT.findall(text)}
    if len(verdicts) != 1:
        return None
    confidence = _CONFIDENCE.search(text)
    value = min(100.0, float(confidence.group(1))) if confidence else 100.0
    extracted = _EXTRACTED.search(text)
    answer = extracted.group(1).strip() if extracted else None
    return HLEVerdict(verdicts.pop() == "yes", value, None if answer in (None, "", "None") else answer)


def calibration_error(confidences: Sequence[float], correct: Sequence[float], bin_size: int = 100) -> float:
    """HLE's RMS calibration error in percent: items sorted by confidence (0-100) in bins of ``bin_size``
    (the last bin takes the remainder; fewer items than one bin make one bin), each bin's squared gap between
    mean confidence and accuracy weighted by its share of items."""
    pairs = sorted(zip(confidences, correct, strict=True))
    n = len(pairs)
    if n == 0:
        return 0.0
    starts = list(range(0, max(n - bin_size, 0) + 1, bin_size)) if n >= bin_size else [0]
    bins = [pairs[start : (starts[i + 1] if i + 1 < len(starts) else n)] for i, start in enumerate(starts)]
    total = 0.0
    for chunk in bins:
        gap = sum(c for c, _ in chunk) / len(chunk) / 100 - sum(r for _, r in chunk) / len(chunk)
        total += len(chunk) / n * gap * gap
    return 100 * math.sqrt(total)


_ANSWER_LINE = re.compile(r"^\W*(?:exact\s+)?answer\W*:\s*(.+?)\s*$", re.IGNORECASE | re.MULTILINE)
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)


def reply_answer(response: str) -> Optional[str]:
    """The final answer a reply states: its last ``Exact Answer:`` / ``Answer:`` line, else its ``<answer>``
    tag, else its last non-empty line."""
    lines = _ANSWER_LINE.findall(response)
    if lines:
        return lines[-1].strip()
    tagged = _ANSWER_TAG.search(response)
    if tagged and tagged.group(1).strip():
        return tagged.group(1).strip()
    rest = [line.strip() for line in response.splitlines() if line.strip()]
    return rest[-1] if rest else None


def _normalised(text: str, case_sensitive: bool) -> str:
    text = text.strip() if case_sensitive else text.strip().lower()
    return " ".join(text.strip(".,;:!?\"'").split())


def string_match(predicted: str, gold: str, fuzzy: bool = True, case_sensitive: bool = False) -> bool:
    """The original's string grading (see the module docstring)."""
    pred, want = _normalised(predicted, case_sensitive), _normalised(gold, case_sensitive)
    if not pred:
        return False
    if pred == want:
        return True
    if not fuzzy:
        return False
    if want in pred or pred in want:
        return True
    try:
        return abs(float(pred.replace(",", "")) - float(want.replace(",", ""))) < 1e-6
    except ValueError:
        return False


class HLEEvalConfig(JudgedEvalConfig):
    """HLE's settings (the original's names)."""

    dataset_name: str = Field(default="cais/hle", description="Hugging Face data set of HLE.")
    subset: str = Field(default="default", description="Configuration of the data set.")
    eval_split: str = Field(default="test", description="Split to evaluate on.")
    judge_model_name: str = Field(default="o3-mini-2025-01-31", description="HLE's official judge model.")
    calibration_bin_size: int = Field(default=100, ge=1, description="Items per calibration bin (HLE: 100).")
    use_llm_judge: bool = Field(
        default=True, description="Grade with the judge (False: the original's string match)."
    )
    fuzzy_match: bool = Field(
        default=True, description="String match: accept containment and numeric equality."
    )
    case_sensitive: bool = Field(default=False, description="String match: compare with case.")


class HLEEvalEnv(JudgedEval):
    """Humanity's Last Exam (see the module docstring)."""

    name = "hle_eval"
    env_config_cls = HLEEvalConfig
    config: HLEEvalConfig
    required_fields = ("question", "answer")
    breakdowns = ("category",)

    def make_item(self, row: Row) -> Optional[EvalItem]:
        data = row.data
        if data.get("image"):
            return None
        question = str(data["question"])
        choice = data.get("answer_type") == "multipleChoice"
        return EvalItem(
            id=str(data.get("id", row.index)),
            prompt=f"{question}\n\n{CHOICE_FORMAT if choice else EXACT_FORMAT}",
            gold=str(data["answer"]),
            groups={"category": str(data.get("category") or "unknown")},
            fields={"question": question, "answer_type": data.get("answer_type")},
        )

    def uses_judge(self) -> bool:
        return self.config.use_llm_judge

    async def score(self, item: EvalItem, reply: Reply) -> Score:
        response = answer_text(reply)
        if response is None:
            return judged_score(0.0, [], method="no_answer", confidence=100.0)
        if not self.config.use_llm_judge:
            answer = reply_answer(response)
            right = answer is not None and string_match(
                answer, item.gold, self.config.fuzzy_match, self.config.case_sensitive
            )
            stated = _CONFIDENCE.search(response)
            confidence = min(100.0, float(stated.group(1))) if stated else 100.0
            return Score(
                float(right), extracted=answer, method="string_match", fields={"confidence": confidence}
            )
        prompt = JUDGE_PROMPT.format(
            question=item.fields["question"], response=response, correct_answer=item.gold
        )
        judgement = await self.judge.grade([{"role": "user", "content": prompt}], parse_judgement)
        verdict = judgement.value
        if verdict is None:
            return judged_score(None, [judgement])
        return judged_score(
            float(verdict.correct), [judgement], extracted=verdict.extracted, confidence=verdict.confidence
        )

    def extra_metrics(self, samples: Sequence[dict[str, Any]]) -> dict[str, float]:
        """The judge-failure counts, HLE's 95% interval half-width and its calibration error."""
        metrics = super().extra_metrics(samples)
        scored = [s for s in samples if s.get("score") is not None]
        if scored:
            accuracy = sum(s["score"] for s in scored) / len(scored)
            metrics["eval/accuracy_ci95"] = 1.96 * math.sqrt(accuracy * (1 - accuracy) / len(scored))
            metrics["eval/calibration_error"] = calibration_error(
                [s["confidence"] for s in scored],
                [s["score"] for s in scored],
                self.config.calibration_bin_size,
            )
        return metrics


if __name__ == "__main__":
    HLEEvalEnv.cli()
