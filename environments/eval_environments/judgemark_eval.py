"""JudgeMark v2: how well the model under test judges creative writing.

The model is the judge: it scores pre-generated stories by several writer models on JudgeMark's literary
criteria (0-10 each); a good judge separates the writers and ranks them as the reference (arena) ratings do.

Data: a JudgeMark-v2 ``data`` directory (``--env.dataset_path``; default ``Judgemark-v2/data`` under the
working directory, as the original expects a clone there) holding the samples
(``judgemark_v3_samples_3_iter.json``: writer model -> ``samples`` -> iteration -> item id -> story), the
judge prompts (``judge_prompts_v3_noref_nocot_noanchor_x96.json``: item id -> prompt with a ``[TEST MODEL
RESPONSE]`` marker and ``<RUBRIC_CRITERIA>`` / ``<SCORE_ANCHORING>`` placeholders), ``rubric_criteria.txt``
and ``rubric_score_anchoring.txt``. ``--env.samples_file`` / ``--env.prompts_file`` name other files.
``--env.max_samples`` keeps the first N samples.

Scoring one reply: every ``Criterion: score`` line (``**Criterion:** 7.5`` too) after the think block is
read; scores inside ``[scoring_min, scoring_max]`` are kept, criteria where higher is worse (purple prose,
meandering ...) are inverted, and their mean is scaled to 1-10 (``eval/raw_score``). A reply with fewer than
5 readable criteria is unscored (a judge failure, counted apart in ``eval/unscored``).

Reports, from the scored replies: raw scores are calibrated piecewise-linearly so that their minimum,
quartiles and maximum land on 0, 3, 5, 7, 10; per writer model the mean calibrated score; then
``eval/kendall_tau_calibrated`` (``_raw``) of the writers' means against the reference ratings,
``eval/kruskal_wallis_stat`` of the writers' score groups, ``eval/std_dev_across_models`` of their means and
``eval/final_judgemark_score``: the mean of the normalised Kendall tau (0.15-0.75) and the separability (the
mean of the normalised Kruskal-Wallis statistic, 100-1300, and standard deviation, 0-2.6), as the original.

``python environments/eval_environments/judgemark_eval.py evaluate --openai.base_url ... --openai.model_name
JUDGE --env.dataset_path Judgemark-v2/data``
"""

from __future__ import annotations

import json
import re
import statistics
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

import numpy as np
from pydantic import Field

from atroposlib.envs.data_loading import DatasetError
from atroposlib.evals import EvalConfig, EvalEnv, EvalItem, Reply, Row, Score
from atroposlib.utils.replies import answer_section

SAMPLES_FILE = "judgemark_v3_samples_3_iter.json"
PROMPTS_FILE = "judge_prompts_v3_noref_nocot_noanchor_x96.json"
RESPONSE_MARKER = "[TEST MODEL RESPONSE]"
#: arena-style ratings of the writer models, the reference ranking
REFERENCE_MODEL_SCORES = {
    "kimi-k2": 1387, "claude-opus-4": 1417, "claude-sonnet-4": 1380, "chatgpt-4o-latest": 1425, "gpt-4.1": 1399,
    "qwen3-235b-a22b": 1366, "gemma-3-27b-it": 1355, "mistral-small-3.2-24b": 1334, "reka-flash-3": 1250,
    "grok-3-beta": 1401, "gpt-4.1-mini": 1349, "gemma-3-12b-it": 1333, "gemma-3-4b-it": 1282, "gpt-4.1-nano": 1309,
}  # fmt: skip
#: criteria where a higher score means worse writing (inverted before averaging)
NEGATIVE_MARKERS = {
    "meandering", "weak dialogue", "tell-don't-show", "unsurprising or uncreative", "amateurish", "purple prose",
    "overwrought", "incongruent ending positivity", "unearned transformations",
}  # fmt: skip
_SCORE_LINE = re.compile(
    r"^\s*(?:\*\*)?([^\n:\[\]]{2,100}):(?:\*\*)?\s*(?:\[)?(?:\*\*)?(-?\d+(?:\.\d+)?)(?:\*\*)?(?:\])?\s*$",
    re.MULTILINE,
)


def parse_scores(text: str) -> dict[str, float]:
    """``{criterion: score}`` from ``Criterion: 7``, ``**Criterion:** 7.5`` or ``Criterion: [7]`` lines."""
    return {name.strip(): float(value) for name, value in _SCORE_LINE.findall(text)}


