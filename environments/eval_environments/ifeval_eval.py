"""IFEval: verifiable instruction following (lower case only, no commas, N bullet points, end with a phrase ...).

Data: ``google/IFEval`` on the hub, split ``train`` (its only split). ``--env.dataset_path`` reads a local
file in the hub schema (``key``, ``prompt``, ``instruction_id_list``, ``kwargs``: one argument dict per
instruction, unused arguments null). A row naming an unknown instruction, or arguments that do not fit it,
stops the evaluation at start-up with one line naming the file and row.

Prompt: the row's prompt, as is. Grading (the checks of :mod:`atroposlib.utils.ifeval`, IFEval's own): the
reply after its think block (a reply whose think block never closes, or an empty one, follows nothing) is
checked against each instruction, strictly (as it is) and loosely (also without its first line, its last
line, both, and each of these without ``*``); a prompt is followed when all of its instructions are.

Reports (IFEval's four numbers): ``eval/prompt_level_strict_acc`` (the main metric) and
``eval/prompt_level_loose_acc`` per prompt, with standard errors; ``eval/inst_level_strict_acc`` and
``eval/inst_level_loose_acc`` over all instructions (with standard errors over instructions); strict accuracy
by instruction group (``eval/instruction_change_case_strict_acc`` ...).

``python environments/eval_environments/ifeval_eval.py evaluate --openai.base_url http://localhost:9000/v1
--openai.model_name MODEL --env.data_dir_to_save_evals evals/ifeval``
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Sequence
from typing import Any, Optional

from pydantic import Field

from atroposlib.evals import EvalConfig, EvalEnv, EvalItem, Reply, Row, RowError, Score, mean_and_stderr
from atroposlib.evals.report import slug
from atroposlib.utils.ifeval import InstructionError, bind_instructions, grade_reply
from atroposlib.utils.replies import answer_section


class IFEvalConfig(EvalConfig):
    """IFEval's settings (the original's names)."""

    dataset_name: str = Field(default="google/IFEval", description="Hugging Face data set of IFEval.")
    eval_split: str = Field(default="train", description="Split to evaluate on (IFEval has only train).")


class IFEvalEnv(EvalEnv):
    """IFEval (see the module docstring)."""

    name = "ifeval_eval"
    env_config_cls = IFEvalConfig
    config: IFEvalConfig
    required_fields = ("prompt", "instruction_id_list", "kwargs")
    metric = "prompt_level_strict_acc"
    #: the per-group accuracies (``eval/instruction_*``, from :meth:`extra_metrics`) are a breakdown: summary
    #: tables show the headline metrics without them
    breakdowns = ("instruction",)

    def make_item(self, row: Row) -> Optional[EvalItem]:
        data = row.data
        try:
            bound = bind_instructions(data["instruction_id_list"], data["kwargs"])
        except InstructionError as exc:
            raise RowError("instruction_id_list", f"/ kwargs: {exc}") from None
        ids = [b.id for b in bound]
        return EvalItem(
            id=str(data.get("key", row.index)),
            prompt=str(data["prompt"]),
            gold=ids,
            fields={"instruction_id_list": ids, "kwargs": list(data["kwargs"])},
        )

    def score(self, item: EvalItem, reply: Reply) -> Score:
        bound = bind_instructions(item.fields["instruction_id_list"], item.fields["kwargs"])
        grade = grade_reply(reply.text, bound)
        section = answer_section(reply.text) if reply.text else None
        if not reply.text.strip():
            method = "empty"
        elif section is None:
            method = "unclosed_think"
        else:
            method = "response"
        return Score(
            float(all(grade.strict)),
            extracted=None if section is None or not section.strip() else section.strip(),
            method=method,
            metrics={"prompt_level_loose_acc": float(all(grade.loose))},
            fields={"inst_strict": list(grade.strict), "inst_loose": list(grade.loose)},
        )

    def extra_metrics(self, samples: Sequence[dict[str, Any]]) -> dict[str, float]:
        strict: list[float] = []
        loose: list[float] = []
        by_group: dict[str, list[float]] = defaultdict(list)
        for sample in samples:
            if sample.get("score") is None:
                continue
            ids = sample.get("instruction_id_list") or []
            for instruction, s, lo in zip(
                ids, sample.get("inst_strict") or [], sample.get("inst_loose") or [], strict=False
            ):
                strict.append(float(s))
                loose.append(float(lo))
                by_group[instruction.split(":", 1)[0]].append(float(s))
        if not strict:
            return {}
        out: dict[str, float] = {}
        out["eval/inst_level_strict_acc"], out["eval/inst_level_strict_acc_stderr"] = mean_and_stderr(strict)
        out["eval/inst_level_loose_acc"], out["eval/inst_level_loose_acc_stderr"] = mean_and_stderr(loose)
        out["eval/num_instructions"] = len(strict)
        for group, values in sorted(by_group.items()):
            out[f"eval/instruction_{slug(group)}_strict_acc"] = sum(values) / len(values)
        return out


if __name__ == "__main__":
    IFEvalEnv.cli()
