"""Answer format: the reply must give its answer in the output format the prompt asks for, and in no other.

Each item pairs a question with one format drawn (seeded) from ``--env.formats`` (default: all):

==========================  ===============================================
``xml``                     ``<answer>X</answer>``
``output_tags``             ``<output>X</output>``
``result_tags``             ``<result>X</result>``
``latex_boxed``             ``\\boxed{X}``
``json``                    a JSON object with an ``"answer"`` key, bare or in a ```json fence
``markdown_code``           a fenced block without a language tag (or with a tag other than json)
``natural_language_final``  a line ``Final Answer: X``
``natural_language_answer`` a line ``The answer is: X``
``colon_format``            a line ``Answer: X``
``square_brackets``         a line ``[X]``
``markdown_bold``           ``**X**``
``pipe_delimited``          a line ``|X|``
==========================  ===============================================

Reward: after the optional ``<think>...</think>`` reasoning, 1.0 when the requested format occurs exactly once
with a non-empty answer and none of the other formats of the set occurs; 0.0 otherwise (no answer, the answer
only inside the reasoning, the format used twice, a second format next to it, a malformed think block). With
``--env.check_answer true`` the answer must also equal the row's gold answer (numbers compared as numbers,
text case-insensitively). ``evaluate`` also reports ``eval/format_accuracy/<format>``.

Questions: by default the original's ``gsm8k`` rows (``main``: train / test); local files
(``--env.dataset_path``, ``--env.eval_dataset_path``) in GSM8K's schema: ``question`` and ``answer`` (a
``#### n`` ending gives the gold answer; any other text is the gold answer as written). A local
``dataset_path`` also serves for evaluation unless ``eval_dataset_path`` is given.
``--env.eval_set_percentage P`` holds that share of the (shuffled) training rows out for evaluation instead;
``--env.max_eval_samples N`` evaluates on N evaluation items drawn with ``eval_sample_seed``.

Balance: with ``--env.ensure_equivalent_ratios true`` a format stops being drawn for training once it has
``format_group_threshold`` successful groups (a group with at least one reply scoring 1) while another format
of the set has fewer; when every format reaches the threshold all are drawn again.

0.4.0's key names are read too: ``dataset`` (``dataset_name``), ``supported_formats`` (``formats``; its
formats outside the twelve above are refused with the list of available ones).

``python environments/answer_format_environment.py {serve,process,evaluate} --openai.base_url ...``
"""

from __future__ import annotations

import json
import random
import re
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from pydantic import Field, field_validator

from atroposlib.envs.config_defaults import LocalServerDefaults
from atroposlib.envs.data_loading import hub_split, load_rows
from atroposlib.envs.env_config import ORIGINAL_DUMP_AND_LOG_KEYS, EvalSampleSettings
from atroposlib.envs.single_turn import SingleTurnEnv, SingleTurnEnvConfig
from atroposlib.utils.replies import answer_section, boxed_answers

SYSTEM_PROMPT = (
    "You may think before answering: put your reasoning inside <think> </think> tags. After the reasoning, "
    "give your final answer in exactly the output format the user asks for, once, and use no other answer "
    "format anywhere in your reply."
)
_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)


def _tag(name: str) -> Callable[[str], list[str]]:
    pattern = re.compile(rf"<{name}>(.*?)</{name}>", re.DOTALL | re.IGNORECASE)
    return lambda text: [m.strip() for m in pattern.findall(text)]


def _line(prefix: str) -> Callable[[str], list[str]]:
    pattern = re.compile(rf"^[ \t]*{prefix}[ \t]*(.*?)[ \t]*$", re.MULTILINE | re.IGNORECASE)
    return lambda text: [m.strip() for m in pattern.findall(text)]


def _regex(expression: str, flags: int = 0) -> Callable[[str], list[str]]:
    pattern = re.compile(expression, flags)
    return lambda text: [m.strip() for m in pattern.findall(text)]


def _json_answers(text: str) -> list[str]:
    """The ``"answer"`` values of the top-level JSON objects in ``text`` (objects without the key are ignored)."""
    decoder, found, pos = json.JSONDecoder(), [], 0
    while (start := text.find("{", pos)) != -1:
        try:
            value, end = decoder.raw_decode(text, start)
        except json.JSONDecodeError:
            pos = start + 1
            continue
        if isinstance(value, dict) and "answer" in value:
            answer = value["answer"]
            found.append(answer.strip() if isinstance(answer, str) else json.dumps(answer))
        pos = end
    return found


def _code_blocks(text: str) -> list[str]:
    return [body.strip() for tag, body in _FENCE.findall(text) if tag.lower() != "json"]


@dataclass(frozen=True)
class AnswerFormat:
    """A requested output format: its ``name``, the ``instruction`` shown to the model, and ``find``, which
    returns the answers written in this format in a text (one entry per use)."""

    name: str
    instruction: str
    find: Callable[[str], list[str]]


