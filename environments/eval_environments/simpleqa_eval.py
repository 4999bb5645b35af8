"""SimpleQA: short fact-seeking questions, graded correct / incorrect / not attempted by an LLM judge.

Data: ``lighteval/SimpleQA`` (split ``test``): ``problem``, ``answer`` and ``metadata`` (its ``topic``; a dict,
or its text as in the CSV release).
``--env.dataset_path`` reads a local file in that schema.

Prompt: the question, with the answer asked for inside ``<answer></answer>``. The answer graded is the
``<answer>`` content after the think block (the whole text after it when there is no tag); a reply whose
think block never closes, or that is empty, is not attempted (no judge is asked).

Grading (``--env.use_llm_judge true``, the default): the judge sees the question, the gold target and the
predicted answer with SimpleQA's grading rubric and answers ``A`` (correct), ``B`` (incorrect) or ``C``
(not attempted); any other reply is a judge failure, counted apart (``eval/unscored``,
``eval/judge_failures``). ``--env.use_llm_judge false`` grades by string match instead (the original's
default Nous mode: the normalised gold equals, contains or is contained in the answer), with no
not-attempted grade.

Reports: ``eval/accuracy`` (share graded correct, with its standard error), ``eval/correct``,
``eval/incorrect``, ``eval/not_attempted``, ``eval/correct_given_attempted`` and ``eval/f_score`` (the
harmonic mean of the two, SimpleQA's headline), accuracy by topic.

``python environments/eval_environments/simpleqa_eval.py evaluate --openai.base_url ... --openai.model_name
MODEL --judge.base_url https://api.openai.com/v1 --judge.model_name gpt-4o-2024-08-06 --judge.api_key KEY``
"""

from __future__ import annotations

import ast
import re
from collections.abc import Sequence
from typing import Any, Optional

from pydantic import Field

from atroposlib.evals import EvalItem, Reply, Row, Score
from atroposlib.evals.judged import JudgedEval, JudgedEvalConfig, answer_text, judged_score

PROMPT = """Answer the question below briefly and precisely. Put your final answer inside <answer></answer> tags, for example <answer>Ada Lovelace</answer>.

Question: {question}"""

GRADER = """You grade answers to short factual questions. Given a question, its gold target and a predicted answer, grade the prediction as one of:
A: CORRECT - it contains the information of the gold target and nothing that contradicts it. Wording, capitalisation, order and small misspellings of names do not matter; hedging is fine as long as the gold target is given and no wrong statement is made. A number must match the gold target to its last significant figure.
B: INCORRECT - it states something that contradicts the gold target, even with hedging (for example naming several candidates, one of them wrong).
C: NOT_ATTEMPTED - it neither gives the gold target's information nor contradicts it (for example "I don't know", or only part of the needed information without any wrong statement).
Information the question already implies may be left out of the prediction (a city without its country when the question asks for a city, a first name when the surname is obvious).

Question: {question}
Gold target: {target}
Predicted answer: {predicted}

Reply with the letter only: A, B or C."""

GRADES = {"A": "CORRECT", "B": "INCORRECT", "C": "NOT_ATTEMPTED"}
_LETTER = re.compile(r"^\W*([ABC])\W*$")
_WORD = re.compile(r"NOT[_ ]ATTEMPTED|INCORRECT|CORRECT")


def parse_grade(text: str) -> Optional[str]:
    """``CORRECT``, ``INCORRECT`` or ``NOT_ATTEMPTED`` from a judge reply: a lone letter ``A``/``B``/``C``,
    or exactly one grade named in words; None otherwise (both letters and words are read upper-cased)."""
    upper = text.strip().upper()
    letter = _LETTER.match(upper)
    if letter:
        return GRADES[letter.group(1)]
    named = {word.replace(" ", "_") for word in _WORD.findall(upper)}
    return named.pop() if len(named) == 1 else None


def string_match(gold: str, predicted: str) -> bool:
    """The original's string grading: case-insensitive equality or containment either way."""
    gold, predicted = gold.lower().strip(), predicted.lower().strip()
    return bool(predicted) and (gold == predicted or gold in predicted or predicted in gold)


_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL | re.IGNORECASE)


