"""Padres: spatial reasoning in a pybullet scene. The model moves one object next to another.

Each prompt lists a scene's objects (ids, shapes, centres) and asks to move the target object (the red cube)
to about ``target_distance`` (1.0) units from the reference object (the blue sphere), on the sphere's side of
the YZ plane. The reply is one JSON move (``actions.py``); the move is made in a pybullet world with a ground
plane and gravity, the world is stepped ``simulation_steps`` (20) times (objects placed inside each other are
pushed apart, objects in the air fall) and the final centres are scored (``placement.py``): 0.8 / 0.6 / 0.4 /
0.2 for a distance within 1, 1.25, 1.75, 2.5 times the target, plus 0.2 for the right side, capped at 1. A
reply without a valid move scores 0, as the untouched scene does. Logs ``train/valid_move``,
``train/side_condition_met``, ``train/within_target``; evaluate adds ``eval/valid_move_rate``,
``eval/mean_final_distance`` (valid moves).

Data: ``train_scenes`` / ``eval_scenes`` scenes generated from ``scene_seed`` (the original's two objects at
random places on opposite sides; ``randomize_scenes false`` repeats the original's one scene);
``--env.dataset_path`` / ``--env.eval_dataset_path`` read task rows (``scene.py``).

``python environments/community/padres_spatial/spatial_env.py {serve,process,evaluate}``
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Optional

from pydantic import Field

# Run as a script, the repository root is not on the path yet.
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from atroposlib.envs.data_loading import read_local_rows  # noqa: E402
from atroposlib.envs.declared_defaults import DeclaredDefaults  # noqa: E402
from atroposlib.envs.reply_fields import ReplyFields  # noqa: E402
from atroposlib.envs.reporting import mean  # noqa: E402
from atroposlib.envs.single_turn import SingleTurnEnv, SingleTurnEnvConfig  # noqa: E402
from environments.community._judging.train_shares import TrainShares  # noqa: E402
from environments.community.padres_spatial import scene  # noqa: E402
from environments.community.padres_spatial.actions import parse_move  # noqa: E402
from environments.community.padres_spatial.physics import settle_after_move  # noqa: E402
from environments.community.padres_spatial.placement import Placement, placement  # noqa: E402
from environments.community.padres_spatial.scene import SpatialTask  # noqa: E402

PROMPT = """Task: The {target} and the {reference} are on opposite sides of the YZ plane (their x coordinates \
have different signs). Move the {target} next to the {reference}: onto the {reference}'s side of the YZ plane \
(an x coordinate of the same sign as the {reference}'s), with its centre about {distance:.1f} unit away from \
the {reference}'s centre. The scene is simulated: objects cannot overlap and fall under gravity onto the \
ground (z = 0).

Objects (initial state):
{objects}