FORMATS: dict[str, AnswerFormat] = {
    f.name: f
    for f in [
        AnswerFormat("xml", "inside <answer></answer> tags, for example <answer>42</answer>", _tag("answer")),
        AnswerFormat("output_tags", "inside <output></output> tags, for example <output>42</output>", _tag("output")),
        AnswerFormat("result_tags", "inside <result></result> tags, for example <result>42</result>", _tag("result")),
        AnswerFormat("latex_boxed", "inside \\boxed{}, for example \\boxed{42}", boxed_answers),
        AnswerFormat(
            "json", 'as a JSON object with an "answer" key, for example {"answer": "42"}', _json_answers
        ),
        AnswerFormat(
            "markdown_code", "alone in a fenced code block without a language tag (``` on the lines around it)",
            _code_blocks,
        ),
        AnswerFormat(
            "natural_language_final", "on its own line starting with 'Final Answer:', for example Final Answer: 42",
            _line("final answer:"),
        ),
        AnswerFormat(
            "natural_language_answer", "on its own line starting with 'The answer is:', for example The answer is: 42",
            _line("the answer is:"),
        ),
        AnswerFormat(
            "colon_format", "on its own line starting with 'Answer:', for example Answer: 42", _line("answer:")
        ),
        AnswerFormat(
            "square_brackets", "alone on a line in square brackets, for example [42]",
            _regex(r"^[ \t]*\[([^\[\]\n]+)\][ \t]*$", re.MULTILINE),
        ),
        AnswerFormat("markdown_bold", "in bold markdown, for example **42**", _regex(r"\*\*([^*\n]+?)\*\*")),
        AnswerFormat(
            "pipe_delimited", "alone on a line between pipes, for example |42|",
            _regex(r"^[ \t]*\|([^|\n]+)\|[ \t]*$", re.MULTILINE),
        ),
    ]
}  # fmt: skip


def formatted_answer(reply: str, requested: str, formats: list[str]) -> Optional[str]:
    """The answer of a reply that uses ``requested`` exactly once and no other of ``formats``, else None."""
    section = answer_section(reply)
    if section is None:
        return None
    uses = {name: FORMATS[name].find(section) for name in formats}
    mine = uses[requested] if requested in uses else FORMATS[requested].find(section)
    if len(mine) != 1 or not mine[0]:
        return None
    if any(found for name, found in uses.items() if name != requested):
        return None
    return mine[0]


def gold_answer(answer: Any) -> str:
    """The gold answer of a row: the text after ``####`` for GSM8K answers, else the answer as written."""
    text = str(answer)
    return text.split("####")[-1].strip() if "####" in text else text.strip()


def _normalize(text: str) -> str:
    return re.sub(r"\s+", " ", text.strip().rstrip(".").strip().strip("$").strip()).lower()


def answers_match(given: str, gold: str) -> bool:
    """Numbers compared as numbers (thousands separators ignored), other text case- and space-insensitively."""
    a, b = _normalize(given), _normalize(gold)
    try:
        return float(a.replace(",", "")) == float(b.replace(",", ""))
    except ValueError:
        return a == b


def score_reply(
    reply: str, requested: str, formats: list[str], gold: Optional[str] = None, check_answer: bool = False
) -> float:
    """1.0 when the reply uses ``requested`` once and no other format (and, with ``check_answer``, the answer
    matches ``gold``); else 0.0."""
    answer = formatted_answer(reply, requested, formats)
    if answer is None:
        return 0.0
    if check_answer and (gold is None or not answers_match(answer, gold)):
        return 0.0
    return 1.0


@dataclass(frozen=True)
class FormatItem:
    """A question with its requested ``format`` and ``gold`` answer."""

    question: str
    gold: str
    format: str

    @property
    def prompt(self) -> str:
        return (
            f"{self.question}\n\nGive your final answer {FORMATS[self.format].instruction}. "
            "Use this format exactly once and no other answer format."
        )


class AnswerFormatEnvConfig(EvalSampleSettings, SingleTurnEnvConfig):
    """SingleTurnEnvConfig plus the question source, the format set and its balance, and the answer check."""

    original_key_aliases = {"dataset": "dataset_name", "supported_formats": "formats"}
    unsupported_original_keys = {
        "dataset_configs": "several hub sets mixed with per-set fields and types are not read here; name one "
        "set of question/answer rows with --env.dataset_name or --env.dataset_path",
        **{
            key: ORIGINAL_DUMP_AND_LOG_KEYS[key]
            for key in (
                "debug_logging",
                "suppress_base_env_logs",
                "dump_rollouts",
                "dump_failed_rollouts",
                "rollout_save_score_threshold",
            )
        },
    }

    dataset_name: str = Field("gsm8k", description="hub set of questions")
    dataset_config: Optional[str] = Field("main", description="hub set configuration")
    split: str = Field("train", description="hub split for training")
    eval_split: str = Field("test", description="hub split for evaluation")
    dataset_path: Optional[str] = Field(
        None, description="local question/answer rows (also used for evaluation)"
    )
    eval_dataset_path: Optional[str] = Field(None, description="local question/answer rows for evaluation")
    formats: list[str] = Field(
        default_factory=lambda: list(FORMATS), description=f"formats to request, from: {', '.join(FORMATS)}"
    )
    check_answer: bool = Field(False, description="also require the answer to equal the gold answer")
    seed: int = Field(42, description="seed of the shuffle and of the format drawn for each item")
    eval_set_percentage: Optional[float] = Field(
        None, gt=0.0, lt=1.0, description="hold this share of the training rows out for evaluation"
    )
    ensure_equivalent_ratios: bool = Field(
        False, description="pause formats that reached format_group_threshold successful groups"
    )
    format_group_threshold: int = Field(
        50,
        ge=1,
        le=1000,
        description="successful groups per format before it pauses (ensure_equivalent_ratios)",
    )

    @field_validator("formats")
    @classmethod
    def _known_formats(cls, formats: list[str]) -> list[str]:
        unknown = [f for f in formats if f not in FORMATS]
        if unknown or not formats:
            raise ValueError(f"unknown or no formats {unknown}; available: {', '.join(FORMATS)}")
        return list(dict.fromkeys(formats))


