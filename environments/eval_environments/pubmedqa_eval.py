"""PubMedQA: biomedical research questions answered yes, no or maybe from an abstract's context.

Data: ``pubmed_qa``, configuration ``pqa_labeled``, split ``train`` (the expert-labelled 1,000).
``--env.dataset_path`` reads a local file in the hub schema (``question``, ``context``: ``{"contexts": [...]}``
or a string, ``final_decision``: yes/no/maybe). Rows with another decision are skipped.

Prompt: the question and the context passages, the word inside ``<answer></answer>``. Scoring: the word the
eval core reads (``<answer>yes</answer>``, ``\\boxed{no}``, ``Answer: maybe`` or a trailing word; two words
or an unclosed think block are wrong). Reports accuracy with its standard error, and by gold answer.

``python environments/eval_environments/pubmedqa_eval.py evaluate --openai.base_url http://localhost:9000/v1
--openai.model_name MODEL --env.data_dir_to_save_evals evals/pubmedqa``
"""

from __future__ import annotations

from typing import Optional

from pydantic import Field

from atroposlib.evals import EvalConfig, EvalEnv, EvalItem, Reply, Row, Score
from atroposlib.evals.answers import extract_word

VALID_ANSWERS = ("yes", "no", "maybe")

PUBMEDQA_PROMPT_TEMPLATE = """Answer the following biomedical research question based on the provided context. Think step by step before answering.

Provide your final answer within <answer></answer> tags, containing only one of: yes, no, or maybe.

Example format:
<answer>yes</answer>

Question: {question}

Context:
{context}"""


class PubMedQAEvalConfig(EvalConfig):
    """PubMedQA's settings."""

    dataset_name: str = Field(default="pubmed_qa", description="Hugging Face data set of PubMedQA.")
    subset: str = Field(default="pqa_labeled", description="Configuration (pqa_labeled has expert labels).")
    eval_split: str = Field(default="train", description="Split to evaluate on.")


class PubMedQAEvalEnv(EvalEnv):
    """PubMedQA (see the module docstring)."""

    name = "pubmedqa_eval"
    env_config_cls = PubMedQAEvalConfig
    required_fields = ("question", "context", "final_decision")
    breakdowns = ("gold_answer",)

    def make_item(self, row: Row) -> Optional[EvalItem]:
        data = row.data
        gold = str(data["final_decision"]).strip().lower()
        if gold not in VALID_ANSWERS:
            return None
        context = data["context"]
        if isinstance(context, dict):
            context = context.get("contexts", [])
        text = "\n\n".join(map(str, context)) if isinstance(context, list) else str(context)
        return EvalItem(
            id=str(data.get("pubid") or row.index),
            prompt=PUBMEDQA_PROMPT_TEMPLATE.format(question=data["question"], context=text),
            gold=gold,
            groups={"gold_answer": gold},
            fields={"question": data["question"]},
        )

    def score(self, item: EvalItem, reply: Reply) -> Score:
        """1.0 when the word read from the reply is the gold decision."""
        word, method = extract_word(reply.text, VALID_ANSWERS)
        return Score(1.0 if word == item.gold else 0.0, extracted=word, method=method)


if __name__ == "__main__":
    PubMedQAEvalEnv.cli()
