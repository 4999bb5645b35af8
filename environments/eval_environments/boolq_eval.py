"""BoolQ: yes/no questions about a Wikipedia passage, asked as options A (Yes) and B (No).

Data: ``lighteval/boolq_helm``, split ``validation``. ``--env.dataset_path`` reads a local file in the hub
schema (``passage``, ``question``, ``answer``: ``Yes`` or ``No``; ``true``/``false`` are accepted too).

Prompt: the passage, the question, ``A. Yes`` / ``B. No``, the answer inside ``<answer></answer>``. Scoring:
the letter the eval core reads, or the word itself (``<answer>Yes</answer>``, ``Answer: no``); both words, or
two letters, are wrong. Reports accuracy with its standard error, and by gold answer.

``python environments/eval_environments/boolq_eval.py evaluate --openai.base_url http://localhost:9000/v1
--openai.model_name MODEL --env.data_dir_to_save_evals evals/boolq``
"""

from __future__ import annotations

from pydantic import Field

from atroposlib.evals import EvalConfig, EvalItem, MCQuestion, MultipleChoiceEval, Reply, Row, RowError, Score
from atroposlib.evals.answers import extract_word

BOOLQ_PROMPT_TEMPLATE = """Passage: {passage}

Question: {question}

Based on the passage, is the answer to the question Yes or No?
{choices}

Provide your answer in <answer></answer> tags with only the letter (A or B), or 'Yes'/'No'."""

_GOLD = {"yes": 0, "true": 0, "no": 1, "false": 1}


class BoolQEvalConfig(EvalConfig):
    """BoolQ's settings."""

    dataset_name: str = Field(default="lighteval/boolq_helm", description="Hugging Face data set of BoolQ.")
    eval_split: str = Field(default="validation", description="Split to evaluate on.")


class BoolQEvalEnv(MultipleChoiceEval):
    """BoolQ (see the module docstring)."""

    name = "boolq_eval"
    env_config_cls = BoolQEvalConfig
    required_fields = ("passage", "question", "answer")
    breakdowns = ("gold_answer",)
    choice_template = "{label}. {choice}"

    def question(self, row: Row) -> MCQuestion:
        gold = str(row.data["answer"]).strip().lower()
        if gold not in _GOLD:
            raise RowError("answer", f"must be Yes or No, got {row.data['answer']!r}")
        question = str(row.data["question"])
        if question.endswith("??"):
            question = question[:-1]
        return MCQuestion(
            question,
            ["Yes", "No"],
            _GOLD[gold],
            groups={"gold_answer": ("Yes", "No")[_GOLD[gold]]},
            fields={"passage": row.data["passage"]},
        )

    def format_prompt(self, question: MCQuestion) -> str:
        return BOOLQ_PROMPT_TEMPLATE.format(
            passage=question.fields["passage"],
            question=question.question,
            choices=self.format_choices(question.choices),
        )

    def score(self, item: EvalItem, reply: Reply) -> Score:
        """The letter, or else the word Yes/No, read from the reply."""
        score = super().score(item, reply)
        if score.method == "no_answer":
            word, method = extract_word(reply.text, ("yes", "no"))
            if word is not None:
                letter = "A" if word == "yes" else "B"
                return Score(1.0 if letter == item.gold else 0.0, extracted=letter, method=f"{method}_word")
            if method == "ambiguous":
                return Score(0.0, extracted=None, method=method)
        return score


if __name__ == "__main__":
    BoolQEvalEnv.cli()