You control '{target}'. Answer with one JSON object and nothing else:
{{"action_type": "move_object", "object_id": "{target}", "target_position": [x, y, z]}}
with the new centre as three numbers. You may reason first inside <think> </think> tags."""


def _xyz(position: Sequence[float]) -> str:
    return "[" + ", ".join(f"{v:.2f}" for v in position) + "]"


class SpatialEnvironmentMVPConfig(SingleTurnEnvConfig):
    """SingleTurnEnvConfig plus the scenes and the simulation."""

    unsupported_original_keys: ClassVar[dict[str, str]] = {
        "num_turns": "use --env.total_steps (process writes one group per step)",
        "output_file": "use --env.data_path_to_save_groups",
    }
    dataset_path: Optional[str] = Field(None, description="task rows (default: generated scenes)")
    eval_dataset_path: Optional[str] = Field(
        None, description="evaluation task rows (default: generated scenes)"
    )
    randomize_scenes: bool = Field(
        True, description="generate seeded scenes; false: the original's one scene"
    )
    train_scenes: int = Field(1000, ge=1, description="generated training scenes")
    eval_scenes: int = Field(50, ge=1, description="generated evaluation scenes")
    scene_seed: int = Field(0, description="seed of the generated scenes (evaluation uses seed + 1)")
    target_distance: float = Field(1.0, gt=0, description="distance asked for in generated scenes")
    simulation_steps: int = Field(20, ge=0, description="world steps after the move, before scoring")


class SpatialEnvironmentMVP(TrainShares, ReplyFields, DeclaredDefaults, SingleTurnEnv):
    """Scores one move in a pybullet scene by where the objects end up (see the module docstring); an
    evaluation move is correct (``correct_threshold``) when it reaches the target distance on the right side."""

    name = "padres_spatial"
    correct_threshold = 1.0
    env_config_cls = SpatialEnvironmentMVPConfig
    config: SpatialEnvironmentMVPConfig
    default_env_values = dict(group_size=8, temperature=0.7, max_tokens=1024, max_token_length=2048)

    def _tasks(self, path: Optional[str], count: int, seed: int, prefix: str) -> list[SpatialTask]:
        cfg = self.config
        if path:
            return scene.tasks_from_rows(read_local_rows(path), path)
        if not cfg.randomize_scenes:
            return [scene.original_task(f"{prefix}_original", cfg.target_distance)]
        return scene.generated_tasks(count, seed, cfg.target_distance, prefix)

    async def setup(self) -> None:
        cfg = self.config
        self.train = self._tasks(cfg.dataset_path, cfg.train_scenes, cfg.scene_seed, "train")
        self.test = self._tasks(cfg.eval_dataset_path, cfg.eval_scenes, cfg.scene_seed + 1, "eval")

    def prompt_messages(self, item: SpatialTask) -> list[dict[str, str]]:
        objects = "\n".join(
            f"- ID: {obj.id}, Type: {obj.type}, Size: {_xyz(obj.scale)}, Current Position: {_xyz(obj.position)}"
            for obj in item.initial_objects
        )
        content = PROMPT.format(
            target=item.target_object_id,
            reference=item.reference_object_id,
            distance=item.target_distance,
            objects=objects,
        )
        return [{"role": "user", "content": content}]

    def place(self, reply: str, item: SpatialTask) -> Optional[Placement]:
        """Where the reply's move leaves the target object after the world settles; None without a move."""
        position = parse_move(reply, item.target_object_id)
        if position is None:
            return None
        return placement(item, settle_after_move(item, position, self.config.simulation_steps))

    def score_replies(self, replies: Sequence[str], item: SpatialTask) -> list[float]:
        placements = [self.place(reply, item) for reply in replies]
        self.record_share("valid_move", [p is not None for p in placements])
        self.record_share("side_condition_met", [p is not None and p.side_condition_met for p in placements])
        self.record_share("within_target", [p is not None and p.score >= 0.8 for p in placements])
        return [p.score if p is not None else 0.0 for p in placements]

    def eval_sample_fields(self, item: SpatialTask) -> dict[str, Any]:
        return {"task_id": item.task_id}

    def reply_fields(self, reply: str, item: SpatialTask) -> dict[str, Any]:
        placed = self.place(reply, item)
        if placed is None:
            return {"valid_move": False, "final_distance": None, "side_condition_met": False}
        return {
            "valid_move": True,
            "final_distance": round(placed.distance, 3),
            "side_condition_met": placed.side_condition_met,
        }

    def extra_eval_metrics(self, samples: Sequence[dict[str, Any]]) -> dict[str, float]:
        """``eval/valid_move_rate`` and ``eval/mean_final_distance`` (over valid moves; absent without one)."""
        metrics = {"eval/valid_move_rate": sum(s["valid_move"] for s in samples) / len(samples)}
        distances = [s["final_distance"] for s in samples if s["valid_move"]]
        if distances:
            metrics["eval/mean_final_distance"] = mean(distances)
        return metrics


if __name__ == "__main__":
    SpatialEnvironmentMVP.cli()
