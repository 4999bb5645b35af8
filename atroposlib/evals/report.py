"""Metrics of an evaluation from its samples: means with standard errors, breakdowns, pass@k / mean@k.

:func:`aggregate` reads the sample records an evaluation writes to ``samples.jsonl`` (one per reply:
``id``, ``score``, ``metrics``, ``groups``, ``extracted``, ``finish_reason`` ...) and returns

* ``metrics``: flat ``eval/...`` keys, as wandb and ``results.all`` of ``metrics.json`` hold them:

  - ``eval/{metric}`` (the benchmark's main metric, e.g. ``accuracy``) and ``eval/{metric}_stderr``: the mean
    over items of each item's mean score, and the standard error of that mean (sample standard deviation
    of the item means over the square root of their number; items, not replies, are the independent unit);
  - the same pair for every per-reply metric a scorer adds (``eval/f1``, ``eval/f1_stderr``);
  - ``eval/num_items``, ``eval/num_samples``, ``eval/no_answer_rate`` (replies with nothing extracted),
    ``eval/truncated_rate`` (replies cut at max tokens), ``eval/unscored`` (replies that could not be
    scored, only when there are any);
  - with ``n > 1`` replies per item: ``eval/mean@n`` (= the main metric), ``eval/pass@k`` for k = 1, 2, 4 ...
    up to n (the unbiased estimator of :func:`atroposlib.envs.eval.pass_at_k`, a reply passing at score 1)
    and ``eval/maj@n`` (the most frequent extracted answer is right);
  - per breakdown value: ``eval/{key}_{value}_{metric}``, ``..._stderr`` and ``eval/{key}_{value}_count``;

* ``subtasks``: ``{"{key}:{value}": {metric, metric_stderr, num_items}}``, written to ``metrics.json`` as
  lighteval writes subtasks (``atropos|mmlu_eval:subject:anatomy|0``).
"""

from __future__ import annotations

import math
import re
from collections import Counter, defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

from atroposlib.envs.eval import pass_at_k


def mean_and_stderr(values: Sequence[float]) -> tuple[float, float]:
    """The mean of ``values`` and its standard error (sample standard deviation / sqrt(n); 0.0 for one
    value)."""
    n = len(values)
    mean = math.fsum(values) / n
    if n < 2:
        return mean, 0.0
    variance = math.fsum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(variance / n)


def slug(value: Any) -> str:
    """A breakdown value as a metric-name part: lower case, runs of other characters as ``_``."""
    return re.sub(r"[^0-9a-z]+", "_", str(value).lower()).strip("_") or "none"


def pass_ks(n: int) -> list[int]:
    """The k of the pass@k metrics for n replies per item: 1, 2, 4, ... below n, and n."""
    ks, k = [], 1
    while k < n:
        ks.append(k)
        k *= 2
    return [*ks, n]


@dataclass
class _Item:
    scores: list[float]  # scored replies only
    extracted: list[tuple[Any, float]]  # (extracted answer, score) of scored replies
    metrics: dict[str, list[float]]
    groups: dict[str, str]


def _items(samples: Iterable[dict[str, Any]]) -> tuple[dict[str, _Item], Counter]:
    items: dict[str, _Item] = {}
    counts: Counter = Counter()
    for sample in samples:
        counts["samples"] += 1
        item = items.get(sample["id"])
        if item is None:
            item = items[sample["id"]] = _Item([], [], defaultdict(list), dict(sample.get("groups") or {}))
        if sample.get("finish_reason") == "length":
            counts["truncated"] += 1
        if sample.get("extracted") is None:
            counts["no_answer"] += 1
        value = sample.get("score")
        if value is None:
            counts["unscored"] += 1
            continue
        item.scores.append(float(value))
        extracted = sample.get("extracted")
        item.extracted.append((extracted if isinstance(extracted, (str, int, float, bool)) else None, value))
        for key, metric in (sample.get("metrics") or {}).items():
            item.metrics[key].append(float(metric))
    return items, counts