def predicted_answer(reply: Reply) -> Optional[str]:
    """The ``<answer>`` content after the think block, else all text after it; None when there is none."""
    text = answer_text(reply)
    if text is None:
        return None
    tagged = _ANSWER_TAG.search(text)
    answer = tagged.group(1).strip() if tagged else text
    return answer or None


def topic_of(metadata: Any) -> Optional[str]:
    """The ``topic`` of a row's ``metadata``: a dict, or its Python/JSON text as the CSV release stores it."""
    if isinstance(metadata, str):
        try:
            metadata = ast.literal_eval(metadata)
        except (ValueError, SyntaxError, MemoryError, RecursionError):
            return None
    topic = metadata.get("topic") if isinstance(metadata, dict) else None
    return str(topic) if topic else None


class SimpleQAEvalConfig(JudgedEvalConfig):
    """SimpleQA's settings (the original's names)."""

    dataset_name: str = Field(default="lighteval/SimpleQA", description="Hugging Face data set of SimpleQA.")
    eval_split: str = Field(default="test", description="Split to evaluate on.")
    use_llm_judge: bool = Field(
        default=True, description="Grade with the LLM judge (False: the original's string match)."
    )
    judge_model_name: str = Field(
        default="gpt-4o-2024-08-06", description="SimpleQA's official grader model."
    )
    judge_temperature: float = Field(default=0.0, ge=0.0, description="Sampling temperature of the judge.")


class SimpleQAEvalEnv(JudgedEval):
    """SimpleQA (see the module docstring)."""

    name = "simpleqa_eval"
    env_config_cls = SimpleQAEvalConfig
    config: SimpleQAEvalConfig
    required_fields = ("problem", "answer")
    breakdowns = ("topic",)

    def uses_judge(self) -> bool:
        return self.config.use_llm_judge

    def make_item(self, row: Row) -> EvalItem:
        data = row.data
        topic = topic_of(data.get("metadata"))
        question = str(data["problem"])
        return EvalItem(
            id=str(row.index),
            prompt=PROMPT.format(question=question),
            gold=str(data["answer"]),
            groups={"topic": str(topic or "unknown")},
            fields={"question": question},
        )

    async def score(self, item: EvalItem, reply: Reply) -> Score:
        predicted = predicted_answer(reply)
        if not self.config.use_llm_judge:
            right = predicted is not None and string_match(item.gold, predicted)
            grade = "CORRECT" if right else "INCORRECT"
            return Score(
                float(right), extracted=predicted, method="string_match", metrics=_grade_metrics(grade)
            )
        if predicted is None:
            grade = "NOT_ATTEMPTED"
            return judged_score(0.0, [], method="no_answer", metrics=_grade_metrics(grade), grade=grade)
        question = item.fields["question"]
        prompt = GRADER.format(question=question, target=item.gold, predicted=predicted)
        judgement = await self.judge.grade([{"role": "user", "content": prompt}], parse_grade)
        grade = judgement.value
        if grade is None:
            return judged_score(None, [judgement], extracted=predicted, grade=None)
        return judged_score(
            float(grade == "CORRECT"),
            [judgement],
            extracted=predicted,
            metrics=_grade_metrics(grade),
            grade=grade,
        )

    def extra_metrics(self, samples: Sequence[dict[str, Any]]) -> dict[str, float]:
        """The judge-failure counts and SimpleQA's ``correct_given_attempted`` and ``f_score``."""
        metrics = super().extra_metrics(samples)
        grades = [s["metrics"] for s in samples if s.get("score") is not None]
        if grades:
            correct = sum(g["correct"] for g in grades) / len(grades)
            attempted = sum(g["correct"] + g["incorrect"] for g in grades) / len(grades)
            given = correct / attempted if attempted else 0.0
            metrics["eval/correct_given_attempted"] = given
            metrics["eval/f_score"] = 2 * correct * given / (correct + given) if correct + given else 0.0
        return metrics


def _grade_metrics(grade: str) -> dict[str, float]:
    return {
        "correct": float(grade == "CORRECT"),
        "incorrect": float(grade == "INCORRECT"),
        "not_attempted": float(grade == "NOT_ATTEMPTED"),
    }


if __name__ == "__main__":
    SimpleQAEvalEnv.cli()
