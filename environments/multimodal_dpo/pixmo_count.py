"""PixMo-Count: how many objects of a kind a photo shows, answered as ``<answer>N</answer>``.

Data: ``allenai/pixmo-count`` (``train``; the last ``eval_size`` rows held out), whose rows give the photo as
``image_url`` (fetched when sampled; a photo that cannot be fetched skips its item with a warning), or a
local file with the same fields: ``image_url`` (URL, file path relative to the file, data URI or base64),
``label``, ``count``. The question is "How many {label} are in the image?". Reward: 1 when the one
``<answer>`` after the reasoning is the count (digits or a number word), else 0.

``python environments/multimodal_dpo/pixmo_count.py process --env.dataset_path FILE``
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from atroposlib.envs.vision import VisionItem, VisionQAEnv


class PixmoCountEnv(VisionQAEnv):
    """Counting objects in photos (see the module docstring)."""

    name = "pixmo_count"
    hub_dataset = "allenai/pixmo-count"
    required_fields = ("image_url", "label", "count")
    image_field = "image_url"
    system_prompt = (
        "Count carefully. You may reason inside <think> </think> tags first. Submit the number enclosed in "
        "<answer> tags, e.g. <answer>3</answer>."
    )

    def row_items(self, row: dict[str, Any], index: int, base_dir: Optional[Path]) -> list[VisionItem]:
        count = int(row["count"])
        if count < 0:
            raise ValueError(f"field 'count': {count} is negative")
        question = f"How many {row['label']} are in the image?"
        return [VisionItem(index, question, str(count), row["image_url"], base_dir)]


if __name__ == "__main__":
    PixmoCountEnv.cli()