def raw_score(scores: dict[str, float], low: float = 0, high: float = 10) -> Optional[float]:
    """The reply's score on 1-10 (see the module docstring), rounded to 2 places; None with fewer than 5
    criteria in range."""
    valid = {k: v for k, v in scores.items() if low <= v <= high}
    if len(valid) < 5:
        return None
    values = [low + high - v if k.lower().strip() in NEGATIVE_MARKERS else v for k, v in valid.items()]
    mean = sum(values) / len(values)
    return round(1 + (mean - low) * 9 / (high - low), 2) if high > low else 1.0


def calibrate(scores: Sequence[float]) -> list[float]:
    """Each score mapped piecewise-linearly from (min, Q1, median, Q3, max) of ``scores`` to (0, 3, 5, 7, 10)."""
    if len(scores) < 2:
        return list(scores)
    marks = [min(scores), float(np.percentile(scores, 25)), float(statistics.median(scores)),
             float(np.percentile(scores, 75)), max(scores)]  # fmt: skip
    targets = [0, 3, 5, 7, 10]

    def mapped(x: float) -> float:
        segment = next((i for i in range(1, 4) if x <= marks[i]), 4)
        lo, hi = marks[segment - 1], marks[segment]
        if abs(hi - lo) < 1e-12:
            return float(targets[segment - 1])
        return targets[segment - 1] + (x - lo) / (hi - lo) * (targets[segment] - targets[segment - 1])

    return [mapped(x) for x in scores]


def normalise(value: float, low: float, high: float) -> float:
    """``value`` mapped linearly from [low, high] to [0, 1], clipped."""
    return min(1.0, max(0.0, (value - low) / (high - low)))


def cross_model_stats(scores_by_model: dict[str, list[float]]) -> dict[str, float]:
    """Kruskal-Wallis statistic, population standard deviation of the model means and Kendall's tau of the
    means against :data:`REFERENCE_MODEL_SCORES` (0 when fewer than two models / references)."""
    from scipy import stats

    groups = [v for v in scores_by_model.values() if v]
    if len(groups) < 2:
        return {
            "kw_stat": 0.0,
            "std_dev_across_models": 0.0,
            "kendall_tau": 0.0,
            "num_models_with_reference": 0,
        }
    means = {model: statistics.mean(v) for model, v in scores_by_model.items() if v}
    pairs = [(means[m], REFERENCE_MODEL_SCORES[m]) for m in means if m in REFERENCE_MODEL_SCORES]
    tau = float(stats.kendalltau(*zip(*pairs, strict=True)).statistic) if len(pairs) >= 2 else 0.0
    kw = float(stats.kruskal(*groups).statistic) if len({x for g in groups for x in g}) > 1 else 0.0
    return {
        "kw_stat": kw,
        "std_dev_across_models": statistics.pstdev(means.values()),
        "kendall_tau": 0.0 if tau != tau else tau,
        "num_models_with_reference": len(pairs),
    }


class JudgeMarkEvalConfig(EvalConfig):
    """JudgeMark's settings (the original's names)."""

    thinking_mode: bool = Field(default=False, description="Reasoning mode (see EvalConfig).")
    eval_temperature: float = Field(default=0.0, ge=0.0, description="Sampling temperature of the judge.")
    samples_file: str = Field(
        default="", description=f"Samples JSON (default: {SAMPLES_FILE} in the data dir)."
    )
    prompts_file: str = Field(default="", description=f"Judge prompts JSON (default: {PROMPTS_FILE}).")
    scoring_min: float = Field(default=0, description="Lowest valid criterion score.")
    scoring_max: float = Field(default=10, description="Highest valid criterion score.")
    max_samples: Optional[int] = Field(default=None, ge=1, description="Judge at most this many samples.")


