"""GPQA (Diamond by default): graduate-level science questions, four options in a seeded order.

Data: ``Idavidrein/gpqa``, configuration ``gpqa_diamond`` (``--env.subset``: ``gpqa_main``, ``gpqa_extended``),
split ``train``. ``--env.dataset_path`` reads a local file in the hub schema (``Question``, ``Correct Answer``,
``Incorrect Answer 1`` to ``3``, optionally ``High-level domain`` and ``Subdomain``).

The right answer's position is drawn per question from ``--env.shuffle_seed`` (default 42) and the question, so
it is the same in every run and every process (``null``: a fresh draw each run). Prompt: lighteval's GPQA
template (the letter inside ``<answer></answer>``). Scoring: the letter the eval core reads (two letters or
an unclosed think block are wrong). Reports accuracy with its standard error, and by domain.

``python environments/eval_environments/gpqa_eval.py evaluate --openai.base_url http://localhost:9000/v1
--openai.model_name MODEL --env.data_dir_to_save_evals evals/gpqa``
"""

from __future__ import annotations

from typing import Optional

from pydantic import Field

from atroposlib.evals import EvalConfig, MCQuestion, MultipleChoiceEval, Row

GPQA_PROMPT_TEMPLATE = """Answer the following multiple choice question. Think step by step before answering.

Provide your final answer within <answer></answer> tags, containing only the letter (A, B, C, or D).

Example format:
<answer>A</answer>

{question}

{choices}"""


class GPQAEvalConfig(EvalConfig):
    """GPQA's settings."""

    dataset_name: str = Field(default="Idavidrein/gpqa", description="Hugging Face data set of GPQA.")
    subset: str = Field(default="gpqa_diamond", description="gpqa_diamond, gpqa_extended or gpqa_main.")
    eval_split: str = Field(default="train", description="Split to evaluate on (GPQA has only train).")
    shuffle_seed: Optional[int] = Field(
        default=42, description="Seed of the options' order (null: a new order every run)."
    )


class GPQAEvalEnv(MultipleChoiceEval):
    """GPQA (see the module docstring)."""

    name = "gpqa_eval"
    env_config_cls = GPQAEvalConfig
    config: GPQAEvalConfig
    required_fields = (
        "Question",
        "Correct Answer",
        "Incorrect Answer 1",
        "Incorrect Answer 2",
        "Incorrect Answer 3",
    )
    breakdowns = ("domain",)
    prompt_template = GPQA_PROMPT_TEMPLATE
    shuffle_choices = True

    def question(self, row: Row) -> MCQuestion:
        data = row.data
        options = [str(data[f]).strip() for f in self.required_fields[1:]]
        domain = str(data.get("High-level domain") or "unknown")
        return MCQuestion(
            str(data["Question"]).strip(),
            options,
            0,  # the correct answer comes first; the seeded shuffle places it
            id=str(data["Record ID"]) if data.get("Record ID") else None,
            groups={"domain": domain},
            fields={"subdomain": data.get("Subdomain")},
        )


if __name__ == "__main__":
    GPQAEvalEnv.cli()
