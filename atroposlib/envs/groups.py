"""The data an environment produces: scored groups and single scored rollouts.

``ScoredDataGroup`` and ``ScoredDataItem`` are the ``TypedDict`` s of :mod:`atroposlib.group` (plain
``dict`` s at runtime, subclassable, tolerant of extra keys), re-exported under their public path;
:mod:`atroposlib.envs.base` re-exports them too.
"""

from __future__ import annotations

from enum import Enum

from atroposlib.group import ScoredDataGroup, ScoredDataItem

__all__ = ["EvalHandlingEnum", "ScoredDataGroup", "ScoredDataItem"]


class EvalHandlingEnum(Enum):
    """What happens to training workers while an evaluation runs."""

    STOP_TRAIN = "STOP_TRAIN"  # cancel (and re-queue) training work during eval
    LIMIT_TRAIN = "LIMIT_TRAIN"  # cap training workers at max_num_workers * eval_limit_ratio
    NONE = "NONE"  # no change