class JudgeMarkEvalEnv(EvalEnv):
    """JudgeMark v2 (see the module docstring)."""

    name = "judgemark_eval"
    env_config_cls = JudgeMarkEvalConfig
    config: JudgeMarkEvalConfig
    breakdowns = ("writer_model",)
    metric = "raw_score"

    def _data_file(self, explicit: str, name: str) -> Path:
        path = Path(explicit) if explicit else Path(self.config.dataset_path or "Judgemark-v2/data") / name
        if not path.is_file():
            raise DatasetError(
                f"{path}: no such file (JudgeMark-v2 data; set --env.dataset_path to its data dir)"
            )
        return path

    def _json(self, path: Path) -> dict[str, Any]:
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except json.JSONDecodeError as exc:
            raise DatasetError(f"{path}: not valid JSON ({exc.msg})") from None
        if not isinstance(data, dict):
            raise DatasetError(f"{path}: must hold a JSON object")
        return data

    def load_rows(self) -> list[Row]:
        """One row per (writer model, iteration, item) sample whose item has a judge prompt."""
        cfg = self.config
        samples_path = self._data_file(cfg.samples_file, SAMPLES_FILE)
        prompts_path = self._data_file(cfg.prompts_file, PROMPTS_FILE)
        samples, prompts = self._json(samples_path), self._json(prompts_path)
        fill = {
            "<RUBRIC_CRITERIA>": self._data_file("", "rubric_criteria.txt").read_text(encoding="utf-8"),
            "<SCORE_ANCHORING>": self._data_file("", "rubric_score_anchoring.txt").read_text(
                encoding="utf-8"
            ),
        }
        rows: list[Row] = []
        for model, info in samples.items():
            iterations = info.get("samples") if isinstance(info, dict) else None
            if not isinstance(iterations, dict):
                raise DatasetError(
                    f"{samples_path}: writer {model!r}: field 'samples' is missing or not an object"
                )
            for iteration, items in iterations.items():
                for item_id, text in (items or {}).items():
                    template = prompts.get(str(item_id))
                    if not isinstance(template, str):
                        continue
                    for marker, value in fill.items():
                        template = template.replace(marker, value)
                    data = {"writer_model": model, "iteration": iteration, "item_id": str(item_id),
                            "text": str(text), "template": template}  # fmt: skip
                    rows.append(Row(data, str(samples_path), len(rows)))
        return rows[: cfg.max_samples] if cfg.max_samples else rows

    def make_item(self, row: Row) -> EvalItem:
        d = row.data
        prompt = d["template"].replace(RESPONSE_MARKER, f"{RESPONSE_MARKER}\n{d['text']}")
        return EvalItem(
            id=f"{d['writer_model']}/{d['iteration']}/{d['item_id']}",
            prompt=prompt,
            gold=None,
            groups={"writer_model": d["writer_model"]},
            fields={"writer_model": d["writer_model"], "iteration": d["iteration"], "item_id": d["item_id"]},
        )

    def score(self, item: EvalItem, reply: Reply) -> Score:
        section = answer_section(reply.text or "")
        parsed = parse_scores(section) if section is not None else {}
        value = raw_score(parsed, self.config.scoring_min, self.config.scoring_max)
        method = "criteria" if value is not None else "judge_failure"
        return Score(value, extracted=value, method=method, fields={"parsed_scores": parsed})

    def extra_metrics(self, samples: Sequence[dict[str, Any]]) -> dict[str, float]:
        """Calibration, separability, correlation with the reference and the final score."""
        scored = [s for s in samples if s.get("score") is not None]
        calibrated = calibrate([s["score"] for s in scored])
        raw_by_model: dict[str, list[float]] = defaultdict(list)
        calibrated_by_model: dict[str, list[float]] = defaultdict(list)
        for sample, value in zip(scored, calibrated, strict=True):
            raw_by_model[sample["writer_model"]].append(sample["score"])
            calibrated_by_model[sample["writer_model"]].append(value)
        raw, cal = cross_model_stats(raw_by_model), cross_model_stats(calibrated_by_model)
        separability = (
            normalise(cal["kw_stat"], 100.0, 1300.0) + normalise(cal["std_dev_across_models"], 0.0, 2.6)
        ) / 2
        return {
            "eval/final_judgemark_score": (normalise(cal["kendall_tau"], 0.15, 0.75) + separability) / 2,
            "eval/kendall_tau_calibrated": cal["kendall_tau"],
            "eval/kendall_tau_raw": raw["kendall_tau"],
            "eval/kruskal_wallis_stat": cal["kw_stat"],
            "eval/std_dev_across_models": cal["std_dev_across_models"],
            "eval/num_models_with_reference": float(cal["num_models_with_reference"]),
            "eval/separability": separability,
        }


if __name__ == "__main__":
    JudgeMarkEvalEnv.cli()
