"""Console rendering of evaluation metrics."""

from __future__ import annotations

from collections.abc import Mapping


def _clean_metric_name(name: str) -> str:
    return name.replace("eval/", "").replace("_", " ")


def format_metrics_table(task_name: str, metrics: Mapping[str, float]) -> str:
    """The lm-eval-harness style markdown table used by :func:`display_metrics_table`.

    Columns: Groups (task name), Version (1), Filter (none), n-shot (blank), Metric (``eval/`` removed,
    ``_`` as spaces), direction (``↑`` for names containing "correct" or "acc"), Value (4 decimals),
    ``±`` and Stderr: the value of the metric's ``<name>_stderr`` key when there is one (that key then has
    no row of its own), else 0.0000.
    """
    task = str(task_name)
    stderrs = {
        k[: -len("_stderr")]: v
        for k, v in metrics.items()
        if k.endswith("_stderr") and k[: -len("_stderr")] in metrics
    }
    shown = {
        k: v for k, v in metrics.items() if not (k.endswith("_stderr") and k[: -len("_stderr")] in stderrs)
    }
    errors = [f"{float(stderrs.get(k, 0.0)):.4f}" for k in shown]
    metrics = shown
    names = [_clean_metric_name(k) for k in metrics]
    values = [f"{float(v):.4f}" for v in metrics.values()]
    w_group = max(len(task), len("Groups"))
    w_version = len("Version")
    w_filter = len("Filter")
    w_nshot = len("n-shot")
    w_metric = max([len("Metric"), *map(len, names)])
    w_dir = 3
    w_value = max([len("Value"), *map(len, values)])
    w_pm = 3
    w_stderr = max([len("Stderr"), *map(len, errors)])
    lines = [
        f"|{'Groups':<{w_group}}|{'Version':<{w_version}}|{'Filter':<{w_filter}}|{'n-shot':<{w_nshot}}"
        f"|{'Metric':<{w_metric}}|{'':^{w_dir}}|{'Value':>{w_value}}|{'':^{w_pm}}|{'Stderr':>{w_stderr}}|",
        f"|{'-' * w_group}|{'-' * w_version}|{'-' * w_filter}|{'-' * w_nshot}|{'-' * w_metric}|{'-' * w_dir}"
        f"|{'-' * (w_value - 1)}:|{'-' * w_pm}|{'-' * (w_stderr - 1)}:|",
    ]
    for key, name, value, error in zip(metrics, names, values, errors, strict=True):
        direction = "↑" if "correct" in key or "acc" in key else ""
        lines.append(
            f"|{task:<{w_group}}|{'1':<{w_version}}|{'none':<{w_filter}}|{'':<{w_nshot}}|{name:<{w_metric}}"
            f"|{direction:^{w_dir}}|{value:>{w_value}}|{'±':^{w_pm}}|{error:>{w_stderr}}|"
        )
    return "\n".join(lines)


def display_metrics_table(task_name: str, metrics: dict, start_time: float, end_time: float) -> None:
    """Print the evaluation results of ``task_name`` as a markdown table, then the elapsed time
    (``end_time - start_time``, seconds)."""
    print(f"\nEvaluation Results: {task_name}")
    if metrics:
        print(format_metrics_table(task_name, metrics))
    else:
        print("(no metrics)")
    print(f"Evaluation completed in {end_time - start_time:.2f} seconds")
