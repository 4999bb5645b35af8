"""UFC fight predictions as broadcast-style commentary from the two fighters' pictures alone.

The image variant of ``ufc_server.py``: each prompt shows the red corner's and the blue corner's fighter
pictures (no names, no statistics) to a vision-language model and asks for live-style commentary ending with
the winning corner in ``\\boxed{Red}`` or ``\\boxed{Blue}``. Reward: +1 when the reply predicts the fight's
winning corner, -1 otherwise (the other corner, no prediction, a hedge, a fighter's name instead of a colour,
a prediction only inside ``<think>``, text after the prediction or almost no commentary; ``prediction.py``
says exactly how a reply is read).

Data: the fights and fighter files of ``ufc_server.py`` (the same defaults and ``--env.*`` settings), and a
folder of pictures, one per fighter, named by the fighter's name in lower case with spaces as dashes
(``Jon Jones`` -> ``jon-jones.jpg``): ``fighter_images`` next to this file, or ``--env.image_folder``. Fights
missing either fighter's picture are left out (a warning counts them); an unreadable picture stops the
environment with one line naming it.

Sampling: the two pictures go to the model as ``image_url`` parts of the user turn (PNG data URLs, scaled
to ``max_image_side``) through the chat route of any OpenAI-compatible server serving a vision-language model;
every sequence of a group carries both pictures in ``images`` (red first), as the vision environments of
:mod:`atroposlib.envs.vision` do.

``python environments/community/ufc_prediction_env/ufc_image_env.py {serve,process,evaluate}``
"""

from __future__ import annotations

import asyncio
import logging
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Optional

from pydantic import Field

# Run as a script, the repository root is not on the path yet.
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from atroposlib.envs.data_loading import DatasetError  # noqa: E402
from atroposlib.envs.server_handling.message_tokens import text_content  # noqa: E402
from atroposlib.envs.vision import VISION_MODEL, VisionQAEnv  # noqa: E402
from atroposlib.utils.images import ImageError, data_url, image_base64  # noqa: E402
from environments.community.ufc_prediction_env.fight_data import Fight  # noqa: E402
from environments.community.ufc_prediction_env.prediction import predicted_colour  # noqa: E402
from environments.community.ufc_prediction_env.ufc_server import HERE, UFCEnv, UFCEnvConfig  # noqa: E402

logger = logging.getLogger(__name__)

SYSTEM_PROMPT = (
    "You are an expert MMA analyst. You will be given two UFC fighters' images. Your task is to predict the "
    "winner of the fight based on their appearance and physique. You may think first inside <think> </think> "
    "tags; only what follows counts.\n\n"
    "IMPORTANT: You MUST format your response in exactly two parts:\n"
    "1. First, analyze the fighters' appearances and create a fight commentary\n"
    "2. Then on a new line, give ONLY your final prediction in this exact format:\n"
    "\\boxed{Red} or \\boxed{Blue}\n\n"
    "For example:\n"
    "After analyzing the fighters' appearances... [your analysis here]\n"
    "\\boxed{Red}\n\n"
    "If you do not end your response with the \\boxed{} format containing either 'Red' or 'Blue', you will "
    "receive a score of -1.0."
)
USER_PROMPT = (
    "🎤 LADIES AND GENTLEMEN! Welcome to the most electrifying show in sports entertainment Let's break down "
    "this matchup that's got everyone talking!\n\n"
    "In the red corner, we have:(YOUR FIRST IMAGE):\n"
    "And in the blue corner: (YOUR SECOND IMAGE):\n\n"
    "Now, act as your favorite fight commentator, I want you to:\n"
    "create a fight commentary of whats happening in the fight live\n"
    "Give us your best fight commentary! Make it exciting, make it dramatic, make it sound like you're "
    "calling the fight live! Throw in some classic commentator phrases, maybe a 'OH MY GOODNESS!' or two, "
    "and definitely some dramatic pauses for effect.\n\n"
    "End your masterpiece with your prediction in this exact format:\n"
    "[S1]Hello im your host  [S2] And so am i (name) [S1] Wow. Amazing. (laughs) [S2] Lets get started! "
    "(coughs)\n\n"
    "The winner should always be announced with\\boxed{Red} or \\boxed{Blue}Or you will receive a score of -1.0"
)


