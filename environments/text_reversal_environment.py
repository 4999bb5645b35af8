"""Text reversal: reverse a text character by character; the reversed text goes in ``<answer>`` tags.

Data, by default generated (no download): texts of ``min_words``-``max_words`` words drawn from the shipped
``environments/resources/words.txt`` (or ``--env.word_list_path``). The word list is split once by
``random_seed`` so evaluation texts are built from held-out words only; training text ``i`` is always the
same.

``--env.dataset_path FILE`` (and ``--env.eval_dataset_path``) read local rows instead, in either schema:

* ``text``: the text to reverse (our prompt, reply in ``<answer>`` tags);
* ``prompt`` / ``completion``: the chat schema of the original's hub set (``PrimeIntellect/Reverse-Text-SFT``,
  opt in with ``--env.dataset_name``): ``prompt`` is a list of messages whose system turn is put in front of
  the user turn, ``completion`` a list holding the expected assistant message. Such rows are scored on the
  whole reply after the reasoning, which must equal the expected message (surrounding whitespace ignored).

Without an evaluation file or set, ``test_set_size`` rows (at most half) are held out of training for
evaluation.

Prompt and budgets: ``--env.use_thinking true`` opens every prompt's system turn with a request for the
reasoning in ``<think>`` tags (chat rows otherwise have no system turn). ``max_tokens`` (also read as
``max_train_token_length``) is the budget of a training reply, ``max_eval_token_length`` that of an
evaluation reply (default: ``max_tokens``).

Reward (``text`` rows and generated texts): optional reasoning in ``<think>...</think>``, then
``<answer>REVERSED</answer>``. 1.0 when the answer, with surrounding whitespace removed, is exactly the
reversed text (case and punctuation count); 0.0 when it differs, when there is no answer tag after the
reasoning, or when the tags hold different answers. With ``--env.partial_credit true`` a wrong but present
answer earns ``0.5 * similarity`` (difflib's ratio against the reversed text), so near misses rank above
garbage yet never tie an exact reversal.

``python environments/text_reversal_environment.py {serve,process,evaluate} --openai.base_url ...``
"""

from __future__ import annotations

import asyncio
import difflib
import random
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal, Optional

from pydantic import Field, model_validator

from atroposlib.envs.config_defaults import LocalServerDefaults
from atroposlib.envs.data_loading import DatasetError, check_rows, hub_split, load_rows
from atroposlib.envs.single_turn import SingleTurnEnv, SingleTurnEnvConfig
from atroposlib.utils.replies import answer_section

DEFAULT_WORD_LIST = Path(__file__).resolve().parent / "resources" / "words.txt"
HUB_DATASET = "PrimeIntellect/Reverse-Text-SFT"

SYSTEM_PROMPT = (
    "You may think before answering: put your reasoning inside <think> </think> tags. After the reasoning, "
    "write the reversed text inside <answer> </answer> tags, exactly once."
)
THINKING_PROMPT = (
    "Think the problem through at whatever length it needs before answering: write your whole reasoning "
    "inside <think> </think> tags, then give your answer after the closing tag."
)
_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)

Form = Literal["answer_tag", "whole_reply"]


@dataclass(frozen=True)
class ReversalItem:
    """One task: the chat ``messages`` to send, the ``expected`` answer and how replies are read (``form``)."""

    messages: tuple[tuple[str, str], ...]
    expected: str
    form: Form


def reverse_text(text: str) -> str:
    """``text`` reversed character by character."""
    return text[::-1]


def text_item(text: str) -> ReversalItem:
    """The item for a plain text: our prompt, the reversed text in ``<answer>`` tags expected."""
    user = f"Reverse the following text character by character, keeping every character:\n\n{text}"
    return ReversalItem((("system", SYSTEM_PROMPT), ("user", user)), reverse_text(text), "answer_tag")


