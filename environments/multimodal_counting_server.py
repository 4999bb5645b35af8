"""Counting and colours in generated pictures: a vision environment that needs no download.

Each item is a picture drawn with Pillow from the item's seed: up to ``max_shapes`` circles, squares
and triangles in ``num_colours`` of six colours, one per cell of a grid so that none overlap. The
question asks for a count (of one colour and shape, of a colour, of a shape, or of all shapes) or for the
colour of the one shape of its kind. The picture is sent as an ``image_url`` part (a PNG ``data:`` URL)
of the user turn, so a vision-language model behind an OpenAI-compatible chat route sees it.

Reward: 1 when the last ``\\boxed{}`` after the reasoning holds the answer (a count as digits or a number
word up to twenty, a colour by name, case ignored), else 0. Evaluation answers ``eval_size`` held-out pictures (seeds from ``eval_seed``).

Tokens: replies come from the chat route (``self.server.chat_completion``), because the token-level
route of ManagedServer sends token ids only and would drop the picture. The trained sequence is the
chat rendered by the tokenizer's template with each picture replaced by the text ``image_placeholder``
(default ``<image>``) followed by the reply; only the reply is unmasked. Vision models whose templates
expand pictures into many image tokens need their own tokenisation: every group carries its pictures in
``images`` (one base64 PNG per sequence), which ``view-run-multimodal`` shows and a vision trainer can
read. The example trainer (``example_trainer/``) trains text-only causal language models: it ignores
``images`` and learns from the placeholder text.

``python environments/multimodal_counting_server.py {serve,process,evaluate} --openai.base_url ... --openai.model_name ...``
"""

from __future__ import annotations

import asyncio
import base64
import io
import logging
import random
import re
from dataclasses import dataclass
from typing import Any, Optional

from PIL import Image, ImageDraw
from pydantic import Field, field_validator

from atroposlib.envs.base import BaseEnv, BaseEnvConfig, ScoredDataGroup
from atroposlib.envs.config_defaults import LocalServerDefaults
from atroposlib.envs.reporting import EvalReporting, IterCheckpoint, summary_line
from atroposlib.utils.replies import final_boxed_answer
from atroposlib.utils.tokenize_for_trainer import tokenize_for_trainer

logger = logging.getLogger(__name__)

DEFAULT_MODEL = "Qwen/Qwen2-VL-2B-Instruct"
COLOURS = {
    "red": (215, 38, 38),
    "green": (34, 150, 60),
    "blue": (37, 78, 214),
    "yellow": (235, 200, 25),
    "purple": (130, 50, 170),
    "orange": (245, 130, 20),
}
SHAPES = ("circle", "square", "triangle")
QUESTION_KINDS = ("colour_shape", "colour", "shape", "total", "colour_of")
NUMBER_WORDS = (
    "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen "
    "seventeen eighteen nineteen twenty"
).split()

system_prompt = (
    "You are a careful visual assistant. Look at the picture and answer the question about it. You may "
    "reason inside <think> </think> tags first. End with your final answer in this exact form: "
    "\\boxed{answer} - a number for a count, a single colour name for a colour."
)


@dataclass(frozen=True)
class Shape:
    """One drawn shape: kind, colour name and the grid cell it occupies."""

    kind: str
    colour: str
    cell: tuple[int, int]


@dataclass(frozen=True)
class CountingItem:
    """A picture (base64 PNG), its shapes, the question and its answer."""

    seed: int
    image_b64: str
    shapes: tuple[Shape, ...]
    question: str
    answer: str

    @property
    def data_url(self) -> str:
        return f"data:image/png;base64,{self.image_b64}"


class CountingEnvConfig(BaseEnvConfig):
    """BaseEnvConfig plus the picture generator and sampling settings."""

    image_size: int = Field(256, ge=64, le=2048, description="picture width and height in pixels")
    grid: int = Field(4, ge=2, le=8, description="cells per side; each shape takes one cell")
    min_shapes: int = Field(3, ge=1, description="fewest shapes in a picture")
    max_shapes: int = Field(10, ge=1, description="most shapes in a picture (at most grid * grid)")
    num_colours: int = Field(3, ge=1, le=len(COLOURS), description="colours used in one picture")
    question_kinds: list[str] = Field(
        list(QUESTION_KINDS), description=f"questions to ask, any of {', '.join(QUESTION_KINDS)}"
    )
    seed: int = Field(0, description="seed of the first training picture (picture k uses seed + k)")
    eval_seed: int = Field(1_000_000, description="seed of the first evaluation picture")
    eval_size: int = Field(100, ge=1, description="evaluation pictures")
    image_placeholder: str = Field("<image>", description="text standing for a picture in the trained tokens")
    temperature: float = Field(1.0, ge=0.0, description="sampling temperature of training replies")
    eval_temperature: float = Field(0.0, ge=0.0, description="sampling temperature of evaluation replies")
    max_tokens: Optional[int] = Field(
        None, ge=1, description="token budget of a reply (default: max_token_length)"
    )

    @field_validator("question_kinds")
    @classmethod
    def _known_kinds(cls, kinds: list[str]) -> list[str]:
        unknown = sorted(set(kinds) - set(QUESTION_KINDS))
        if unknown or not kinds:
            raise ValueError(
                f"unknown question kinds {unknown or '(none given)'}; choose from {', '.join(QUESTION_KINDS)}"
            )
        return kinds