def picture_path(folder: Path, name: str) -> Path:
    """The picture file of fighter ``name`` in ``folder``: ``jon-jones.jpg`` for ``Jon Jones``."""
    return folder / f"{name.lower().replace(' ', '-')}.jpg"


class UFCImageEnvConfig(UFCEnvConfig):
    """The text variant's settings plus the folder of fighter pictures and their size."""

    image_folder: Optional[str] = Field(
        None,
        description="folder of fighter pictures named like jon-jones.jpg (default: fighter_images next to "
        "ufc_image_env.py)",
    )
    max_image_side: Optional[int] = Field(
        1024,
        ge=16,
        description="pictures larger than this many pixels on a side are scaled down (None: never)",
    )


class UFCImageEnv(UFCEnv, VisionQAEnv):
    """Rewards commentary on two fighters' pictures whose boxed corner colour names the fight's winner;
    logs ``train/format_rate`` (the share of replies with a readable prediction)."""

    name = "ufc_image_predictor"
    env_config_cls = UFCImageEnvConfig
    config: UFCImageEnvConfig
    default_model = VISION_MODEL
    default_env_values = dict(
        group_size=2, temperature=0.7, top_p=0.95, max_tokens=2048, max_token_length=4096
    )

    @property
    def image_folder(self) -> Path:
        """Where the fighter pictures are: ``image_folder`` or ``fighter_images`` next to this file."""
        return Path(self.config.image_folder) if self.config.image_folder else HERE / "fighter_images"

    async def setup(self) -> None:
        await super().setup()
        folder = self.image_folder
        if not folder.is_dir():
            raise DatasetError(f"{folder}: no folder of fighter pictures; pass --env.image_folder DIR")
        self.train, self.test = self._pictured(self.train), self._pictured(self.test)
        if not self.train:
            raise DatasetError(f"{folder}: no training fight has both fighters' pictures")

    def _pictured(self, fights: Sequence[Fight]) -> list[Fight]:
        """The fights with both fighters' pictures (each checked readable once); warns how many are left out."""
        kept, checked = [], set()
        for fight in fights:
            paths = [picture_path(self.image_folder, name) for name in (fight.red, fight.blue)]
            if all(path.is_file() for path in paths):
                for path in set(paths) - checked:
                    self._check_picture_file(path)
                checked.update(paths)
                kept.append(fight)
        if len(kept) < len(fights):
            logger.warning(
                "%s: %d of %d fights left out: a fighter's picture is missing from %s",
                self.name,
                len(fights) - len(kept),
                len(fights),
                self.image_folder,
            )
        return kept

    @staticmethod
    def _check_picture_file(path: Path) -> None:
        try:
            image_base64(str(path), max_side=64)
        except ImageError as exc:
            raise DatasetError(f"{path}: {exc}") from None

    async def picture(self, item: Fight) -> tuple[str, str]:  # type: ignore[override]
        """The red and the blue corner's pictures as base64 PNG (decoded off the event loop)."""
        red, blue = [
            await asyncio.to_thread(
                image_base64, str(picture_path(self.image_folder, name)), None, self.config.max_image_side
            )
            for name in (item.red, item.blue)
        ]
        return red, blue

    def vision_messages(self, item: Fight, picture_b64: Sequence[str]) -> list[dict[str, Any]]:  # type: ignore[override]
        """The system turn, then the prompt and the red and the blue corner's pictures."""
        pictures = [{"type": "image_url", "image_url": {"url": data_url(b64)}} for b64 in picture_b64]
        return [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": [{"type": "text", "text": USER_PROMPT}, *pictures]},
        ]

    def prompt_messages(self, item: Fight) -> list[dict[str, Any]]:
        """The chat in text form (each picture written as ``<image>``)."""
        return [text_content(m) for m in self.vision_messages(item, ("", ""))]

    def prediction(self, reply: str, item: Fight) -> Optional[str]:
        """The corner colour ``reply`` predicts to win (``prediction.py``), or None."""
        return predicted_colour(reply, self.config.min_commentary_words)


if __name__ == "__main__":
    UFCImageEnv.cli()
