"""MixEval: a mixture of ground-truth benchmarks (free-form and multiple choice), graded by an LLM judge
against the gold answers.

Data: ``MixEval/MixEval``, configuration ``MixEval`` (``--env.difficulty easy``) or ``MixEval_Hard``
(``hard``), splits ``free_form`` and ``multiple_choice`` (``--env.question_types``): ``prompt``, ``context``,
``options`` (multiple choice), ``target`` (gold answers; option indices for multiple choice),
``benchmark_name``. ``--env.dataset_path DIR`` reads a directory holding ``free_form.jsonl`` and/or
``multiple_choice.jsonl`` (or .json/.parquet/.csv) in that schema.

Prompt: MixEval's: the context when there is one, the question and, for multiple choice, the options
``A. ...`` with "Answer with the option letter from the given choices directly."; free-form questions end
with "Answer the question shortly." (step-by-step wording for BBH, GSM8k and MATH).

Grading: the judge sees the question, the gold answer(s) and the model's answer (after its think block). A
free-form answer gets a correctness score 0.0-1.0 in steps of 0.1, a multiple-choice answer 0 or 1, written
``[[score]]``; a judge reply without one such score is a judge failure, counted apart. A reply with no
answer (empty, or a think block that never closes) scores 0 without a judge.

Reports: ``eval/score`` (with its standard error), by question type and by source benchmark, and the
judge-failure counts.

``python environments/eval_environments/mixeval_eval.py evaluate --openai.base_url ... --openai.model_name
MODEL --judge.base_url https://api.openai.com/v1 --judge.model_name gpt-4o --judge.api_key KEY``
"""

from __future__ import annotations

import re
import string
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import Field

from atroposlib.envs.data_loading import LOCAL_FORMATS, DatasetError
from atroposlib.evals import EvalItem, HubSet, Reply, Row, RowError, Score, load_eval_rows
from atroposlib.evals.judged import JudgedEval, JudgedEvalConfig, answer_text, judged_score

SPLITS = {"freeform": "free_form", "multichoice": "multiple_choice"}
MULTI_CHOICE_PROMPT = "Answer with the option letter from the given choices directly."
FREE_FORM_PROMPT = "Answer the question shortly."
STEP_BY_STEP_PROMPT = "Answer the question. \nLet's think step by step."
STEP_BY_STEP_BENCHMARKS = ("BBH", "GSM8k", "MATH")

FREEFORM_JUDGE_SYSTEM = "You are acting as a judge."
FREEFORM_JUDGE = """You are given a question, its golden answer(s) and a model's answer; the question's context is not shown. Judge how correct the model's answer is against the golden answer(s) (matching any one of them is fully correct). First reason briefly about how the answer agrees with or contradicts the golden answer(s), then give a correctness score, one of 0.0 (totally wrong), 0.1, 0.2, ..., 0.9, 1.0 (totally right), written exactly like "The correctness score: [[0.5]]".

Question: {question}
Golden Answer(s): {gold}
Model's Answer: {answer}
Your Judgment:
"""
CHOICE_JUDGE_SYSTEM = "You are acting as an option extractor."
CHOICE_JUDGE = """You are given a multiple-choice question, its options, the golden answer and a model's answer; the question's context is not shown. Work out which option the model chose and whether it is the golden answer. The correctness score is 0 (incorrect) or 1 (correct), written exactly like "The correctness score: [[1]]".

Question: {question}
Options:
{options}
Golden Answer: {gold}
Model's Answer: {answer}
Your Judgment:
"""
_SCORE = re.compile(r"\[\[\s*([0-9](?:\.[0-9]+)?)\s*\]\]")


def _has_context(context: Any) -> bool:
    return bool(context) and str(context).strip().lower() not in ("none", "null")


def format_options(options: list[Any]) -> str:
    """``A. first`` ... one option per line."""
    return "\n".join(f"{string.ascii_uppercase[i]}. {option}" for i, option in enumerate(options))


def _single_score(text: str, allowed: set[float]) -> Optional[float]:
    scores = {float(value) for value in _SCORE.findall(text)}
    if len(scores) != 1:
        return None
    score = scores.pop()
    return score if score in allowed else None


def parse_freeform_score(text: str) -> Optional[float]:
    """The ``[[score]]`` of a free-form judgement (0.0-1.0 in steps of 0.1); None when absent, out of range
    or ambiguous."""
    return _single_score(text, {round(0.1 * i, 1) for i in range(11)})


def parse_choice_score(text: str) -> Optional[float]:
    """The ``[[0]]`` or ``[[1]]`` of a multiple-choice judgement; None otherwise."""
    return _single_score(text, {0.0, 1.0})


