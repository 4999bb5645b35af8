"""DROP: reading comprehension with discrete reasoning (counting, arithmetic, dates, several spans).

Data: ``lighteval/drop_harness`` on the hub, split ``validation``. ``--env.dataset_path`` reads a local file
in the hub schema (``passage``, ``question``, ``query_id``, ``answer``: ``number`` / ``date`` {day, month,
year} / ``spans``, and ``validated_answers``: the same fields as parallel lists).

Prompt (the original's): read the passage, think step by step, the final answer inside ``<answer></answer>``.
The answer read: after any think block, the ``<answer>`` content (else a ``\\boxed{}``, else what follows
"the answer is" / "Answer:", else the last line); tags that differ, an unclosed ``<think>`` or an empty reply
give no answer.

Scoring (the official DROP script, as lm-evaluation-harness runs it): the answer and every gold answer
(``answer`` and each of ``validated_answers``) are normalised (lower case, punctuation and articles removed,
numbers as numbers: ``3`` = ``3.0``); exact match needs the same spans, F1 aligns spans and scores their
tokens (0 when the gold holds a number the answer lacks); each is the best over the gold answers.

Reports: ``eval/em`` and ``eval/f1`` with their standard errors, EM by answer type (number, date, span,
spans), ``eval/no_answer_rate``.

``python environments/eval_environments/drop_eval.py evaluate --openai.base_url http://localhost:9000/v1
--openai.model_name MODEL --env.data_dir_to_save_evals evals/drop``
"""

from __future__ import annotations

from typing import Optional

from pydantic import Field

from atroposlib.evals import EvalConfig, EvalEnv, EvalItem, Reply, Row, RowError, Score
from atroposlib.evals.freeform import drop_gold_answers, drop_score, extract_freeform

DROP_PROMPT_TEMPLATE = """Read the passage and answer the question. Think step by step before answering.

Provide your final answer within <answer></answer> tags.

Example format:
<answer>42</answer>

Passage: {passage}

Question: {question}"""


def answer_type(answer: dict) -> str:
    """``number``, ``date``, ``span`` or ``spans``: the kind of a DROP ``answer`` dict."""
    if str(answer.get("number") or "").strip():
        return "number"
    spans = answer.get("spans") or []
    if spans:
        return "span" if len(spans) == 1 else "spans"
    date = answer.get("date") or {}
    return "date" if any(str(v or "").strip() for v in date.values()) else "unknown"


class DROPEvalConfig(EvalConfig):
    """DROP's settings (the original's names)."""

    dataset_name: str = Field(default="lighteval/drop_harness", description="Hugging Face data set of DROP.")
    eval_split: str = Field(default="validation", description="Split to evaluate on.")


class DROPEvalEnv(EvalEnv):
    """DROP (see the module docstring)."""

    name = "drop_eval"
    env_config_cls = DROPEvalConfig
    config: DROPEvalConfig
    required_fields = ("passage", "question")
    breakdowns = ("answer_type",)
    metric = "em"

    def make_item(self, row: Row) -> Optional[EvalItem]:
        data = row.data
        golds = drop_gold_answers(data)
        if not golds:
            raise RowError("answer", "holds no number, span or date (nor do validated_answers)")
        kind = answer_type(data["answer"]) if isinstance(data.get("answer"), dict) else "unknown"
        return EvalItem(
            id=str(data.get("query_id") or row.index),
            prompt=DROP_PROMPT_TEMPLATE.format(passage=data["passage"], question=data["question"]),
            gold=[list(g) for g in golds],
            groups={"answer_type": kind},
            fields={"question": data["question"]},
        )

    def score(self, item: EvalItem, reply: Reply) -> Score:
        answer, method = extract_freeform(reply.text)
        if answer is None:
            return Score(0.0, extracted=None, method=method, metrics={"f1": 0.0})
        em, f1 = drop_score(answer, [tuple(g) for g in item.gold])
        return Score(em, extracted=answer, method=method, metrics={"f1": f1})


if __name__ == "__main__":
    DROPEvalEnv.cli()
