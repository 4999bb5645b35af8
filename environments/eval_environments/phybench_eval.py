"""PHYBench: 500 original physics problems with symbolic answers, scored by accuracy and by the EED score.

Data: ``Eureka-Lab/PHYBench`` on the hub, split ``train`` (each question appears twice there: repeats are
dropped). ``--env.dataset_path`` reads a local file in the hub schema (``id``, ``tag``: MECHANICS,
ELECTRICITY, THERMODYNAMICS, OPTICS, MODERN, ADVANCED; ``content``: the problem; ``solution``; ``answer``: a
LaTeX expression). ``--env.tags_filter '["OPTICS"]'`` keeps some domains; ``--env.max_samples N`` the first N
problems after the seeded shuffle (``--env.shuffle_seed``).

Prompt (the original's): a physics expert's step-by-step solution with the final answer as a LaTeX formula in
``\\boxed{}``; ``--env.use_detailed_prompt true`` sends the longer variant. Thinking mode is off by default,
as in the original.

Scoring: the boxed answer after any think block, against the gold, by PHYBench's Expression Edit Distance
(:mod:`atroposlib.evals.eed`, in worker processes with a time limit): an answer equivalent to the gold after
sympy simplification scores EED 100 and is correct; otherwise the EED score gives partial credit (60 minus
100 times the relative tree edit distance, at least 0). Two boxes that differ are a hedge: correct only when
both are equivalent to the gold, with the lower of their EED scores. No box, an unclosed ``<think>`` or an
empty reply score 0. ``--env.compute_eed_score false`` scores accuracy only, by ``math_verify``.

Reports: ``eval/accuracy`` and ``eval/eed_score`` (0-100), each with its standard error; both by tag
(``eval/tag_mechanics_accuracy``, ``eval/tag_mechanics_eed_score``); ``eval/no_answer_rate``.

``python environments/eval_environments/phybench_eval.py evaluate --openai.base_url http://localhost:9000/v1
--openai.model_name MODEL --env.data_dir_to_save_evals evals/phybench``
"""

from __future__ import annotations

import os
import random
from collections import defaultdict
from collections.abc import Sequence
from typing import Any, Optional

from pydantic import Field

from atroposlib.envs.data_loading import DatasetError
from atroposlib.evals import EvalConfig, EvalEnv, EvalItem, Reply, Row, RowError, Score, mean_and_stderr
from atroposlib.evals.eed import EEDScorer
from atroposlib.evals.math import MathScorer, read_reply
from atroposlib.evals.report import slug

PHYBENCH_TAGS = ["MECHANICS", "ELECTRICITY", "THERMODYNAMICS", "OPTICS", "MODERN", "ADVANCED"]

PHYBENCH_PROMPT_TEMPLATE = """You are a physics expert. Please read the following question and provide a step-by-step solution.

Put your final answer, which must be a readable LaTeX formula, in a \\boxed{{}} environment.

Question: {problem}

Answer:"""

PHYBENCH_DETAILED_PROMPT_TEMPLATE = """Solve the following physics problem. Show your reasoning step by step.

Your final answer should be a single symbolic expression (e.g., $\\sqrt{{\\frac{{2g}}{{3R}}}}$).
- Equivalent forms are accepted
- No numerical approximations
- No equation chains

Put your final answer in \\boxed{{}} format.
For example: \\boxed{{2mg + \\frac{{4mv_0^2}}{{l}}}}

Problem:
{problem}

Solution:"""


class PHYBenchEvalConfig(EvalConfig):
    """PHYBench's settings (the original's names)."""

    dataset_name: str = Field(default="Eureka-Lab/PHYBench", description="Hugging Face data set of PHYBench.")
    eval_split: str = Field(default="train", description="Split to evaluate on (the set has only train).")
    shuffle_seed: Optional[int] = Field(
        default=42, description="Seed of the problem order; None keeps the data order."
    )
    max_samples: Optional[int] = Field(
        default=None, ge=1, description="Evaluate this many problems (None: all)."
    )
    tags_filter: Optional[list[str]] = Field(
        default=None, description="Physics domains to keep (e.g. ['OPTICS'])."
    )
    thinking_mode: bool = Field(
        default=False, description="Reasoning mode (off by default, as in the original)."
    )
    use_detailed_prompt: bool = Field(default=False, description="Send the detailed prompt variant.")
    compute_eed_score: bool = Field(
        default=True, description="Score by the EED score (else accuracy by math_verify)."
    )
    math_check_timeout: float = Field(
        default=20.0, gt=0, description="Seconds one EED score (or answer check) may run before it is 0."
    )
    max_math_workers: int = Field(
        default=64, ge=1, description="Most worker processes scoring answers (at most the CPU count, and 8)."
    )