class MixEvalConfig(JudgedEvalConfig):
    """MixEval's settings (the original's names)."""

    dataset_name: str = Field(default="MixEval/MixEval", description="Hugging Face data set of MixEval.")
    difficulty: Literal["easy", "hard"] = Field(
        default="easy", description="easy: the MixEval configuration; hard: MixEval_Hard."
    )
    question_types: list[Literal["freeform", "multichoice"]] = Field(
        default_factory=lambda: ["freeform", "multichoice"], description="Question types to evaluate."
    )
    judge_temperature: float = Field(default=0.2, ge=0.0, description="Sampling temperature of the judge.")
    max_eval_workers: int = Field(default=128, description="Items evaluated at once.")


class MixEvalEnv(JudgedEval):
    """MixEval (see the module docstring)."""

    name = "mixeval_eval"
    env_config_cls = MixEvalConfig
    config: MixEvalConfig
    required_fields = ("prompt", "target")
    breakdowns = ("question_type", "benchmark")
    metric = "score"

    def _source(self, split: str) -> Optional[str]:
        path = self.config.dataset_path
        if path is None:
            return None
        directory = Path(path)
        if not directory.is_dir():
            raise DatasetError(f"{path}: MixEval reads a directory of free_form/multiple_choice files")
        for suffix in LOCAL_FORMATS:
            candidate = directory / f"{split}{suffix}"
            if candidate.is_file():
                return str(candidate)
        raise DatasetError(f"{path}: no {split} file ({', '.join(split + s for s in LOCAL_FORMATS)})")

    def load_rows(self) -> list[Row]:
        """The rows of every selected split, each tagged with its question type."""
        cfg = self.config
        config_name = "MixEval" if cfg.difficulty == "easy" else "MixEval_Hard"
        rows: list[Row] = []
        for kind in dict.fromkeys(cfg.question_types):
            split = SPLITS[kind]
            hub = HubSet(cfg.dataset_name, split, (config_name,))
            for row in load_eval_rows(self._source(split), hub, self.required_fields):
                rows.append(Row({**row.data, "_question_type": kind}, row.source, row.index, row.subset))
        return rows

    def make_item(self, row: Row) -> EvalItem:
        data = row.data
        kind = data["_question_type"]
        targets = data["target"]
        if not isinstance(targets, list) or not targets:
            raise RowError("target", "must be a non-empty list")
        context = data.get("context")
        question = str(data["prompt"])
        benchmark = str(data.get("benchmark_name") or "unknown")
        fields: dict[str, Any] = {"question": question}
        if kind == "multichoice":
            options = data.get("options")
            if not isinstance(options, list) or not options:
                raise RowError("options", "must be a non-empty list")
            index = int(targets[0])
            if not 0 <= index < len(options):
                raise RowError("target", f"option index {index} is out of range")
            prompt = f"{question}\n{format_options(options)}\n{MULTI_CHOICE_PROMPT}"
            if _has_context(context):
                prompt = f"{context}\n{prompt}"
            gold = f"{string.ascii_uppercase[index]}. {options[index]}"
            fields["options"] = [str(o) for o in options]
        else:
            suffix = STEP_BY_STEP_PROMPT if benchmark in STEP_BY_STEP_BENCHMARKS else FREE_FORM_PROMPT
            body = f"{question}\n{suffix}"
            prompt = f"Question: {context}\n{body}" if _has_context(context) else f"Question: {body}"
            gold = "; ".join(f"<answer {i + 1}> {t}" for i, t in enumerate(targets))
        return EvalItem(
            id=f"{kind}_{data.get('id', row.index)}",
            prompt=prompt,
            gold=gold,
            groups={"question_type": kind, "benchmark": benchmark},
            fields=fields,
        )

    async def score(self, item: EvalItem, reply: Reply) -> Score:
        answer = answer_text(reply)
        if answer is None:
            return judged_score(0.0, [], method="no_answer")
        question = item.fields["question"]
        if "options" in item.fields:
            user = CHOICE_JUDGE.format(
                question=question,
                options=format_options(item.fields["options"]),
                gold=item.gold,
                answer=answer,
            )
            messages = [{"role": "system", "content": CHOICE_JUDGE_SYSTEM}, {"role": "user", "content": user}]
            judgement = await self.judge.grade(messages, parse_choice_score)
        else:
            user = FREEFORM_JUDGE.format(question=question, gold=item.gold, answer=answer)
            messages = [
                {"role": "system", "content": FREEFORM_JUDGE_SYSTEM},
                {"role": "user", "content": user},
            ]
            judgement = await self.judge.grade(messages, parse_freeform_score)
        return judged_score(judgement.value, [judgement], extracted=answer)


if __name__ == "__main__":
    MixEvalEnv.cli()