class AnswerFormatEnv(LocalServerDefaults, SingleTurnEnv):
    """Rewards replies that answer in the requested format exactly once and in no other."""

    name = "answer_format"
    env_config_cls = AnswerFormatEnvConfig
    config: AnswerFormatEnvConfig

    def __init__(self, config: AnswerFormatEnvConfig, server_configs, slurm=False, testing=False):
        super().__init__(config, server_configs, slurm, testing)
        self.train_rows: list[dict[str, Any]] = []
        self.test_items: list[FormatItem] = []
        #: training groups per format with at least one reply scoring 1
        self.successful_groups: Counter[str] = Counter()

    @classmethod
    def default_env_config(cls) -> AnswerFormatEnvConfig:
        return AnswerFormatEnvConfig(
            group_size=16, batch_size=256, steps_per_eval=20, max_token_length=4096, eval_limit=500
        )

    def _rows(self, path: Optional[str], split: str) -> list[dict[str, Any]]:
        cfg = self.config
        return load_rows(
            path,
            hub_split(cfg.dataset_name, split, cfg.dataset_config),
            required=["question", "answer"],
            hub_name=f"{cfg.dataset_name} ({split})",
        )

    def _item(self, row: dict[str, Any], key: str, formats: Sequence[str]) -> FormatItem:
        rng = random.Random(f"answer-format:{self.config.seed}:{key}")
        return FormatItem(str(row["question"]), gold_answer(row["answer"]), rng.choice(list(formats)))

    def training_formats(self) -> list[str]:
        """The formats training items are drawn from: all of ``formats``, less (with
        ``ensure_equivalent_ratios``) those at ``format_group_threshold`` successful groups while another is
        below it."""
        cfg = self.config
        if not cfg.ensure_equivalent_ratios:
            return cfg.formats
        below = [name for name in cfg.formats if self.successful_groups[name] < cfg.format_group_threshold]
        return below or cfg.formats

    def on_group_scored(self, item: FormatItem, scores: Sequence[float]) -> None:
        if any(score >= 1.0 for score in scores):
            self.successful_groups[item.format] += 1

    async def setup(self) -> None:
        cfg = self.config
        self.train_rows = self._rows(cfg.dataset_path, cfg.split)
        random.Random(cfg.seed).shuffle(self.train_rows)
        if cfg.eval_set_percentage is not None:
            held_out = min(
                max(1, round(len(self.train_rows) * cfg.eval_set_percentage)), len(self.train_rows) - 1
            )
            eval_rows, self.train_rows = self.train_rows[:held_out], self.train_rows[held_out:]
        else:
            eval_rows = self._rows(cfg.eval_dataset_path or cfg.dataset_path, cfg.eval_split)
        items = [self._item(row, f"eval:{i}", cfg.formats) for i, row in enumerate(eval_rows)]
        self.test_items = cfg.sample_eval(items)

    async def get_next_item(self) -> FormatItem:
        index = self.iter
        return self._item(self.next_in_turn(self.train_rows), f"train:{index}", self.training_formats())

    def prompt_messages(self, item: FormatItem) -> list[dict[str, str]]:
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": item.prompt}]

    def score_reply(self, reply: str, item: FormatItem) -> float:
        return score_reply(reply, item.format, self.config.formats, item.gold, self.config.check_answer)

    def eval_items(self) -> list[FormatItem]:
        return self.test_items

    def eval_sample_fields(self, item: FormatItem) -> dict:
        return {"format": item.format, "question": item.question, "gold_answer": item.gold}

    def extra_eval_metrics(self, samples) -> dict[str, float]:
        by_format: dict[str, list[bool]] = {}
        for sample in samples:
            by_format.setdefault(sample["format"], []).append(sample["correct"])
        return {f"eval/format_accuracy/{name}": sum(v) / len(v) for name, v in sorted(by_format.items())}


if __name__ == "__main__":
    AnswerFormatEnv.cli()
