"""MMLU (generative): 57 subjects of four-option questions, answered after reasoning.

Data: ``lighteval/mmlu`` on the hub, one configuration per subject (``--env.subjects`` chooses some; default
all 57), split ``test`` (``--env.eval_split``). ``--env.dataset_path`` reads a local file in the hub schema
(``question``, ``subject``, ``choices``: the option texts, ``answer``: the right option's index) or a
directory of per-subject files (``anatomy.jsonl`` ...). ``--env.num_few_shot K`` (0-5) puts the first K
``dev`` questions of the subject, answered, before each question (``--env.few_shot_dataset_path`` for a
local copy of that split).

Prompt: lighteval's generative template (think step by step, the letter inside ``<answer></answer>``), the
options as ``A) ...``; ``--env.include_subject_in_prompt`` adds the subject. Scoring: the letter read by the
eval core (``<answer>B</answer>``, ``\\boxed{B}``, ``Answer: B`` or a trailing letter, after any think block;
two letters or an unclosed think block are wrong).

Reports: accuracy with its standard error, by subject and by category (STEM, Humanities, Social Sciences,
Other: lm-evaluation-harness's grouping).

``python environments/eval_environments/mmlu_eval.py evaluate --openai.base_url http://localhost:9000/v1
--openai.model_name MODEL --env.data_dir_to_save_evals evals/mmlu``
"""

from __future__ import annotations

from typing import Optional

from pydantic import Field

from atroposlib.evals import (
    EvalConfig,
    HubSet,
    MCQuestion,
    MultipleChoiceEval,
    Row,
    answer_index,
    known_subsets,
    load_eval_rows,
)

#: lm-evaluation-harness's grouping of the 57 subjects.
SUBJECT_CATEGORIES: dict[str, tuple[str, ...]] = {
    "STEM": (
        "abstract_algebra", "anatomy", "astronomy", "college_biology", "college_chemistry",
        "college_computer_science", "college_mathematics", "college_physics", "computer_security",
        "conceptual_physics", "electrical_engineering", "elementary_mathematics", "high_school_biology",
        "high_school_chemistry", "high_school_computer_science", "high_school_mathematics",
        "high_school_physics", "high_school_statistics", "machine_learning",
    ),
    "Humanities": (
        "formal_logic", "high_school_european_history", "high_school_us_history", "high_school_world_history",
        "international_law", "jurisprudence", "logical_fallacies", "moral_disputes", "moral_scenarios",
        "philosophy", "prehistory", "professional_law", "world_religions",
    ),
    "Social Sciences": (
        "econometrics", "high_school_geography", "high_school_government_and_politics",
        "high_school_macroeconomics", "high_school_microeconomics", "high_school_psychology", "human_sexuality",
        "professional_psychology", "public_relations", "security_studies", "sociology", "us_foreign_policy",
    ),
    "Other": (
        "business_ethics", "clinical_knowledge", "college_medicine", "global_facts", "human_aging", "management",
        "marketing", "medical_genetics", "miscellaneous", "nutrition", "professional_accounting",
        "professional_medicine", "virology",
    ),
}  # fmt: skip
CATEGORY_OF = {subject: category for category, subjects in SUBJECT_CATEGORIES.items() for subject in subjects}
MMLU_SUBJECTS = sorted(CATEGORY_OF)


class MMLUEvalConfig(EvalConfig):
    """MMLU's settings."""

    dataset_name: str = Field(default="lighteval/mmlu", description="Hugging Face data set of MMLU.")
    subjects: Optional[list[str]] = Field(default=None, description="Subjects to evaluate (default: all 57).")
    eval_split: str = Field(default="test", description="Split to evaluate on.")
    few_shot_split: str = Field(default="dev", description="Split the few-shot examples come from.")
    few_shot_dataset_path: Optional[str] = Field(
        default=None, description="Local file or per-subject directory of the few-shot split."
    )
    num_few_shot: int = Field(default=0, ge=0, le=5, description="Answered examples before each question.")
    include_subject_in_prompt: bool = Field(default=False, description="Name the subject in the prompt.")


class MMLUEvalEnv(MultipleChoiceEval):
    """MMLU (see the module docstring)."""

    name = "mmlu_eval"
    env_config_cls = MMLUEvalConfig
    config: MMLUEvalConfig
    required_fields = ("question", "choices", "answer")
    breakdowns = ("subject", "category")

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        #: subject -> the answered examples of the few-shot split (filled by ``load_rows``)
        self.few_shot: dict[str, list[MCQuestion]] = {}

    def hub_set(self, split: Optional[str] = None) -> HubSet:
        subjects = known_subsets("mmlu", self.config.subjects or MMLU_SUBJECTS, MMLU_SUBJECTS, "subjects")
        return HubSet(
            self.config.dataset_name, split or self.config.eval_split, subjects, subset_field="subject"
        )

    def load_rows(self) -> list[Row]:
        rows = super().load_rows()
        if self.config.subjects:  # a single local file may hold every subject
            rows = [row for row in rows if row.data.get("subject") in self.config.subjects]
        if self.config.num_few_shot:
            path = self.config.few_shot_dataset_path
            hub = self.hub_set(self.config.few_shot_split)
            for row in load_eval_rows(path, hub, self.required_fields):
                self.few_shot.setdefault(str(row.data.get("subject")), []).append(self.question(row))
        return rows

    def question(self, row: Row) -> MCQuestion:
        data = row.data
        subject = str(data.get("subject") or "unknown")
        groups = {"subject": subject}
        if subject in CATEGORY_OF:
            groups["category"] = CATEGORY_OF[subject]
        return MCQuestion(
            str(data["question"]),
            list(data["choices"]),
            answer_index(data["answer"], len(data["choices"])),
            groups=groups,
            fields={"subject": subject},
        )

    def format_prompt(self, question: MCQuestion) -> str:
        subject = question.groups["subject"]
        text = question.question
        if self.config.include_subject_in_prompt:
            text = f"[{subject.replace('_', ' ')}]\n\n{text}"
        prompt = super().format_prompt(MCQuestion(text, question.choices, question.answer))
        examples = self.few_shot.get(subject, [])[: self.config.num_few_shot]
        return self.few_shot_block(examples) + prompt


if __name__ == "__main__":
    MMLUEvalEnv.cli()