def _means(items: Sequence[_Item], metric: str) -> dict[str, float]:
    out: dict[str, float] = {}
    scored = [i for i in items if i.scores]
    if not scored:
        return out
    out[metric], out[f"{metric}_stderr"] = mean_and_stderr(
        [math.fsum(i.scores) / len(i.scores) for i in scored]
    )
    extra = sorted({key for i in scored for key in i.metrics})
    for key in extra:
        values = [math.fsum(i.metrics[key]) / len(i.metrics[key]) for i in scored if i.metrics.get(key)]
        out[key], out[f"{key}_stderr"] = mean_and_stderr(values)
    return out


def _majority_right(item: _Item) -> float:
    answers = [(a, s) for a, s in item.extracted if a is not None]
    if not answers:
        return 0.0
    counts = Counter(a for a, _ in answers)
    top = max(counts.values())
    winner = next(a for a, _ in answers if counts[a] == top)  # ties: the first one sampled
    return 1.0 if any(s >= 1.0 for a, s in answers if a == winner) else 0.0


def aggregate(
    samples: Iterable[dict[str, Any]],
    metric: str = "accuracy",
    breakdowns: Sequence[str] = (),
    n: int = 1,
) -> tuple[dict[str, float], dict[str, dict[str, float]]]:
    """``(metrics, subtasks)`` of the sample records (see the module docstring). ``metric`` names the main
    score; ``breakdowns`` the group keys reported separately; ``n`` the replies drawn per item."""
    by_id, counts = _items(samples)
    items = list(by_id.values())
    total = max(counts["samples"], 1)
    metrics: dict[str, float] = {f"eval/{k}": v for k, v in _means(items, metric).items()}
    metrics["eval/num_items"] = len(items)
    metrics["eval/num_samples"] = counts["samples"]
    metrics["eval/no_answer_rate"] = counts["no_answer"] / total
    metrics["eval/truncated_rate"] = counts["truncated"] / total
    if counts["unscored"]:
        metrics["eval/unscored"] = counts["unscored"]
    scored = [i for i in items if i.scores]
    if n > 1 and scored:
        metrics[f"eval/mean@{n}"] = metrics[f"eval/{metric}"]
        for k in pass_ks(n):
            values = [
                pass_at_k(len(i.scores), sum(1 for s in i.scores if s >= 1.0), k)
                if len(i.scores) >= k
                else 0.0
                for i in scored
            ]
            metrics[f"eval/pass@{k}"] = math.fsum(values) / len(values)
        metrics[f"eval/maj@{n}"] = math.fsum(_majority_right(i) for i in scored) / len(scored)
    subtasks: dict[str, dict[str, float]] = {}
    for key in breakdowns:
        groups: dict[str, list[_Item]] = defaultdict(list)
        for item in items:
            if key in item.groups:
                groups[str(item.groups[key])].append(item)
        for value in sorted(groups):
            means = _means(groups[value], metric)
            prefix = f"eval/{key}_{slug(value)}"
            for name in (metric, f"{metric}_stderr"):
                if name in means:
                    metrics[f"{prefix}_{name}"] = means[name]
            metrics[f"{prefix}_count"] = len(groups[value])
            subtasks[f"{key}:{value}"] = {**means, "num_items": len(groups[value])}
    return metrics, subtasks


def headline(metrics: dict[str, float], breakdowns: Sequence[str] = ()) -> dict[str, float]:
    """The metrics a summary table shows: all but the per-breakdown ones, ``eval/`` prefix dropped."""
    skip = tuple(f"eval/{key}_" for key in breakdowns)
    return {key.removeprefix("eval/"): value for key, value in metrics.items() if not key.startswith(skip)}


__all__ = ["aggregate", "headline", "mean_and_stderr", "pass_ks", "slug"]