class PHYBenchEvalEnv(EvalEnv):
    """PHYBench (see the module docstring)."""

    name = "phybench_eval"
    env_config_cls = PHYBenchEvalConfig
    config: PHYBenchEvalConfig
    required_fields = ("content", "answer")
    breakdowns = ("tag",)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._eed: Optional[EEDScorer] = None
        self._math: Optional[MathScorer] = None

    def _workers(self) -> int:
        return min(self.config.max_math_workers, os.cpu_count() or 1, 8)

    def make_item(self, row: Row) -> Optional[EvalItem]:
        data = row.data
        content, answer = str(data["content"]), str(data["answer"]).strip()
        if not content.strip():
            raise RowError("content", "is empty")
        if not answer:
            raise RowError("answer", "is empty")
        tag = str(data.get("tag") or "UNKNOWN")
        template = (
            PHYBENCH_DETAILED_PROMPT_TEMPLATE if self.config.use_detailed_prompt else PHYBENCH_PROMPT_TEMPLATE
        )
        return EvalItem(
            id=str(data.get("id", row.index)),
            prompt=template.format(problem=content),
            gold=answer,
            groups={"tag": tag},
            fields={"tag": tag, "content": content},
        )

    def build_items(self, rows: Sequence[Row]) -> list[EvalItem]:
        seen: set[str] = set()
        unique = []
        for row in rows:
            content = str(row.data.get("content") or "")
            if content in seen:
                continue
            seen.add(content)
            unique.append(row)
        items = super().build_items(unique)
        if self.config.tags_filter:
            unknown = [t for t in self.config.tags_filter if t not in PHYBENCH_TAGS]
            if unknown:
                raise DatasetError(f"phybench: unknown tags {unknown} (known: {', '.join(PHYBENCH_TAGS)})")
            items = [item for item in items if item.groups["tag"] in self.config.tags_filter]
        if self.config.shuffle_seed is not None:
            random.Random(self.config.shuffle_seed).shuffle(items)
        if self.config.max_samples:
            items = items[: self.config.max_samples]
        return items

    async def score(self, item: EvalItem, reply: Reply) -> Score:
        verdict = read_reply(reply.text)
        if not verdict.answers:
            metrics = {"eed_score": 0.0} if self.config.compute_eed_score else {}
            return Score(0.0, extracted=None, method=verdict.reason, metrics=metrics)
        answers = verdict.answers
        hedge = len(answers) > 1
        fields: dict[str, Any] = {"answers": list(answers)} if hedge else {}
        if not self.config.compute_eed_score:
            if self._math is None:
                self._math = MathScorer(self.config.math_check_timeout, self._workers())
            math_verdict = await self._math.score(reply.text, item.gold)
            extracted = math_verdict.answer if math_verdict.reason in ("correct", "wrong") else None
            return Score(
                float(math_verdict.correct), extracted=extracted, method=math_verdict.reason, fields=fields
            )
        if self._eed is None:
            self._eed = EEDScorer(timeout_s=self.config.math_check_timeout, workers=self._workers())
        results = [await self._eed.score(item.gold, answer) for answer in answers]
        worst = min(results, key=lambda r: r.score)
        correct = all(r.equivalent for r in results)
        method = "correct" if correct else ("hedge" if hedge else "wrong")
        fields["eed_distance"] = worst.distance
        fields["eed_relative_distance"] = worst.relative_distance
        return Score(
            float(correct),
            extracted=None if hedge and not correct else answers[-1],
            method=method,
            metrics={"eed_score": worst.score},
            fields=fields,
        )

    def extra_metrics(self, samples: Sequence[dict[str, Any]]) -> dict[str, float]:
        if not self.config.compute_eed_score:
            return {}
        by_tag: dict[str, dict[str, list[float]]] = defaultdict(lambda: defaultdict(list))
        for sample in samples:
            value = (sample.get("metrics") or {}).get("eed_score")
            if value is not None:
                by_tag[str((sample.get("groups") or {}).get("tag"))][sample["id"]].append(float(value))
        out: dict[str, float] = {}
        for tag, items in sorted(by_tag.items()):
            means = [sum(v) / len(v) for v in items.values()]
            out[f"eval/tag_{slug(tag)}_eed_score"], out[f"eval/tag_{slug(tag)}_eed_score_stderr"] = (
                mean_and_stderr(means)
            )
        return out

    async def evaluate(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        try:
            return await super().evaluate(*args, **kwargs)
        finally:
            for scorer in (self._eed, self._math):
                if scorer is not None:
                    scorer.close()
            self._eed = self._math = None


if __name__ == "__main__":
    PHYBenchEvalEnv.cli()
