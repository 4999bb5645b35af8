"""Clock reading: what time an analogue clock shows, answered as ``<answer>H:MM</answer>``.

Data: ``junyeong-nero/clock-dataset`` (``train``; the last ``eval_size`` rows held out), or a local file with
its fields ``image``, ``hour``, ``minute``. Reward: 1 when the one ``<answer>`` after the reasoning holds the
gold time on a 12-hour dial (``3:05`` = ``03:05`` = ``15:05`` = ``3:05 pm``; seconds ignored), else 0;
several times, words around the time, an impossible time or no tag score 0.

``python environments/multimodal_dpo/pixmo_clocks.py process --env.dataset_path FILE``
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Optional

from atroposlib.envs.vision import VisionItem, VisionQAEnv
from atroposlib.utils.vqa_answers import clock_minutes

QUESTION = "What time does the clock show?"


class ClockDatasetEnv(VisionQAEnv):
    """Reading analogue clocks (see the module docstring)."""

    name = "pixmo_clocks"
    hub_dataset = "junyeong-nero/clock-dataset"
    required_fields = ("image", "hour", "minute")
    system_prompt = (
        "Read the clock in the picture. You may reason inside <think> </think> tags first. Submit the time "
        "enclosed in <answer> tags, e.g. <answer>HH:MM</answer>."
    )

    def row_items(self, row: dict[str, Any], index: int, base_dir: Optional[Path]) -> list[VisionItem]:
        hour, minute = int(row["hour"]), int(row["minute"])
        if not (0 <= hour <= 23 and 0 <= minute <= 59):
            raise ValueError(f"fields 'hour'/'minute': {hour}:{minute:02d} is not a time")
        return [VisionItem(index, QUESTION, f"{hour}:{minute:02d}", row["image"], base_dir)]

    def score_answer(self, reply: str, item: VisionItem) -> float:
        answer = self.reply_answer(reply)
        got = clock_minutes(answer) if answer else None
        return 1.0 if got is not None and got == clock_minutes(item.answer) else 0.0


if __name__ == "__main__":
    ClockDatasetEnv.cli()