def chat_item(row: dict[str, Any], source: str, index: int) -> ReversalItem:
    """The item for a row in the hub set's chat schema (``prompt`` / ``completion`` message lists).

    Raises :class:`DatasetError` naming the source, row and field when a message is missing.
    """

    def contents(field: str, role: str) -> list[str]:
        value = row.get(field)
        messages = value if isinstance(value, list) else [value]
        return [m.get("content") or "" for m in messages if isinstance(m, dict) and m.get("role") == role]

    users = contents("prompt", "user")
    if not users:
        raise DatasetError(f"{source}: row {index}: field 'prompt' has no user message")
    expected = contents("completion", "assistant")
    if not expected:
        raise DatasetError(f"{source}: row {index}: field 'completion' has no assistant message")
    system = "\n\n".join(s.strip() for s in contents("prompt", "system") if s.strip())
    user = f"{system}\n\n{users[0]}" if system else users[0]
    return ReversalItem((("user", user),), expected[0].strip(), "whole_reply")


def items_from_rows(rows: list[dict[str, Any]], source: str) -> list[ReversalItem]:
    """Items for local or hub rows: ``text`` rows when the first row has ``text``, else the chat schema."""
    if "text" in rows[0]:
        check_rows(rows, ["text"], source)
        return [text_item(str(row["text"])) for row in rows]
    check_rows(rows, ["prompt", "completion"], source)
    return [chat_item(row, source, i) for i, row in enumerate(rows)]


def reply_answer(reply: str, form: Form) -> Optional[str]:
    """The answer a reply gives in ``form``, stripped; None when it gives none or several different ones."""
    section = answer_section(reply)
    if section is None:
        return None
    if form == "whole_reply":
        return section.strip() or None
    answers = {match.strip() for match in _ANSWER_TAG.findall(section)}
    if len(answers) != 1:
        return None
    return answers.pop()


def score_reply(reply: str, expected: str, form: Form = "answer_tag", partial_credit: bool = False) -> float:
    """1.0 for an exact answer; ``0.5 * similarity`` for a wrong one when ``partial_credit``; else 0.0."""
    answer = reply_answer(reply, form)
    if answer is None:
        return 0.0
    if answer == expected.strip():
        return 1.0
    if partial_credit:
        return 0.5 * difflib.SequenceMatcher(None, answer, expected.strip(), autojunk=False).ratio()
    return 0.0


class TextReversalEnvConfig(SingleTurnEnvConfig):
    """SingleTurnEnvConfig plus the data source, the prompt, the evaluation budget and the reward variant."""

    #: compat: 0.4.0's name of the training budget.
    original_key_aliases = {"max_train_token_length": "max_tokens"}

    dataset_name: Optional[str] = Field(
        None, description=f"hub set in the chat schema (e.g. {HUB_DATASET}); default: generated texts"
    )
    dataset_path: Optional[str] = Field(
        None, description="local rows (text, or prompt/completion) for training"
    )
    eval_dataset_name: Optional[str] = Field(None, description="hub set for evaluation (chat schema)")
    eval_dataset_path: Optional[str] = Field(None, description="local rows for evaluation")
    test_set_size: int = Field(
        100, ge=1, description="rows held out for evaluation when no evaluation set is given"
    )
    word_list_path: Optional[str] = Field(
        None,
        description="words for generated texts, one per line (default: environments/resources/words.txt)",
    )
    min_words: int = Field(3, ge=1, description="fewest words in a generated text")
    max_words: int = Field(8, ge=1, description="most words in a generated text")
    random_seed: int = Field(42, description="seed of the word split and of every generated text")
    partial_credit: bool = Field(
        False, description="wrong answers earn 0.5 * similarity to the reversed text"
    )
    use_thinking: bool = Field(
        False, description="open the prompt's system turn with a request for reasoning in <think> tags"
    )
    max_eval_token_length: Optional[int] = Field(
        None, ge=1, description="generation budget of an evaluation reply (default: max_tokens)"
    )

    @model_validator(mode="after")
    def _check_word_counts(self) -> TextReversalEnvConfig:
        if self.min_words > self.max_words:
            raise ValueError(f"min_words ({self.min_words}) exceeds max_words ({self.max_words})")
        return self


