"""Per-category accuracy and the leaderboard's aggregates, computed as BFCL's score table does.

Keys (fractions in [0, 1]; a key is present only when its parts were evaluated):

* ``<category>`` for every evaluated category (``simple_python``, ``multiple``, ``live_simple`` ...) and
  ``<category>_count`` (its number of entries);
* ``non_live_simple``: the unweighted mean of the evaluated non-live simple categories (Python only
  here; the leaderboard also averages Java and JavaScript in);
* ``non_live_summary_ast``: the unweighted mean of non-live simple, multiple, parallel and
  parallel_multiple (all four must be evaluated);
* ``live_summary_ast``: the entry-weighted mean of live_simple, live_multiple, live_parallel and
  live_parallel_multiple (all four must be evaluated);
* ``irrelevance_total`` (the leaderboard's "hallucination measurement"): the unweighted mean of
  ``irrelevance`` and ``live_irrelevance``; ``relevance_total``: ``live_relevance``;
* ``overall_single_turn``: the leaderboard's overall accuracy restricted to its single-turn parts:
  non-live, live and irrelevance weighted 10:10:10 (the leaderboard's weights; its multi-turn and
  agentic parts are not evaluated here), present when all three are;
* ``accuracy``: all evaluated entries pooled (not a leaderboard number; a quick check).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Sequence
from typing import Optional

NON_LIVE_AST = ("multiple", "parallel", "parallel_multiple")
LIVE_AST = ("live_simple", "live_multiple", "live_parallel", "live_parallel_multiple")
NON_LIVE_SIMPLE = ("simple_python", "simple_java", "simple_javascript")


def _mean(values: Sequence[float]) -> float:
    return sum(values) / len(values)


def _all_present(metrics: dict[str, float], keys: Iterable[str]) -> Optional[list[str]]:
    keys = list(keys)
    return keys if all(key in metrics for key in keys) else None


def category_scores(results: Iterable[tuple[str, bool]]) -> dict[str, float]:
    """Accuracy per category and the aggregates above, from ``(category, valid)`` pairs."""
    by_category: dict[str, list[bool]] = defaultdict(list)
    for category, valid in results:
        by_category[category].append(bool(valid))
    metrics: dict[str, float] = {}
    for category, outcomes in sorted(by_category.items()):
        metrics[category] = _mean([float(v) for v in outcomes])
        metrics[f"{category}_count"] = float(len(outcomes))
    pooled = [float(v) for outcomes in by_category.values() for v in outcomes]
    if pooled:
        metrics["accuracy"] = _mean(pooled)
    simple = [metrics[c] for c in NON_LIVE_SIMPLE if c in metrics]
    if simple:
        metrics["non_live_simple"] = _mean(simple)
    parts = _all_present(metrics, ("non_live_simple", *NON_LIVE_AST))
    if parts:
        metrics["non_live_summary_ast"] = _mean([metrics[k] for k in parts])
    live = _all_present(metrics, LIVE_AST)
    if live:
        counts = [metrics[f"{k}_count"] for k in live]
        metrics["live_summary_ast"] = sum(metrics[k] * n for k, n in zip(live, counts, strict=True)) / sum(
            counts
        )
    irrelevance = _all_present(metrics, ("irrelevance", "live_irrelevance"))
    if irrelevance:
        metrics["irrelevance_total"] = _mean([metrics[k] for k in irrelevance])
    if "live_relevance" in metrics:
        metrics["relevance_total"] = metrics["live_relevance"]
    overall = _all_present(metrics, ("non_live_summary_ast", "live_summary_ast", "irrelevance_total"))
    if overall:
        metrics["overall_single_turn"] = _mean([metrics[k] for k in overall])
    return metrics
