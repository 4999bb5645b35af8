"""The scene in pybullet: objects on a ground plane under gravity, one moved, the world stepped, positions read.

Each :class:`MVPPhysicsSimulator` owns one headless (``DIRECT``) pybullet client. Objects are rigid bodies of
mass 1 (a cube is a box of half-extents ``scale / 2``, a sphere has radius ``scale[0] / 2``); a move resets the
body's pose, and stepping lets gravity and contacts act: an object placed inside another is pushed out, one
placed in the air falls.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import pybullet as p
import pybullet_data

from environments.community.padres_spatial.scene import ObjectState, SpatialTask, Vector

GRAVITY = -9.8


class MVPPhysicsSimulator:
    """One pybullet world holding a task's objects; a context manager that disconnects on exit."""

    def __init__(self) -> None:
        self.client_id = -1
        self.objects_pb_ids: dict[str, int] = {}

    def initialize(self, objects: Sequence[ObjectState]) -> None:
        """Start a fresh world (ground plane, gravity) holding ``objects`` at their initial poses."""
        self.cleanup()
        self.client_id = p.connect(p.DIRECT)
        p.setAdditionalSearchPath(pybullet_data.getDataPath(), physicsClientId=self.client_id)
        p.setGravity(0, 0, GRAVITY, physicsClientId=self.client_id)
        p.loadURDF("plane.urdf", physicsClientId=self.client_id)
        self.objects_pb_ids = {obj.id: self._add_object(obj) for obj in objects}

    def _add_object(self, obj: ObjectState) -> int:
        client = self.client_id
        if obj.type == "cube":
            half = [s / 2.0 for s in obj.scale]
            shape = p.createCollisionShape(p.GEOM_BOX, halfExtents=half, physicsClientId=client)
            visual = p.createVisualShape(
                p.GEOM_BOX, halfExtents=half, rgbaColor=obj.color_rgba, physicsClientId=client
            )
        else:
            radius = obj.scale[0] / 2.0
            shape = p.createCollisionShape(p.GEOM_SPHERE, radius=radius, physicsClientId=client)
            visual = p.createVisualShape(
                p.GEOM_SPHERE, radius=radius, rgbaColor=obj.color_rgba, physicsClientId=client
            )
        return p.createMultiBody(
            baseMass=1,
            baseCollisionShapeIndex=shape,
            baseVisualShapeIndex=visual,
            basePosition=obj.position,
            baseOrientation=obj.orientation_quaternion,
            physicsClientId=client,
        )

    def move_object(self, object_id: str, target_position: Sequence[float]) -> None:
        """Put ``object_id`` at ``target_position``, keeping its orientation (KeyError for an unknown id)."""
        body = self.objects_pb_ids[object_id]
        _, orientation = p.getBasePositionAndOrientation(body, physicsClientId=self.client_id)
        p.resetBasePositionAndOrientation(
            body, list(target_position), orientation, physicsClientId=self.client_id
        )

    def simulate_steps(self, steps: int) -> None:
        """Advance the world ``steps`` fixed steps (pybullet's default 1/240 s each)."""
        for _ in range(steps):
            p.stepSimulation(physicsClientId=self.client_id)

    def positions(self) -> dict[str, Vector]:
        """Each object's current centre."""
        return {
            object_id: tuple(p.getBasePositionAndOrientation(body, physicsClientId=self.client_id)[0])
            for object_id, body in self.objects_pb_ids.items()
        }

    def cleanup(self) -> None:
        """Disconnect the world, if one is running."""
        if self.client_id != -1:
            p.disconnect(physicsClientId=self.client_id)
            self.client_id = -1

    def __enter__(self) -> MVPPhysicsSimulator:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.cleanup()


def settle_after_move(task: SpatialTask, position: Sequence[float], steps: int) -> dict[str, Vector]:
    """Every object's centre after moving the task's target object to ``position`` in its initial scene and
    stepping the world ``steps`` times."""
    with MVPPhysicsSimulator() as simulator:
        simulator.initialize(task.initial_objects)
        simulator.move_object(task.target_object_id, position)
        simulator.simulate_steps(steps)
        return simulator.positions()
