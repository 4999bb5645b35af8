"""ARC-AGI-2: abstract reasoning on grid puzzles, scored by an exact (pixel-perfect) match of the output grid.

Data: ``arc-agi-community/arc-agi-2`` on the hub, split ``test`` (the public evaluation tasks; ``train`` the
training ones). ``--env.dataset_path`` reads a local file in the hub schema (``fewshots``: the demonstration
``{input, output}`` pairs; ``question``: the test pairs). Every test pair of a task is one item (as ARC Prize
scores: a task with two test inputs counts twice), named ``{task}#{k}``.

Prompt (the original's): the demonstrations and the test input, one JSON row per line, and the output grid as
a JSON 2D array inside ``<answer></answer>``. The grid read: after any think block, the ``<answer>`` content
(else the last grid in the reply) as JSON or Python lists, or one bracketed row per line. Scoring: 1 when it
has the gold's shape and every cell; answer tags holding different grids, an unparsable grid, an unclosed
``<think>`` or an empty reply score 0.

Reports: accuracy with its standard error (pass@k with ``--env.pass_at_n_samples``; ARC Prize's own
measure is pass@2), ``eval/no_answer_rate``.

``python environments/eval_environments/arc_agi_eval.py evaluate --openai.base_url http://localhost:9000/v1
--openai.model_name MODEL --env.data_dir_to_save_evals evals/arc_agi``
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Optional

from pydantic import Field

from atroposlib.envs.data_loading import DatasetError
from atroposlib.evals import EvalConfig, EvalEnv, EvalItem, Reply, Row, RowError, Score
from atroposlib.evals.freeform import ANSWER_TAG, grids_equal, is_grid, parse_grid
from atroposlib.utils.replies import answer_section

ARC_PROMPT_TEMPLATE = """You are solving an ARC-AGI puzzle. You will be shown training examples
where an input grid is transformed into an output grid following a specific pattern or rule.

Your task is to:
1. Analyze the training examples to understand the transformation pattern
2. Apply that same pattern to the test input
3. Produce the correct output grid

Each grid is a 2D array of integers from 0-9, where each number represents a different color.

--Training Examples--
{training_examples}
--End of Training Examples--

--Test Input--
{test_input}
--End of Test Input--

Analyze the pattern in the training examples, then apply it to the test input.

IMPORTANT: Provide your final answer as a JSON 2D array inside <answer></answer> tags.
The answer should contain ONLY the JSON array, nothing else.

Example format:
<answer>
[[0, 1, 2],
 [3, 4, 5],
 [6, 7, 8]]
</answer>
"""


def grid_text(grid: Sequence[Sequence[int]]) -> str:
    """A grid as one JSON row per line."""
    return "\n".join(json.dumps(list(row)) for row in grid)


def read_grid(reply: Optional[str]) -> tuple[Optional[list[list[int]]], str]:
    """``(grid, method)``: the grid a reply answers (see the module docstring); ``method`` is
    ``answer_tag`` or ``grid_search``, or without a grid ``empty``, ``unclosed_think``, ``ambiguous`` or
    ``no_answer``."""
    if reply is None or not reply.strip():
        return None, "empty"
    section = answer_section(reply)
    if section is None:
        return None, "unclosed_think"
    tags = [t for t in ANSWER_TAG.findall(section) if t.strip()]
    if tags:
        grids = [parse_grid(t) for t in tags]
        distinct = {json.dumps(g) for g in grids if g is not None}
        if len(distinct) > 1:
            return None, "ambiguous"
        grid = next((g for g in reversed(grids) if g is not None), None)
        return (grid, "answer_tag") if grid is not None else (None, "no_answer")
    grid = parse_grid(section)
    return (grid, "grid_search") if grid is not None else (None, "no_answer")


class ARCAGIEvalConfig(EvalConfig):
    """ARC-AGI-2's settings (the original's names)."""

    dataset_name: str = Field(
        default="arc-agi-community/arc-agi-2", description="Hugging Face data set of ARC-AGI-2."
    )
    eval_split: str = Field(
        default="test", description="Split to evaluate on (test: the public evaluation set)."
    )


class ARCAGIEvalEnv(EvalEnv):
    """ARC-AGI-2 (see the module docstring)."""

    name = "arc_agi_eval"
    env_config_cls = ARCAGIEvalConfig
    config: ARCAGIEvalConfig
    required_fields = ("fewshots", "question")

    def _pairs(self, row: Row, field: str) -> list[dict[str, Any]]:
        pairs = row.data[field]
        if isinstance(pairs, str):
            pairs = json.loads(pairs)
        if not isinstance(pairs, list) or not pairs:
            raise RowError(field, "must be a non-empty list of {input, output} pairs")
        for pair in pairs:
            if (
                not isinstance(pair, dict)
                or not is_grid(pair.get("input"))
                or not is_grid(pair.get("output"))
            ):
                raise RowError(field, "must hold {input, output} pairs of integer grids")
        return pairs

    def build_items(self, rows: Sequence[Row]) -> list[EvalItem]:
        items: list[EvalItem] = []
        for row in rows:
            try:
                items.extend(self.task_items(row))
            except RowError as exc:
                raise DatasetError(f"{row.where()}: {exc}") from None
            except KeyError as exc:
                raise DatasetError(f"{row.where()}: missing field {exc.args[0]!r}") from None
        return items

    def task_items(self, row: Row) -> list[EvalItem]:
        """One item per test pair of the row's task."""
        fewshots = self._pairs(row, "fewshots")
        tests = self._pairs(row, "question")
        examples = "".join(
            f"--Example {i + 1}--\n\nINPUT:\n{grid_text(p['input'])}\n\nOUTPUT:\n{grid_text(p['output'])}\n\n"
            for i, p in enumerate(fewshots)
        )
        task = str(row.data.get("id") or row.index)
        return [
            EvalItem(
                id=f"{task}#{k}",
                prompt=ARC_PROMPT_TEMPLATE.format(
                    training_examples=examples, test_input=grid_text(test["input"])
                ),
                gold=test["output"],
                fields={"task": task, "num_training_examples": len(fewshots)},
            )
            for k, test in enumerate(tests)
        ]

    def make_item(self, row: Row) -> Optional[EvalItem]:  # build_items makes them (a task has several)
        return self.task_items(row)[0]

    def score(self, item: EvalItem, reply: Reply) -> Score:
        grid, method = read_grid(reply.text)
        return Score(
            float(grids_equal(grid, item.gold)),
            extracted=None if grid is None else json.dumps(grid),
            method=method,
        )


if __name__ == "__main__":
    ARCAGIEvalEnv.cli()
