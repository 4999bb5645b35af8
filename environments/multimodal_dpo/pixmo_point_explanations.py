"""PixMo point explanations: answer a question about a photo by pointing at what it asks about.

Data: ``allenai/pixmo-point-explanations`` (``train``; the last ``eval_size`` rows held out): ``image_url``
(fetched when sampled), ``question`` and ``points`` (the annotated points, in percent of the picture's width
and height: ``{"x", "y"}`` dicts, possibly grouped in lists, or ``[x, y]`` pairs); a local file has the same
fields (``image_url`` may be a path relative to the file, a data URI or base64). Rows without points are
left out.

Replies point in Molmo's form, after the optional reasoning: ``<point x="12.5" y="40.0" alt="cup">cup</point>``
or ``<points x1="10" y1="20" x2="30" y2="40" alt="cups">cups</points>``. Reward: the greedy nearest match of
predicted and annotated points, each pair earning ``max(0, 1 - distance / point_radius)`` (distance in
percent units), summed and divided by the larger of the two counts, so missing and extra points both cost;
a malformed point tag, no point at all or a malformed think block score 0. Evaluation counts a reply as
correct at ``correct_threshold`` (0.5).

``python environments/multimodal_dpo/pixmo_point_explanations.py process --env.dataset_path FILE``
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from pydantic import Field

from atroposlib.envs.vision import VisionItem, VisionQAConfig, VisionQAEnv
from atroposlib.utils.replies import answer_section
from atroposlib.utils.vqa_answers import parse_points, point_score


class PointExplanationsConfig(VisionQAConfig):
    """VisionQAConfig plus how close a point must be to earn credit."""

    point_radius: float = Field(
        10.0, gt=0, description="distance (percent of width/height) at which a point's credit falls to 0"
    )


def gold_points(value: Any) -> list[tuple[float, float]]:
    """The annotated points of a row's ``points`` field (dicts with x/y, nested lists of them, or pairs)."""
    if isinstance(value, dict):
        return [(float(value["x"]), float(value["y"]))]
    if isinstance(value, (list, tuple)):
        if len(value) == 2 and all(isinstance(v, (int, float)) for v in value):
            return [(float(value[0]), float(value[1]))]
        return [point for entry in value for point in gold_points(entry)]
    raise ValueError(f"field 'points': cannot read {type(value).__name__} as points")


class PointExplanationsEnv(VisionQAEnv):
    """Pointing at what a question asks about (see the module docstring)."""

    name = "pixmo_point_explanations"
    hub_dataset = "allenai/pixmo-point-explanations"
    env_config_cls = PointExplanationsConfig
    config: PointExplanationsConfig
    required_fields = ("image_url", "question", "points")
    image_field = "image_url"
    correct_threshold = 0.5
    system_prompt = (
        "Answer by pointing. You may reason inside <think> </think> tags first. Then mark every place in the "
        'picture the question asks about with <point x="X" y="Y" alt="what">what</point>, or several at once '
        'with <points x1="X1" y1="Y1" x2="X2" y2="Y2" alt="what">what</points>; x and y are percentages of the '
        "picture's width and height (0 to 100) from its top-left corner."
    )

    def row_items(self, row: dict[str, Any], index: int, base_dir: Optional[Path]) -> list[VisionItem]:
        points = gold_points(row["points"])
        if not points:
            return []
        return [VisionItem(index, str(row["question"]), points, row["image_url"], base_dir)]

    def score_answer(self, reply: str, item: VisionItem) -> float:
        section = answer_section(reply)
        predicted = parse_points(section) if section is not None else None
        if not predicted:
            return 0.0
        return point_score(predicted, item.answer, self.config.point_radius)


if __name__ == "__main__":
    PointExplanationsEnv.cli()
