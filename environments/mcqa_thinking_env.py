"""Multiple choice: reason, then box the letter of the chosen option.

Data: by default MMLU on the hub (``cais/mmlu``, config ``all``): the ``auxiliary_train`` split for rollouts
and the ``test`` split for evaluation (``--env.dataset_split``, ``--env.eval_split``). ``--env.dataset_path
FILE`` and ``--env.eval_dataset_path FILE`` (JSONL, JSON, Parquet or CSV) read local rows in MMLU's schema:
``question``, ``choices`` (a list of option texts, any number from 2 to 26), ``answer`` (the 0-based index
of the right option) and optionally ``subject``. A local training file without an evaluation file is used
for both. A row with a missing field, fewer than two choices or an answer index out of range stops the
environment with one line naming the file, the row and the field.

``--env.shuffle_choices true`` (off by default, so the letters match the data) reorders each item's
options by a permutation seeded from the item's text and ``--env.shuffle_seed``: the same item always gets
the same order, in every process, and the answer index follows its option.

Prompt: a system prompt asking for reasoning inside ``<think> </think>`` and the letter in ``\\boxed{}``;
the user turn holds the subject, the question and the options labelled A, B, C, ...

Reward: +1 when the reply's answer is the right letter, -1 otherwise. The letter is read from the
``\\boxed{}`` after the reasoning (``\\boxed{B}``, ``\\boxed{(B)}``, ``\\boxed{B)}``, ``\\boxed{\\text{B}}``,
any case). No box after the reasoning (an unboxed letter, a letter only inside the think block, an
unclosed think block, an empty reply), a box holding anything but one letter (``\\boxed{A, B}``,
``\\boxed{AB}``, the option's text) or boxes naming different letters score -1. Groups whose scores are all
equal carry no learning signal and are dropped.

Evaluation answers every evaluation item once and reports ``eval/percent_correct``.

``python environments/mcqa_thinking_env.py {serve,process,evaluate} --openai.base_url ... --openai.model_name ...``
"""

from __future__ import annotations

import random
import re
import string
from collections.abc import Sequence
from dataclasses import dataclass, replace
from typing import Any, Optional

from pydantic import Field

from atroposlib.envs.base import EvalHandlingEnum
from atroposlib.envs.config_defaults import LocalServerDefaults
from atroposlib.envs.data_loading import DatasetError, hub_split, load_rows
from atroposlib.envs.single_turn import SingleTurnEnv, SingleTurnEnvConfig
from atroposlib.evals.multiple_choice import seeded_order
from atroposlib.utils.replies import answer_section, boxed_answers

DEFAULT_DATASET = "cais/mmlu"
LETTERS = string.ascii_uppercase
REQUIRED_FIELDS = ("question", "choices", "answer")

system_prompt = (
    "You are a deep thinking AI. Think the question through inside <think> </think> tags, weighing every "
    "option, before you answer. After the closing </think> tag, give the letter of the one option you "
    "choose, boxed: \\boxed{B}. Only that boxed letter is graded."
)

# LaTeX text wrappers a model may put around the letter: \text{B}, \textbf{B}, \mathrm{B}, ...
_WRAPPER = re.compile(r"^\\(?:text|textbf|textrm|mathrm|mathbf|mbox)\s*\{(.*)\}$", re.DOTALL)
_LETTER = re.compile(r"^\(?([A-Za-z])\)?\.?$")


@dataclass(frozen=True)
class MCQAItem:
    """One question: its text, the subject (may be empty), the option texts and the right option's index."""

    question: str
    subject: str
    choices: tuple[str, ...]
    answer: int

    @property
    def letter(self) -> str:
        """The letter of the right option."""
        return LETTERS[self.answer]


class MCQAEnvConfig(SingleTurnEnvConfig):
    """SingleTurnEnvConfig plus where the questions come from and whether their options are shuffled."""

    dataset_name: str = Field(DEFAULT_DATASET, description="hub data set of multiple-choice questions")
    dataset_config: Optional[str] = Field("all", description="configuration of the hub data set")
    dataset_split: str = Field("auxiliary_train", description="hub split to train on")
    eval_split: str = Field("test", description="hub split to evaluate on")
    dataset_path: Optional[str] = Field(
        None,
        description="local file (JSONL, JSON, Parquet or CSV) of MMLU rows (question, subject, choices, "
        "answer index) used instead of the hub training split",
    )
    eval_dataset_path: Optional[str] = Field(
        None, description="local evaluation file in the same schema (default: dataset_path when that is set)"
    )
    shuffle_choices: bool = Field(
        False, description="reorder each item's options (seeded per item, answer index remapped)"
    )
    shuffle_seed: int = Field(0, description="seed mixed into every item's option permutation")