def _draw(draw: ImageDraw.ImageDraw, shape: Shape, cell_size: int) -> None:
    col, row = shape.cell
    margin = cell_size // 6
    x0, y0 = col * cell_size + margin, row * cell_size + margin
    x1, y1 = (col + 1) * cell_size - margin, (row + 1) * cell_size - margin
    fill = COLOURS[shape.colour]
    if shape.kind == "circle":
        draw.ellipse((x0, y0, x1, y1), fill=fill, outline=(0, 0, 0))
    elif shape.kind == "square":
        draw.rectangle((x0, y0, x1, y1), fill=fill, outline=(0, 0, 0))
    else:
        draw.polygon([((x0 + x1) // 2, y0), (x1, y1), (x0, y1)], fill=fill, outline=(0, 0, 0))


def render_picture(shapes: tuple[Shape, ...], size: int, grid: int) -> str:
    """The shapes drawn on a white square of ``size`` pixels, as a base64 PNG."""
    image = Image.new("RGB", (size, size), (255, 255, 255))
    draw = ImageDraw.Draw(image)
    for shape in shapes:
        _draw(draw, shape, size // grid)
    buffer = io.BytesIO()
    image.save(buffer, format="PNG")
    return base64.b64encode(buffer.getvalue()).decode("ascii")


def _plural(kind: str) -> str:
    return kind + "s"


def make_question(shapes: tuple[Shape, ...], kinds: list[str], rng: random.Random) -> tuple[str, str]:
    """A question about ``shapes`` of one of ``kinds`` and its answer (a count or a colour name)."""
    kind = rng.choice(kinds)
    if kind == "colour_of":
        unique = [s for s in SHAPES if sum(x.kind == s for x in shapes) == 1]
        if unique:
            target = rng.choice(unique)
            colour = next(x.colour for x in shapes if x.kind == target)
            return f"What colour is the {target} in the picture?", colour
        kind = "total"
    if kind == "colour_shape":
        pick = rng.choice(shapes)
        count = sum(x.kind == pick.kind and x.colour == pick.colour for x in shapes)
        return f"How many {pick.colour} {_plural(pick.kind)} are in the picture?", str(count)
    if kind == "colour":
        colour = rng.choice(sorted({x.colour for x in shapes}))
        return f"How many {colour} shapes are in the picture?", str(sum(x.colour == colour for x in shapes))
    if kind == "shape":
        target = rng.choice(SHAPES)
        return f"How many {_plural(target)} are in the picture?", str(sum(x.kind == target for x in shapes))
    return "How many shapes are in the picture in total?", str(len(shapes))


def make_item(seed: int, config: CountingEnvConfig) -> CountingItem:
    """The picture, question and answer of ``seed`` (deterministic for a seed and config)."""
    rng = random.Random(seed)
    cells = [(c, r) for r in range(config.grid) for c in range(config.grid)]
    most = min(config.max_shapes, len(cells))
    count = rng.randint(min(config.min_shapes, most), most)
    palette = rng.sample(sorted(COLOURS), config.num_colours)
    shapes = tuple(
        Shape(rng.choice(SHAPES), rng.choice(palette), cell) for cell in sorted(rng.sample(cells, count))
    )
    question, answer = make_question(shapes, list(config.question_kinds), rng)
    return CountingItem(
        seed, render_picture(shapes, config.image_size, config.grid), shapes, question, answer
    )


def normalise_answer(text: str) -> Optional[str]:
    """A boxed answer as a count (digits) or a colour name; None when it is neither."""
    value = re.sub(r"\\text\{([^}]*)\}", r"\1", text).strip().strip(".").strip().lower()
    if re.fullmatch(r"\d+", value):
        return str(int(value))
    if value in NUMBER_WORDS:
        return str(NUMBER_WORDS.index(value))
    return value if value in COLOURS else None


def score_reply(reply: str, answer: str) -> float:
    """1.0 when the reply's one boxed answer (after its reasoning) is ``answer``, else 0.0."""
    boxed = final_boxed_answer(reply)
    return 1.0 if boxed is not None and normalise_answer(boxed) == answer else 0.0


class MultimodalCountingEnv(LocalServerDefaults, IterCheckpoint, EvalReporting, BaseEnv):
    """Questions about generated pictures (see the module docstring)."""

    name = "multimodal_counting"
    env_config_cls = CountingEnvConfig
    config: CountingEnvConfig
    default_model = DEFAULT_MODEL

    @classmethod
    def default_env_config(cls) -> CountingEnvConfig:
        return CountingEnvConfig(group_size=8, batch_size=12)

    async def setup(self) -> None:
        """Nothing to load: pictures are generated from ``iter``."""

    async def get_next_item(self) -> CountingItem:
        item = make_item(self.config.seed + self.iter, self.config)
        self.iter += 1
        return item

    # -- prompts ----------------------------------------------------------------------------------------
    def prompt_messages(self, item: CountingItem) -> list[dict[str, Any]]:
        """The chat sent to the model: the picture as an ``image_url`` part, then the question."""
        return [
            {"role": "system", "content": system_prompt},
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": item.data_url}},
                    {"type": "text", "text": item.question},
                ],
            },
        ]

    def text_messages(self, messages: list[dict[str, Any]]) -> list[dict[str, str]]:
        """``messages`` with content lists flattened to text, each picture written as ``image_placeholder``."""
        out = []
        for message in messages:
            content = message["content"]
            if isinstance(content, list):
                parts = [
                    part.get("text", "") if part.get("type") == "text" else self.config.image_placeholder
                    for part in content
                ]
                content = "\n".join(parts)
            out.append({"role": message["role"], "content": content})
        return out

    @property
    def reply_budget(self) -> int:
        return self.config.max_tokens or self.config.max_token_length

    # -- rollouts ---------------------------------------------------------------------------------------
    async def collect_trajectories(self, item: CountingItem) -> tuple[Optional[ScoredDataGroup], list]:
        messages = self.prompt_messages(item)
        completion = await self.server.chat_completion(
            messages=messages,
            n=self.config.group_size,
            max_tokens=self.reply_budget,
            temperature=self.config.temperature,
        )
        text_prompt = self.text_messages(messages)
        group = ScoredDataGroup(tokens=[], masks=[], scores=[], messages=[], images=[])
        for choice in completion.choices:
            reply = choice.message.content or ""
            chat = [*text_prompt, {"role": "assistant", "content": reply}]
            tokenized = tokenize_for_trainer(self.tokenizer, chat, finish_reason=choice.finish_reason or "")
            score = score_reply(reply, item.answer)
            group["tokens"].append(tokenized["tokens"])
            group["masks"].append(tokenized["masks"])
            group["scores"].append(score)
            group["messages"].append(chat)
            group["images"].append(item.image_b64)
            self.percent_correct_buffer.append(score)
        return group, []

    # -- evaluation -------------------------------------------------------------------------------------
    async def _eval_one(self, item: CountingItem, sem: asyncio.Semaphore) -> dict[str, Any]:
        async with sem:
            completion = await self.server.chat_completion(
                messages=self.prompt_messages(item),
                n=1,
                max_tokens=self.reply_budget,
                temperature=self.config.eval_temperature,
                split="eval",
            )
        reply = completion.choices[0].message.content or ""
        score = score_reply(reply, item.answer)
        return {
            "messages": [
                *self.text_messages(self.prompt_messages(item)),
                {"role": "assistant", "content": reply},
            ],
            "seed": item.seed,
            "question": item.question,
            "gold_answer": item.answer,
            "score": score,
            "correct": score == 1.0,
        }

    async def evaluate(self, *args: Any, **kwargs: Any) -> None:
        items = [make_item(self.config.eval_seed + k, self.config) for k in range(self.config.eval_size)]
        samples, start, end = await self.run_evaluation(self._eval_one, items)
        accuracy = sum(s["score"] for s in samples) / len(samples)
        metrics = {"eval/percent_correct": accuracy}
        await self.report_evaluation(
            metrics,
            samples,
            start,
            end,
            {"temperature": self.config.eval_temperature, "max_tokens": self.reply_budget},
            summary_line("multimodal_counting", len(samples), "pictures", metrics),
        )


if __name__ == "__main__":
    MultimodalCountingEnv.cli()
