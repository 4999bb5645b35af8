"""The reward of a placement: how close the moved object ended to the reference, and on which side.

With ``d`` the distance between the two centres after the world settled and ``t`` the task's
``target_distance``: 0.8 for ``d <= t``, 0.6 for ``d <= 1.25 t``, 0.4 for ``d <= 1.75 t``, 0.2 for
``d <= 2.5 t``, else 0 (each bound with ``DISTANCE_TOLERANCE``, so that objects resting against each other
count as touching whichever way the solver's contact slop rounds); plus 0.2 when the moved object ends on the reference's side of the YZ plane (its ``x``
has the sign of the reference's initial ``x``; for a reference starting at ``x = 0``, within 0.5 of it).
Capped at 1 and rounded to two decimals. Solid objects cannot overlap, so ``d`` cannot shrink below the
touching distance by stuffing one object into the other.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from environments.community.padres_spatial.scene import SpatialTask, Vector

#: (multiple of ``target_distance``, score) from the closest band out
DISTANCE_BANDS = ((1.0, 0.8), (1.25, 0.6), (1.75, 0.4), (2.5, 0.2))
SIDE_BONUS = 0.2
#: the solver leaves resting contacts within about 1e-5 of touching; this absorbs that
DISTANCE_TOLERANCE = 1e-3


@dataclass(frozen=True)
class Placement:
    """Where the moved object ended: its ``distance`` to the reference, whether it is on the reference's side
    (``side_condition_met``) and the resulting ``score``."""

    distance: float
    side_condition_met: bool
    score: float


def _sign(value: float) -> float:
    return math.copysign(1.0, value) if value != 0 else 0.0


def placement(task: SpatialTask, final_positions: dict[str, Vector]) -> Placement:
    """The placement of the task's target object given every object's final centre (see the module)."""
    target = final_positions[task.target_object_id]
    gap = math.dist(target, final_positions[task.reference_object_id])
    reference_x = task.object(task.reference_object_id).position[0]
    if reference_x != 0:
        side = _sign(target[0]) == _sign(reference_x)
    else:
        side = abs(target[0]) < 0.5
    score = next(
        (s for factor, s in DISTANCE_BANDS if gap <= task.target_distance * factor + DISTANCE_TOLERANCE), 0.0
    )
    score += SIDE_BONUS if side else 0.0
    return Placement(gap, side, round(min(score, 1.0), 2))