def row_to_item(row: dict[str, Any], index: int, source: str) -> MCQAItem:
    """The item of one MMLU row; :class:`DatasetError` (naming ``source``, the row and the field) when
    ``choices`` is not a list of 2 to 26 options or ``answer`` is not an index into it."""
    choices = row["choices"]
    if isinstance(choices, str) or not isinstance(choices, Sequence) or not 2 <= len(choices) <= len(LETTERS):
        raise DatasetError(
            f"{source}: row {index}: field 'choices' must be a list of 2 to {len(LETTERS)} options"
        )
    answer = row["answer"]
    if isinstance(answer, str) and answer.strip().isdigit():
        answer = int(answer)
    if isinstance(answer, bool) or not isinstance(answer, int) or not 0 <= answer < len(choices):
        raise DatasetError(
            f"{source}: row {index}: field 'answer' must be an option index from 0 to {len(choices) - 1}, "
            f"got {answer!r}"
        )
    subject = row.get("subject") or ""
    return MCQAItem(str(row["question"]), str(subject), tuple(str(c) for c in choices), answer)


def shuffled(item: MCQAItem, seed: int) -> MCQAItem:
    """``item`` with its options in an order seeded by ``seed`` and the item's text; the answer follows."""
    order = seeded_order(len(item.choices), seed, "\n".join([item.question, *item.choices]))
    return replace(item, choices=tuple(item.choices[i] for i in order), answer=order.index(item.answer))


def user_prompt(item: MCQAItem) -> str:
    """The user turn: subject line (when known), question, lettered options and the answer form."""
    options = "\n".join(f"{LETTERS[i]}. {choice}" for i, choice in enumerate(item.choices))
    head = f"The following is a multiple choice question about {item.subject.replace('_', ' ')}.\n\n"
    last = LETTERS[len(item.choices) - 1]
    return (
        f"{head if item.subject else ''}{item.question}\n\n{options}\n\n"
        f"Answer with the letter of the correct option (A to {last}) in a box, for example \\boxed{{A}}."
    )


def box_letter(content: str) -> Optional[str]:
    """The upper-case letter a box holds (``B``, ``(B)``, ``B)``, ``B.``, ``\\text{B}``), else None."""
    text = content.strip()
    while (match := _WRAPPER.match(text)) is not None:
        text = match.group(1).strip()
    match = _LETTER.match(text)
    return match.group(1).upper() if match else None


def reply_letter(reply: str) -> Optional[str]:
    """The letter a reply chooses: the boxes after its reasoning, which must all name the same letter.

    None when the reasoning is malformed, there is no box after it, a box holds anything but one letter,
    or boxes name different letters.
    """
    section = answer_section(reply)
    if section is None:
        return None
    boxes = boxed_answers(section)
    letters = {box_letter(box) for box in boxes}
    if not boxes or None in letters or len(letters) != 1:
        return None
    return letters.pop()


class MCQAThinkingEnv(LocalServerDefaults, SingleTurnEnv):
    """Multiple-choice questions answered with a boxed letter (see the module docstring)."""

    name = "mcqa"
    env_config_cls = MCQAEnvConfig
    config: MCQAEnvConfig
    default_server_port = 9004
    default_server_settings = {"num_max_requests_at_once": 32}

    @classmethod
    def default_env_config(cls) -> MCQAEnvConfig:
        return MCQAEnvConfig(
            group_size=32,
            max_num_workers=128,
            total_steps=2000,
            batch_size=1024,
            steps_per_eval=20,
            max_token_length=1024 * 15,
            wandb_name="mcqa_deep_thinking",
            eval_handling=EvalHandlingEnum.LIMIT_TRAIN,
            eval_limit_ratio=0.1,
        )

    def _items(self, path: Optional[str], split: str) -> list[MCQAItem]:
        cfg = self.config
        hub_name = f"{cfg.dataset_name} ({split})"
        loader = hub_split(cfg.dataset_name, split, cfg.dataset_config)
        rows = load_rows(path, loader, REQUIRED_FIELDS, hub_name)
        items = [row_to_item(row, index, path or hub_name) for index, row in enumerate(rows)]
        if cfg.shuffle_choices:
            items = [shuffled(item, cfg.shuffle_seed) for item in items]
        return items

    async def setup(self) -> None:
        cfg = self.config
        self.train = self._items(cfg.dataset_path, cfg.dataset_split)
        random.Random(42).shuffle(self.train)
        self.test = self._items(cfg.eval_dataset_path or cfg.dataset_path, cfg.eval_split)

    def prompt_messages(self, item: MCQAItem) -> list[dict[str, str]]:
        return [{"role": "system", "content": system_prompt}, {"role": "user", "content": user_prompt(item)}]

    def score_reply(self, reply: str, item: MCQAItem) -> float:
        """+1 when the reply's boxed letter is the right option's, -1 otherwise."""
        return 1.0 if reply_letter(reply) == item.letter else -1.0

    def eval_sample_fields(self, item: MCQAItem) -> dict[str, Any]:
        return {"question": item.question, "subject": item.subject, "gold_letter": item.letter}


if __name__ == "__main__":
    MCQAThinkingEnv.cli()
