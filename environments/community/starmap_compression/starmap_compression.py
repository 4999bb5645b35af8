"""Star map compression: choose which stars of a map to keep so that users' views lose the least.

Each item is a star field (``starfield.py``): ``n_stars`` numbered stars and ``n_views`` view positions in
3-D, a view radius and a budget (``keep_fraction`` of the stars). The model lists the stars to keep in one
``<answer>...</answer>`` after its optional ``<think>`` block (``<answer>3, 7, 12</answer>``; order, spacing
and repeats free).

Reward: the kept stars' worth (each star counts once per view that sees it, the points-in-view the map
keeps) over the best worth the budget allows, 0.0 to 1.0 (1.0: optimal); -1.0 for no answer, several
different answers, anything but star numbers, a star that does not exist, or more stars than the budget
(listing every star is over it). An optimal map counts as correct. Logged: ``train/valid_rate``; evaluate
adds ``eval/valid_rate`` and ``eval/mean_kept``.

Data: procedural. Training field ``k`` comes from ``seed + k``, the ``eval_episodes`` evaluation fields
from ``eval_seed`` on. By default the fields are synthetic (clustered stars in a flattened disc);
``--env.data_path FILE.npy`` cuts them from a star catalogue (an ``N x 3`` array, such as the original's
``galaxy_subset.npy``; further columns ignored) and ``--env.views_path FILE.npy`` draws the views from an
``M x 3`` array (the original's ``user_views.npy``).

``python environments/community/starmap_compression/starmap_compression.py {serve,process,evaluate} ...``
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from typing import Any, Optional

from pydantic import Field

from atroposlib.envs.config_defaults import LocalServerDefaults
from atroposlib.envs.data_loading import DatasetError
from atroposlib.envs.games import SeededGames
from atroposlib.envs.reply_fields import ReplyFields
from atroposlib.envs.reporting import mean
from atroposlib.envs.single_turn import SingleTurnEnv, SingleTurnEnvConfig
from atroposlib.utils.vqa_answers import tagged_answer

try:
    from environments.community.starmap_compression import starfield
except ModuleNotFoundError:  # run as a script: this folder is on the path
    import starfield

SYSTEM_PROMPT = (
    "You compress star maps. You may think inside <think> </think> tags first. A star is seen from a view "
    "when it lies within the view radius of it. Keep at most the given number of stars so that the kept "
    "stars are seen as many times as possible, counting a star once for every view that sees it. Answer "
    "with the numbers of the stars to keep inside <answer> </answer> tags, for example <answer>3, 7, 12</answer>."
)


def field_prompt(field: starfield.StarField) -> str:
    """The user turn: the stars, the views, the radius and the budget."""
    stars = "\n".join(f"star {i}: ({x}, {y}, {z})" for i, (x, y, z) in enumerate(field.stars))
    views = "\n".join(f"view {i}: ({x}, {y}, {z})" for i, (x, y, z) in enumerate(field.views))
    return (
        f"Stars:\n{stars}\n\nViews:\n{views}\n\nView radius: {field.radius}\n"
        f"Keep at most {field.budget} of the {len(field.stars)} stars."
    )


def kept_stars(reply: str, field: starfield.StarField) -> Optional[set[int]]:
    """The stars a reply keeps, or None for an invalid answer (see the module docstring)."""
    kept = starfield.parse_kept(tagged_answer(reply), len(field.stars))
    return kept if kept is not None and len(kept) <= field.budget else None


def map_score(reply: str, field: starfield.StarField) -> float:
    """The reward of a reply (see the module docstring)."""
    kept = kept_stars(reply, field)
    if kept is None:
        return -1.0
    best = field.optimum()
    return field.worth(kept) / best if best else 1.0


def load_points(path: str, name: str) -> list[tuple[float, ...]]:
    """The rows of a ``.npy`` array of 3-D points (extra columns kept); :class:`DatasetError` naming the file,
    and the row for a non-finite coordinate."""
    import numpy as np

    try:
        array = np.load(path, allow_pickle=False)
    except (OSError, ValueError) as exc:
        raise DatasetError(f"{path}: cannot read {name} as a .npy array ({exc})") from None
    if array.ndim != 2 or array.shape[1] < 3 or len(array) == 0:
        raise DatasetError(f"{path}: {name} must be an N x 3 array of positions, not shape {array.shape}")
    rows = [tuple(float(v) for v in row) for row in array]
    for index, row in enumerate(rows):
        if not all(math.isfinite(v) for v in row[:3]):
            raise DatasetError(f"{path}: row {index}: a coordinate is not a finite number")
    return rows


class StarMapCompressionConfig(SingleTurnEnvConfig):
    """SingleTurnEnvConfig plus the field sizes, the seeds and an optional star catalogue."""

    n_stars: int = Field(30, ge=2, description="stars per field")
    n_views: int = Field(3, ge=1, description="views per field")
    keep_fraction: float = Field(0.3, gt=0.0, le=1.0, description="share of the stars that may be kept")
    seed: int = Field(0, description="seed of training field 0 (field k: seed + k)")
    eval_seed: int = Field(1_000_000, description="seed of the first evaluation field")
    eval_episodes: int = Field(50, ge=1, description="evaluation fields")
    data_path: Optional[str] = Field(
        None, description="star catalogue .npy (N x 3); default: synthetic fields"
    )
    views_path: Optional[str] = Field(None, description="view positions .npy (M x 3) for data_path")


class StarMapCompressionEnv(LocalServerDefaults, SeededGames, ReplyFields, SingleTurnEnv):
    """Keep the stars users see most, within a budget (see the module docstring)."""

    name = "starmap_compression"
    env_config_cls = StarMapCompressionConfig
    config: StarMapCompressionConfig

    def __init__(self, config: StarMapCompressionConfig, server_configs, slurm=False, testing=False):
        super().__init__(config, server_configs, slurm, testing)
        self.catalogue: Optional[list[tuple[float, ...]]] = None
        self.views: Optional[list[tuple[float, ...]]] = None
        self.valid_buffer: list[float] = []

    @classmethod
    def default_env_config(cls) -> StarMapCompressionConfig:
        return StarMapCompressionConfig(group_size=8, max_token_length=4096, max_tokens=2048)

    async def setup(self) -> None:
        cfg = self.config
        self.iter = 0
        if cfg.views_path and not cfg.data_path:
            raise DatasetError(
                "--env.views_path needs --env.data_path (the star catalogue the views look at)"
            )
        if cfg.data_path:
            self.catalogue = load_points(cfg.data_path, "the star catalogue")
            if len(self.catalogue) < cfg.n_stars:
                raise DatasetError(
                    f"{cfg.data_path}: {len(self.catalogue)} stars, fewer than n_stars={cfg.n_stars}"
                )
            self.views = load_points(cfg.views_path, "the views") if cfg.views_path else None

    def field(self, item: dict[str, int]) -> starfield.StarField:
        """The star field of an item ``{"seed": n}``."""
        cfg = self.config
        rng = random.Random(f"starmap:{item['seed']}")
        if self.catalogue is None:
            return starfield.generate_field(rng, cfg.n_stars, cfg.n_views, cfg.keep_fraction)
        return starfield.catalogue_field(
            rng, self.catalogue, self.views, cfg.n_stars, cfg.n_views, cfg.keep_fraction
        )

    def prompt_messages(self, item: dict[str, int]) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": field_prompt(self.field(item))},
        ]

    def score_replies(self, replies: Sequence[str], item: dict[str, int]) -> list[float]:
        field = self.field(item)
        scores = [map_score(reply, field) for reply in replies]
        if len(replies) > 1:  # a training group (evaluation scores one reply at a time)
            self.valid_buffer.extend(0.0 if s < 0 else 1.0 for s in scores)
        return scores

    def eval_sample_fields(self, item: dict[str, int]) -> dict[str, Any]:
        field = self.field(item)
        return {"seed": item["seed"], "budget": field.budget, "optimum": field.optimum()}

    def reply_fields(self, reply: str, item: dict[str, int]) -> dict[str, Any]:
        kept = kept_stars(reply, self.field(item))
        return {"kept": sorted(kept) if kept is not None else None}

    def extra_eval_metrics(self, samples: Sequence[dict[str, Any]]) -> dict[str, float]:
        valid = [s for s in samples if s["kept"] is not None]
        return {
            "eval/valid_rate": len(valid) / len(samples),
            "eval/mean_kept": mean([len(s["kept"]) for s in valid]),
        }

    async def wandb_log(self, wandb_metrics: Optional[dict] = None) -> None:
        wandb_metrics = dict(wandb_metrics or {})
        if self.valid_buffer:
            wandb_metrics["train/valid_rate"] = mean(self.valid_buffer)
        self.valid_buffer = []
        await super().wandb_log(wandb_metrics)


if __name__ == "__main__":
    StarMapCompressionEnv.cli()
