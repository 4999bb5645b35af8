"""Summary statistics for wandb-style metric dicts."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def get_std_min_max_avg(name: str, data: Sequence[float], metrics_dict: dict) -> dict:
    """Add ``{name}_mean``, ``{name}_std`` (population), ``{name}_max`` and ``{name}_min`` of ``data`` to
    ``metrics_dict`` (as Python floats) and return it.

    Raises:
        ValueError: ``data`` is empty.
    """
    values = np.asarray(list(data), dtype=np.float64)
    if values.size == 0:
        raise ValueError(f"get_std_min_max_avg: no data for metric {name!r}")
    metrics_dict[f"{name}_mean"] = float(values.mean())
    metrics_dict[f"{name}_std"] = float(values.std())
    metrics_dict[f"{name}_max"] = float(values.max())
    metrics_dict[f"{name}_min"] = float(values.min())
    return metrics_dict