class TextReversalEnv(LocalServerDefaults, SingleTurnEnv):
    """Rewards the exact character-by-character reversal of a text."""

    name = "text_reversal"
    env_config_cls = TextReversalEnvConfig
    config: TextReversalEnvConfig

    def __init__(self, config: TextReversalEnvConfig, server_configs, slurm=False, testing=False):
        super().__init__(config, server_configs, slurm, testing)
        self.train_items: list[ReversalItem] = []
        self.test_items: list[ReversalItem] = []
        self.train_words: list[str] = []

    @classmethod
    def default_env_config(cls) -> TextReversalEnvConfig:
        return TextReversalEnvConfig(
            group_size=16, batch_size=256, steps_per_eval=25, max_token_length=4096, eval_temperature=0.2
        )

    # -- data -------------------------------------------------------------------------------------------
    def _rows(self, path: Optional[str], name: Optional[str]) -> list[ReversalItem]:
        source = path or name
        rows = load_rows(
            path, hub_split(name or HUB_DATASET, "train"), required=[], hub_name=name or HUB_DATASET
        )
        return items_from_rows(rows, str(source))

    def _generated_split(self) -> None:
        path = Path(self.config.word_list_path or DEFAULT_WORD_LIST)
        if not path.is_file():
            raise DatasetError(f"{path}: no such file")
        words = sorted(
            {w.strip() for w in path.read_text(encoding="utf-8").splitlines() if w.strip().isalpha()}
        )
        if len(words) < 2:
            raise DatasetError(f"{path}: need at least 2 words (one per line)")
        random.Random(f"reversal-split:{self.config.random_seed}").shuffle(words)
        cut = min(max(1, int(len(words) * 0.9)), len(words) - 1)
        self.train_words = words[:cut]
        eval_words = words[cut:]
        self.test_items = [
            text_item(self._sentence(eval_words, f"eval:{i}")) for i in range(self.config.test_set_size)
        ]

    def _sentence(self, words: list[str], key: str) -> str:
        rng = random.Random(f"reversal-text:{self.config.random_seed}:{key}")
        count = rng.randint(self.config.min_words, self.config.max_words)
        return " ".join(rng.choice(words) for _ in range(count))

    async def setup(self) -> None:
        cfg = self.config
        if not (cfg.dataset_path or cfg.dataset_name):
            self._generated_split()
            return
        items = self._rows(cfg.dataset_path, cfg.dataset_name)
        random.Random(cfg.random_seed).shuffle(items)
        if cfg.eval_dataset_path or cfg.eval_dataset_name:
            self.train_items = items
            self.test_items = self._rows(cfg.eval_dataset_path, cfg.eval_dataset_name)
        elif len(items) == 1:
            self.train_items = self.test_items = items
        else:
            held_out = min(cfg.test_set_size, len(items) // 2)
            self.test_items, self.train_items = items[:held_out], items[held_out:]

    async def get_next_item(self) -> ReversalItem:
        index = self.iter
        self.iter += 1
        if self.train_items:
            return self.train_items[index % len(self.train_items)]
        return text_item(self._sentence(self.train_words, f"train:{index}"))

    # -- task -------------------------------------------------------------------------------------------
    def prompt_messages(self, item: ReversalItem) -> list[dict[str, str]]:
        messages = [{"role": role, "content": content} for role, content in item.messages]
        if not self.config.use_thinking:
            return messages
        if messages[0]["role"] == "system":  # one system turn: some chat templates refuse a second
            messages[0]["content"] = f"{THINKING_PROMPT}\n\n{messages[0]['content']}"
            return messages
        return [{"role": "system", "content": THINKING_PROMPT}, *messages]

    async def sample_eval_reply(self, item: ReversalItem, sem: asyncio.Semaphore) -> tuple[list[dict], str]:
        """One evaluation reply, within ``max_eval_token_length`` tokens when that is set."""
        async with sem:
            messages, replies = await self._sample(
                self.server,
                item,
                1,
                max_tokens=self.config.max_eval_token_length or self.generation_budget,
                temperature=self.config.eval_temperature,
                split="eval",
            )
        return messages, replies[0] if replies else ""

    def score_reply(self, reply: str, item: ReversalItem) -> float:
        return score_reply(reply, item.expected, item.form, self.config.partial_credit)

    def eval_items(self) -> list[ReversalItem]:
        return self.test_items

    def eval_sample_fields(self, item: ReversalItem) -> dict:
        return {"question": item.messages[-1][1], "gold_answer": item.expected}


if __name__ == "__main__":
    TextReversalEnv.cli()
