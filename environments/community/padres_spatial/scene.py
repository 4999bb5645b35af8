"""Spatial tasks: the objects of a scene, the one the model moves and the one it must end up near.

A task row (``--env.dataset_path``) has ``initial_objects`` (a list of objects: ``id``, ``type`` ``cube`` or
``sphere``, ``position`` ``[x, y, z]``, optional ``scale`` ``[sx, sy, sz]`` (default ``[1, 1, 1]``; a
sphere's radius is half of ``sx``), ``orientation_quaternion`` ``[x, y, z, w]`` and ``color_rgba``),
``target_object_id`` (the object the model moves), ``reference_object_id`` (the object it must end up near),
optional ``target_distance`` (default 1.0) and ``task_id``.

Without a file, tasks are generated: the original's two objects (a red cube moved towards a blue sphere, both of
size 1 resting on the ground) on opposite sides of the YZ plane, at seeded random places.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass
from typing import Any

from atroposlib.envs.data_loading import DatasetError, check_rows

Vector = tuple[float, ...]
OBJECT_TYPES = ("cube", "sphere")


@dataclass(frozen=True)
class ObjectState:
    """One object of a scene as it starts."""

    id: str
    type: str
    position: Vector
    orientation_quaternion: Vector = (0.0, 0.0, 0.0, 1.0)
    scale: Vector = (1.0, 1.0, 1.0)
    color_rgba: Vector = (0.5, 0.5, 0.5, 1.0)


@dataclass(frozen=True)
class SpatialTask:
    """A scene and its goal: move ``target_object_id`` to about ``target_distance`` from
    ``reference_object_id``, on the reference's side of the YZ plane."""

    task_id: str
    initial_objects: tuple[ObjectState, ...]
    target_object_id: str
    reference_object_id: str
    target_distance: float = 1.0

    def object(self, object_id: str) -> ObjectState:
        """The object named ``object_id`` (KeyError when the scene has none)."""
        for obj in self.initial_objects:
            if obj.id == object_id:
                return obj
        raise KeyError(object_id)


def _scene(task_id: str, cube_at: Vector, sphere_at: Vector, target_distance: float) -> SpatialTask:
    cube = ObjectState("red_cube", "cube", cube_at, color_rgba=(1.0, 0.0, 0.0, 1.0))
    sphere = ObjectState("blue_sphere", "sphere", sphere_at, color_rgba=(0.0, 0.0, 1.0, 1.0))
    return SpatialTask(task_id, (cube, sphere), "red_cube", "blue_sphere", target_distance)


def original_task(task_id: str = "conditional_task", target_distance: float = 1.0) -> SpatialTask:
    """The original's one scene: the red cube at (2, 0.5, 0.5), the blue sphere at (-2, 0.5, 0.5)."""
    return _scene(task_id, (2.0, 0.5, 0.5), (-2.0, 0.5, 0.5), target_distance)


def generated_tasks(count: int, seed: int, target_distance: float, prefix: str) -> list[SpatialTask]:
    """``count`` scenes like the original's, seeded: the sphere 1.5 to 3 units from the YZ plane on a random
    side, the cube as far on the other side, each at a random ``y`` in [-2, 2], both resting on the ground
    (so they start at least 3 units apart)."""
    rng = random.Random(seed)
    tasks = []
    for index in range(count):
        side = rng.choice((-1.0, 1.0))
        sphere = (round(side * rng.uniform(1.5, 3.0), 2), round(rng.uniform(-2.0, 2.0), 2), 0.5)
        cube = (round(-side * rng.uniform(1.5, 3.0), 2), round(rng.uniform(-2.0, 2.0), 2), 0.5)
        tasks.append(_scene(f"{prefix}_{index}", cube, sphere, target_distance))
    return tasks


def _vector(value: Any, size: int, where: str, positive: bool = False) -> Vector:
    if isinstance(value, tuple):
        value = list(value)
    if hasattr(value, "tolist"):  # a Parquet column holds arrays
        value = value.tolist()
    ok = isinstance(value, list) and len(value) == size
    ok = ok and all(
        isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v) for v in value
    )
    if not ok or (positive and min(value) <= 0):
        kind = "positive numbers" if positive else "numbers"
        raise DatasetError(f"{where} must be a list of {size} {kind}")
    return tuple(float(v) for v in value)


def _object(value: Any, where: str) -> ObjectState:
    if not isinstance(value, dict):
        raise DatasetError(f"{where} must be an object")
    for field in ("id", "type", "position"):
        if value.get(field) is None:
            raise DatasetError(f"{where}: missing field {field!r}")
    if value["type"] not in OBJECT_TYPES:
        raise DatasetError(f"{where}: field 'type' must be one of {', '.join(OBJECT_TYPES)}")
    optional = {"orientation_quaternion": (4, False), "scale": (3, True), "color_rgba": (4, False)}
    extra = {
        name: _vector(value[name], size, f"{where}: field {name!r}", positive)
        for name, (size, positive) in optional.items()
        if value.get(name) is not None
    }
    position = _vector(value["position"], 3, f"{where}: field 'position'")
    return ObjectState(str(value["id"]), value["type"], position, **extra)


def _task(row: dict[str, Any], where: str, index: int) -> SpatialTask:
    objects = row["initial_objects"]
    if hasattr(objects, "tolist"):
        objects = objects.tolist()
    if not isinstance(objects, list) or not objects:
        raise DatasetError(f"{where}: field 'initial_objects' must be a non-empty list")
    parsed = tuple(_object(obj, f"{where}: field 'initial_objects' [{i}]") for i, obj in enumerate(objects))
    ids = [obj.id for obj in parsed]
    if len(set(ids)) != len(ids):
        raise DatasetError(f"{where}: field 'initial_objects' repeats an id")
    for field in ("target_object_id", "reference_object_id"):
        if str(row[field]) not in ids:
            raise DatasetError(f"{where}: field {field!r} names no object of the scene")
    if str(row["target_object_id"]) == str(row["reference_object_id"]):
        raise DatasetError(f"{where}: field 'reference_object_id' is the target object")
    distance = row.get("target_distance")
    distance = 1.0 if distance is None else distance
    if isinstance(distance, bool) or not isinstance(distance, (int, float)) or not 0 < distance < math.inf:
        raise DatasetError(f"{where}: field 'target_distance' must be a positive number")
    task_id = str(row.get("task_id") or f"task_{index}")
    return SpatialTask(
        task_id, parsed, str(row["target_object_id"]), str(row["reference_object_id"]), distance
    )


def tasks_from_rows(rows: list[dict[str, Any]], source: str) -> list[SpatialTask]:
    """The tasks of local rows (see the module docstring); a bad row raises :class:`DatasetError` naming
    ``source``, the row and the field."""
    check_rows(rows, ("initial_objects", "target_object_id", "reference_object_id"), source)
    return [_task(row, f"{source}: row {index}", index) for index, row in enumerate(rows)]
