"""The end-of-run plot: its legend sits below the axes and covers neither the curves nor the axis labels."""

from __future__ import annotations

import json

import pytest

from example_trainer.grpo.reporting import plot_training_curves, training_figure

pytest.importorskip("matplotlib", reason="the plot needs matplotlib (the trainer extra)")


def _metrics(tmp_path):
    path = tmp_path / "metrics.jsonl"
    with open(path, "w") as fh:
        for step in range(1, 41):
            fh.write(json.dumps({"step": step, "train/kept_reward_mean": 0.3 + step / 100}) + "\n")
        for step, acc in [(0, 0.1), (20, 0.4), (40, 0.6)]:
            fh.write(json.dumps({"step": step, "eval/accuracy": acc}) + "\n")
    return path


def test_legend_is_outside_the_axes_and_below_the_x_label(tmp_path):
    import matplotlib.pyplot as plt

    fig = training_figure(_metrics(tmp_path))
    try:
        fig.canvas.draw()
        renderer = fig.canvas.get_renderer()
        legends = [a.get_legend() for a in fig.axes if a.get_legend() is not None] + list(fig.legends)
        assert len(legends) == 1
        legend = legends[0].get_window_extent(renderer)
        assert [t.get_text() for t in legends[0].get_texts()] == [
            "mean reward of kept groups (train batches)",
            "held-out accuracy",
        ]
        for ax in fig.axes:  # the reward axes and its twin (accuracy)
            assert not legend.overlaps(ax.get_window_extent(renderer))
            labels = ax.xaxis.get_tightbbox(renderer)  # None for the twin, whose x axis is hidden
            assert labels is None or not legend.overlaps(labels)
    finally:
        plt.close(fig)


def test_the_png_holds_the_legend(tmp_path):
    from matplotlib.image import imread

    out = plot_training_curves(_metrics(tmp_path), tmp_path / "curves.png")
    height, width = imread(out).shape[:2]
    assert height > 400 and width >= 650  # 7 x 4 in at 100 dpi, grown downwards for the legend
