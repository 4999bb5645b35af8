"""Visual question answering from a data set: one picture and one question per item, replies scored by
a function of the reply and the gold answer.

:class:`VisionQAEnv` is the shared base of the environments in ``environments/multimodal_dpo/``; a
subclass declares its hub set (``default_env_config``), the fields a row needs (``required_fields``), how
a row becomes items (:meth:`VisionQAEnv.row_items`), its system prompt and :meth:`VisionQAEnv.score_answer`.

Data: the hub set by default (``hub_dataset``, or ``--env.dataset_name`` / ``dataset_config`` / ``split``; evaluation on
``eval_split`` when set, else on the last ``eval_size`` training rows, which training then skips), or a
local file in the hub set's schema (``--env.dataset_path``, ``--env.eval_dataset_path``; without the
latter the training file is evaluated too). A row's picture may be a Pillow image, bytes, the hub's
``{"bytes", "path"}`` dict, a path relative to the data file, a data URI, base64 or an ``http(s)`` URL
(see :mod:`atroposlib.utils.images`); a local file's pictures are all checked at start-up, so an
unreadable one stops the environment with one line naming the file, the row and the field. URLs are
fetched when their item is sampled; an item whose picture cannot be fetched is skipped with a warning (in
training and in evaluation, whose metrics are then over the items that could be posed).

Sampling: the picture goes to the model as an ``image_url`` part (PNG data URL) of the user turn, through
the chat route of whatever OpenAI-compatible server serves a vision-language model (ManagedServer's token
route cannot carry pictures). The trained tokens are the conversation rendered by the tokenizer's chat
template with the picture written as the text ``<image>``, only the reply trained; every sequence of a
group carries its picture in ``images`` (base64 PNG), which ``view-run-multimodal`` and the HTML page of
``process`` show and a vision trainer reads. Evaluation samples keep the text form of the chat.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal, Optional

from pydantic import Field

from atroposlib.envs.config_defaults import LocalServerDefaults
from atroposlib.envs.data_loading import DatasetError, hub_split, load_rows
from atroposlib.envs.groups import ScoredDataGroup
from atroposlib.envs.server_handling.message_tokens import MessageTokenizedServer, text_content
from atroposlib.envs.single_turn import SingleTurnEnv, SingleTurnEnvConfig
from atroposlib.utils.images import ImageError, data_url, image_base64
from atroposlib.utils.replies import final_boxed_answer
from atroposlib.utils.vqa_answers import same_answer, tagged_answer, tagged_or_bare

logger = logging.getLogger(__name__)

VISION_MODEL = "Qwen/Qwen2-VL-2B-Instruct"


class VisionQAConfig(SingleTurnEnvConfig):
    """SingleTurnEnvConfig plus where the pictures and questions come from."""

    dataset_name: Optional[str] = Field(None, description="hub data set (default: the environment's own)")
    dataset_config: Optional[str] = Field(None, description="hub configuration of the data set")
    split: str = Field("train", description="hub split to train on")
    eval_split: Optional[str] = Field(
        None, description="hub split to evaluate on (default: the last eval_size training rows, held out)"
    )
    eval_size: int = Field(100, ge=1, description="training rows held out for evaluation without eval_split")
    dataset_path: Optional[str] = Field(
        None, description="local JSONL/JSON/Parquet/CSV file in the hub set's schema instead of the hub"
    )
    eval_dataset_path: Optional[str] = Field(
        None, description="local file to evaluate on (default: dataset_path when that is set)"
    )
    max_image_side: Optional[int] = Field(
        1024,
        ge=16,
        description="pictures larger than this many pixels on a side are scaled down (None: never)",
    )
    image_fetch_timeout: float = Field(20.0, gt=0, description="seconds to fetch a picture given by URL")


@dataclass(frozen=True)
class VisionItem:
    """One question about one picture: ``image`` is the row's raw picture value (see the module docstring)."""

    row: int
    question: str
    answer: Any
    image: Any = field(repr=False)
    base_dir: Optional[Path] = None
    extra: dict[str, Any] = field(default_factory=dict)


