"""Run reporting: a JSONL metrics log, wandb (offline without a key) and the end-of-run PNG plot.

``<save_path>/metrics.jsonl`` holds one JSON object per line with a ``step`` key and the wall-clock
``time`` it was written (Unix seconds): training metrics after each optimizer step (``train/loss``,
``train/kept_reward_mean``, ``train/tokens_per_s``, ...) and evaluation metrics from the eval hook
(``eval/accuracy``, ...). A resumed run appends to the same file; for each step the last record wins, so
the plot shows the run as it was finally trained.

``train/kept_reward_mean`` is the mean score of the batch trained on. Groups whose scores are all equal are
dropped before they reach the trainer, so it is not the policy's reward: the environment logs that as
``train/rollout_reward_mean`` (every rollout generated), with ``train/groups_dropped_equal_scores``.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import string
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from example_trainer.grpo.config import TrainingConfig

logger = logging.getLogger(__name__)

METRICS_FILE = "metrics.jsonl"


class WarnOnce:
    """Log a warning the first time its key is seen in this process; later calls with the key are silent.

    ``seen`` holds the keys already warned about (clear it to warn again).
    """

    def __init__(self, log: logging.Logger) -> None:
        self.log = log
        self.seen: set[str] = set()

    def __call__(self, key: str, message: str) -> None:
        if key not in self.seen:
            self.seen.add(key)
            self.log.warning(message)


def wandb_mode() -> str:
    """``online`` with a wandb key (``WANDB_API_KEY`` or a netrc login), ``offline`` otherwise, unless
    ``WANDB_MODE`` says otherwise."""
    if os.environ.get("WANDB_MODE"):
        return os.environ["WANDB_MODE"]
    if os.environ.get("WANDB_API_KEY"):
        return "online"
    netrc = Path.home() / ".netrc"
    try:
        if netrc.is_file() and "api.wandb.ai" in netrc.read_text():
            return "online"
    except OSError:
        pass
    return "offline"


class RunLogger:
    """Writes metrics to ``metrics.jsonl`` and, when ``config.use_wandb``, to wandb."""

    def __init__(self, config: TrainingConfig, resume_run_id: str | None = None) -> None:
        self.path = Path(config.save_path) / METRICS_FILE
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.run = None
        if config.use_wandb:
            import wandb

            group = config.wandb_group or "".join(secrets.choice(string.ascii_lowercase) for _ in range(8))
            self.run = wandb.init(
                project=config.wandb_project or "atropos-grpo",
                group=group,
                config=config.model_dump(exclude={"api_key"}),
                mode=wandb_mode(),
                dir=str(self.path.parent),
                id=resume_run_id,
                resume="allow" if resume_run_id else None,
            )

    @property
    def run_id(self) -> str | None:
        return getattr(self.run, "id", None)

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        record = {
            "step": step,
            **{k: v for k, v in metrics.items() if isinstance(v, int | float | str | None)},
            "time": round(time.time(), 3),
        }
        with self.path.open("a") as fh:
            fh.write(json.dumps(record) + "\n")
        if self.run is not None:
            self.run.log(
                {k: v for k, v in record.items() if k not in ("step", "time") and isinstance(v, int | float)},
                step=step,
            )

    def finish(self) -> None:
        if self.run is not None:
            self.run.finish()
            self.run = None


def read_metrics(path: str | Path) -> dict[int, dict[str, Any]]:
    """step → merged metrics from a ``metrics.jsonl`` (later records override earlier ones per key)."""
    merged: dict[int, dict[str, Any]] = {}
    try:
        lines = Path(path).read_text().splitlines()
    except OSError:
        return merged
    for line in lines:
        try:
            record = json.loads(line)
            step = int(record.pop("step"))
        except (ValueError, KeyError, TypeError):
            continue
        merged.setdefault(step, {}).update(record)
    return merged


def plot_training_curves(
    metrics_path: str | Path, out_path: str | Path, max_step: int | None = None
) -> Path | None:
    """Draw the kept groups' reward (``train/kept_reward_mean``) and held-out accuracy (``eval/accuracy``)
    over steps into a PNG (see :func:`training_figure`).

    Steps above ``max_step`` (from a crashed attempt that was later resumed) are left out. Returns the
    PNG path, or None when there is nothing to draw or matplotlib is missing.
    """
    fig = training_figure(metrics_path, max_step)
    if fig is None:
        return None
    import matplotlib.pyplot as plt

    out = Path(out_path)
    out.parent.mkdir(parents=True, exist_ok=True)
    # "tight" grows the canvas to hold the legend below the axes.
    fig.savefig(out, bbox_inches="tight")
    plt.close(fig)
    return out


def training_figure(metrics_path: str | Path, max_step: int | None = None) -> Any:
    """The matplotlib figure of :func:`plot_training_curves`: reward on the left axis, accuracy on the
    right, one legend below the axes (it never covers the curves); None when there is nothing to draw or
    matplotlib is missing."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        logger.warning("matplotlib is not installed; no plot written")
        return None
    data = read_metrics(metrics_path)
    steps = sorted(s for s in data if max_step is None or s <= max_step)
    reward = [(s, data[s]["train/kept_reward_mean"]) for s in steps if "train/kept_reward_mean" in data[s]]
    accuracy = [(s, data[s]["eval/accuracy"]) for s in steps if "eval/accuracy" in data[s]]
    if not reward and not accuracy:
        return None
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    lines = []
    if reward:
        lines += ax.plot(
            *zip(*reward, strict=True),
            color="tab:blue",
            marker=".",
            label="mean reward of kept groups (train batches)",
        )
    ax.set_xlabel("optimizer step")
    ax.set_ylabel("reward", color="tab:blue")
    if accuracy:
        ax2 = ax.twinx()
        lines += ax2.plot(
            *zip(*accuracy, strict=True), color="tab:red", marker="o", label="held-out accuracy"
        )
        ax2.set_ylabel("held-out accuracy", color="tab:red")
        ax2.set_ylim(-0.02, 1.02)
    ax.set_title("GRPO training")
    ax.grid(alpha=0.3)
    fig.tight_layout()
    ax.legend(
        lines,
        [line.get_label() for line in lines],
        loc="upper center",
        bbox_to_anchor=(0.5, -0.16),
        ncol=2,
        frameon=False,
    )
    return fig
