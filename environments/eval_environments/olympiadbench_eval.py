"""OlympiadBench: open-ended olympiad-level math and physics problems (text only), in English or Chinese.

Data: ``Hothan/OlympiadBench`` on the hub, configuration ``OE_TO_maths_en_COMP`` (``--env.subset``; the
text-only ones are listed in ``AVAILABLE_SUBSETS``), split ``train``. ``--env.dataset_path`` reads a local
file in the hub schema (``question``, ``final_answer``: a list of LaTeX answers, ``is_multiple_answer``,
``answer_type``, ``unit``, ``subject``, ``language`` ...) or a directory holding ``<subset>.jsonl``.

Prompt (the original's, after OlympiadBench's own): the competition, the expected answer type, LaTeX, and the
final answer as ``<answer>\\boxed{...}</answer>`` (several answers joined by commas; the unit outside the
box), in the problem's language. Scoring: the boxed answer after any think block (or, without a box, the
``<answer>`` content) equals the gold by ``math_verify`` (``0.5`` = ``\\frac{1}{2}``; several answers as a
set, in any order), checked in worker processes with a time limit; two different boxed answers, no answer, an
unclosed ``<think>`` or an empty reply are wrong.

Reports: accuracy with its standard error, by subject and by answer type, ``eval/no_answer_rate``,
``eval/hedge_rate``, ``eval/unclosed_think_rate``.

``python environments/eval_environments/olympiadbench_eval.py evaluate --openai.base_url
http://localhost:9000/v1 --openai.model_name MODEL --env.data_dir_to_save_evals evals/olympiadbench``
"""

from __future__ import annotations

from pydantic import Field

from atroposlib.evals import Row, RowError
from atroposlib.evals.math import MathEval, MathEvalConfig, strip_math_delimiters

#: The text-only, open-ended configurations of the hub set.
AVAILABLE_SUBSETS = [
    "OE_TO_maths_en_COMP",
    "OE_TO_maths_zh_CEE",
    "OE_TO_maths_zh_COMP",
    "OE_TO_physics_en_COMP",
    "OE_TO_physics_zh_CEE",
]
ANSWER_TYPES = ("Numerical", "Expression", "Equation", "Interval")
ANSWER_TYPE_TEXT_EN = {"Numerical": "a numerical value", "Expression": "an expression", "Equation": "an equation", "Interval": "an interval"}  # fmt: skip
ANSWER_TYPE_TEXT_ZH = {"Numerical": "数值", "Expression": "表达式", "Equation": "方程", "Interval": "区间"}


def answer_type_text(answer_type: str, chinese: bool, multiple: bool) -> str:
    """The sentence naming the expected answer type (empty for tuples and human-graded types)."""
    if "Need_human_evaluate" in answer_type or "Tuple" in answer_type:
        return ""
    names = ANSWER_TYPE_TEXT_ZH if chinese else ANSWER_TYPE_TEXT_EN
    kind = next((names[t] for t in ANSWER_TYPES if t in answer_type), None)
    if kind is None:
        return ""
    if chinese:
        return f"，题目有多个答案，答案类型均为{kind}" if multiple else f"，答案类型为{kind}"
    if multiple:
        return f"The problem has multiple answers, each of them should be {kind}. "
    return f"The answer should be {kind}. "


def olympiad_prompt(
    question: str, subject: str, chinese: bool, multiple: bool, answer_type: str, unit: str
) -> str:
    """The original's prompt for one problem."""
    math = "Math" in subject
    type_text = answer_type_text(answer_type, chinese, multiple)
    if chinese:
        box = "\\boxed{用英文逗号连接的多个答案}" if multiple else "\\boxed{答案}"
        unit_text = ""
        if unit:
            box += "(单位)"
            unit_text = "，注意答案的单位不要放在\\boxed{}中"
        instruction = (
            f"以下是{'数学' if math else '物理'}竞赛中的解答题{type_text}。请根据题目的要求和所提供的信息计算得出答案。"
            "解答过程和结果中使用的变量和公式请使用LaTeX格式表示。"
            f"\n\n请将你的最终答案放在<answer></answer>标签中，格式为{box}{unit_text}。"
            "\n\n示例格式:\n<answer>\\boxed{42}</answer>"
        )
    else:
        box = "\\boxed{multiple answers connected with commas}" if multiple else "\\boxed{answer}"
        unit_text = ""
        if unit:
            box += "(unit)"
            unit_text = ", note that the unit of the answer should not be included in \\boxed{}"
        instruction = (
            f"The following is an open-ended problem from an International {'Math' if math else 'Physics'} "
            f"competition. {type_text}Please calculate the answer according to the given requirements and the "
            "information provided. Please use LaTeX format to represent the variables and formulas used in the "
            "solution process and results."
            f"\n\nProvide your final answer within <answer></answer> tags in the format {box}{unit_text}."
            "\n\nExample format:\n<answer>\\boxed{42}</answer>"
        )
    return f"{instruction}\n\n{question}"


class OlympiadBenchEvalConfig(MathEvalConfig):
    """OlympiadBench's settings (the original's names)."""

    dataset_name: str = Field(
        default="Hothan/OlympiadBench", description="Hugging Face data set of OlympiadBench."
    )
    subset: str = Field(default="OE_TO_maths_en_COMP", description="Configuration (see AVAILABLE_SUBSETS).")
    eval_split: str = Field(default="train", description="Split to evaluate on (the set has only train).")


class OlympiadBenchEvalEnv(MathEval):
    """OlympiadBench (see the module docstring)."""

    name = "olympiadbench_eval"
    env_config_cls = OlympiadBenchEvalConfig
    config: OlympiadBenchEvalConfig
    required_fields = ("question", "final_answer")
    breakdowns = ("subject", "answer_type")
    answer_tag = True

    def _chinese(self, row: Row) -> bool:
        language = row.data.get("language")
        return "Chinese" in str(language) if language else "_zh_" in self.config.subset

    def _subject(self, row: Row) -> str:
        return str(row.data.get("subject") or ("Math" if "maths" in self.config.subset else "Physics"))

    def problem(self, row: Row) -> str:
        return str(row.data["question"])

    def gold(self, row: Row) -> str:
        answers = row.data["final_answer"]
        if isinstance(answers, str):
            answers = [answers]
        if not isinstance(answers, list):
            raise RowError("final_answer", f"must be a list of answers, got {type(answers).__name__}")
        parts = [strip_math_delimiters(a) for a in answers if str(a).strip()]
        return ", ".join(parts)

    def make_item(self, row: Row):
        item = super().make_item(row)
        data = row.data
        item.prompt = olympiad_prompt(
            item.fields["problem"],
            self._subject(row),
            self._chinese(row),
            bool(data.get("is_multiple_answer")),
            str(data.get("answer_type") or ""),
            str(data.get("unit") or ""),
        )
        return item

    def groups(self, row: Row) -> dict[str, str]:
        return {"subject": self._subject(row), "answer_type": str(row.data.get("answer_type") or "unknown")}

    def fields(self, row: Row) -> dict:
        data = row.data
        return {
            "subject": self._subject(row),
            "answer_type": data.get("answer_type"),
            "unit": data.get("unit"),
            "language": data.get("language"),
        }


if __name__ == "__main__":
    OlympiadBenchEvalEnv.cli()