class VisionQAEnv(LocalServerDefaults, SingleTurnEnv):
    """Questions about pictures of a data set (see the module docstring)."""

    env_config_cls = VisionQAConfig
    config: VisionQAConfig
    default_model = VISION_MODEL
    #: Sampled through the chat route: ``serve`` accepts OpenAI-type vision servers.
    trains_token_ids = False
    #: Fields every row needs (the picture's field included).
    required_fields: ClassVar[tuple[str, ...]] = ("image",)
    #: The row field holding the picture.
    image_field: ClassVar[str] = "image"
    #: The hub data set read when ``dataset_name`` is not set.
    hub_dataset: ClassVar[str] = ""
    #: The row fields of the question and the gold answer (read by the default :meth:`row_items`).
    question_field: ClassVar[str] = "question"
    answer_field: ClassVar[str] = "answer"
    #: Where a reply's answer is read: the one ``\\boxed{}`` or the one ``<answer>`` tag after the reasoning.
    answer_form: ClassVar[Literal["boxed", "tag"]] = "tag"
    #: The system turn.
    system_prompt: ClassVar[str] = ""
    correct_threshold = 1.0

    # -- the task (subclass hooks) ----------------------------------------------------------------------
    def row_items(self, row: dict[str, Any], index: int, base_dir: Optional[Path]) -> list[VisionItem]:
        """The items of one row (default: one, from ``question_field`` and ``answer_field``, the answer
        read from an ``<answer>`` tag when it has one)."""
        answer = tagged_or_bare(str(row[self.answer_field]))
        if not answer:
            raise ValueError(f"field {self.answer_field!r}: no answer")
        return [VisionItem(index, str(row[self.question_field]), answer, row[self.image_field], base_dir)]

    def reply_answer(self, reply: str) -> Optional[str]:
        """The answer a reply gives, read as ``answer_form`` says; None when it gives none or several."""
        return final_boxed_answer(reply) if self.answer_form == "boxed" else tagged_answer(reply)

    def score_answer(self, reply: str, item: VisionItem) -> float:
        """1.0 when the reply's answer says the gold answer (:func:`~atroposlib.utils.vqa_answers.same_answer`),
        else 0.0."""
        return 1.0 if same_answer(self.reply_answer(reply), str(item.answer)) else 0.0

    def question_text(self, item: VisionItem) -> str:
        """The text of the user turn (default: the item's question)."""
        return item.question

    # -- data -------------------------------------------------------------------------------------------
    @property
    def dataset_name(self) -> str:
        """The hub data set: ``dataset_name`` when set, else the environment's own."""
        return self.config.dataset_name or self.hub_dataset

    @classmethod
    def default_env_config(cls) -> VisionQAConfig:
        return cls.env_config_cls(group_size=8, batch_size=12)

    def _rows(self, path: Optional[str], split: str) -> list[dict[str, Any]]:
        loader = hub_split(self.dataset_name, split, self.config.dataset_config)
        return load_rows(path, loader, self.required_fields, self.dataset_name)

    def _items(self, rows: Sequence[dict[str, Any]], path: Optional[str], start: int = 0) -> list[VisionItem]:
        base_dir = Path(path).resolve().parent if path else None
        items: list[VisionItem] = []
        for index, row in enumerate(rows, start=start):
            if path:
                self._check_picture(row, index, path, base_dir)
            try:
                items.extend(self.row_items(row, index, base_dir))
            except (KeyError, TypeError, ValueError) as exc:
                source = path or self.dataset_name
                raise DatasetError(f"{source}: row {index}: {exc}") from None
        if not items:
            raise DatasetError(f"{path or self.dataset_name}: no usable questions")
        return items

    def _check_picture(self, row: dict[str, Any], index: int, path: str, base_dir: Optional[Path]) -> None:
        value = row.get(self.image_field)
        if isinstance(value, str) and value.startswith(("http://", "https://")):
            return  # fetched when sampled
        try:
            image_base64(value, base_dir, max_side=64)
        except ImageError as exc:
            raise DatasetError(f"{path}: row {index}: field {self.image_field!r}: {exc}") from None

    async def setup(self) -> None:
        config = self.config
        train_rows = self._rows(config.dataset_path, config.split)
        if config.eval_dataset_path or config.dataset_path:
            eval_path = config.eval_dataset_path or config.dataset_path
            eval_rows = self._rows(eval_path, config.split) if config.eval_dataset_path else train_rows
            self.train = self._items(train_rows, config.dataset_path)
            self.test = self._items(eval_rows, eval_path)
        elif config.eval_split:
            self.train = self._items(train_rows, None)
            self.test = self._items(self._rows(None, config.eval_split), None)
        else:
            held = min(config.eval_size, max(1, len(train_rows) // 10))
            self.train = self._items(train_rows[:-held], None)
            self.test = self._items(train_rows[-held:], None, start=len(train_rows) - held)
        logger.info("%s: %d training and %d evaluation questions", self.name, len(self.train), len(self.test))

    # -- prompts ----------------------------------------------------------------------------------------
    async def picture(self, item: VisionItem) -> str:
        """The item's picture as base64 PNG (fetched or decoded off the event loop)."""
        return await asyncio.to_thread(
            image_base64,
            item.image,
            item.base_dir,
            self.config.max_image_side,
            self.config.image_fetch_timeout,
        )

    def vision_messages(self, item: VisionItem, picture_b64: str) -> list[dict[str, Any]]:
        """The chat sent to the model: the system turn, then the picture and the question."""
        messages: list[dict[str, Any]] = (
            [{"role": "system", "content": self.system_prompt}] if self.system_prompt else []
        )
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": data_url(picture_b64)}},
                    {"type": "text", "text": self.question_text(item)},
                ],
            }
        )
        return messages

    def prompt_messages(self, item: VisionItem) -> list[dict[str, Any]]:
        """The chat in text form (the picture written as ``<image>``)."""
        return [text_content(m) for m in self.vision_messages(item, "")]

    async def _sample(
        self, server: Any, item: VisionItem, n: int, **sampling: Any
    ) -> tuple[list[dict], list[str]]:
        messages = self.vision_messages(item, await self.picture(item))
        completion = await server.chat_completion(messages=messages, n=n, **sampling)
        return messages, [choice.message.content or "" for choice in completion.choices]

    # -- sampling, groups, evaluation -------------------------------------------------------------------
    async def sample_group(self, item: VisionItem) -> Optional[tuple[list[dict], list[str], list[Any]]]:
        """``group_size`` replies through the chat route, tokens computed from the messages."""
        tracker = MessageTokenizedServer(self.server, self.tokenizer)
        try:
            messages, replies = await self._sample(
                tracker,
                item,
                self.config.group_size,
                max_tokens=self.generation_budget,
                temperature=self.config.temperature,
                top_p=self.config.top_p,
            )
        except ImageError as exc:
            logger.warning("%s: row %d skipped: %s", self.name, item.row, exc)
            return None
        return messages, replies, tracker.get_state()["nodes"]

    def build_group(  # type: ignore[override]
        self,
        messages: list[dict],
        replies: Sequence[str],
        nodes: Sequence[Any],
        scores: Sequence[float],
        overrides: Optional[Sequence[dict[str, Any]]] = None,
    ) -> ScoredDataGroup:
        """The scored group with the chat in text form and each sequence's picture in ``images``."""
        pictures = [
            part["image_url"]["url"].split(",", 1)[-1]
            for message in messages
            if isinstance(message.get("content"), list)
            for part in message["content"]
            if part.get("type") == "image_url"
        ]
        text = [text_content(m) for m in messages]
        group = SingleTurnEnv.build_group(text, replies, nodes, scores, overrides)
        group["images"] = [pictures[0] if len(pictures) == 1 else pictures for _ in replies]
        return group

    async def sample_eval_reply(self, item: VisionItem, sem: asyncio.Semaphore) -> tuple[list[dict], str]:
        messages, reply = await super().sample_eval_reply(item, sem)
        return [text_content(m) for m in messages], reply

    async def _eval_one(self, item: VisionItem, sem: asyncio.Semaphore) -> Optional[dict[str, Any]]:
        try:
            return await super()._eval_one(item, sem)
        except ImageError as exc:
            logger.warning("%s: evaluation row %d left out: %s", self.name, item.row, exc)
            return None

    def score_reply(self, reply: str, item: VisionItem) -> float:
        return float(self.score_answer(reply, item))

    def eval_sample_fields(self, item: VisionItem) -> dict[str, Any]:
        return {"row": item.row, "question": item.question, "gold_answer": item.answer}


__all__ = ["VISION_MODEL", "VisionItem", "VisionQAConfig", "VisionQAEnv"]
