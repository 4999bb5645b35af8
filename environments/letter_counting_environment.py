"""Letter counting: "How many times does the letter 'r' appear in "strawberry"?" -> ``\\boxed{3}``.

Procedural, no data to download. Words come from the list shipped in ``environments/resources/words.txt`` (5000
English words, see ``words.LICENSE`` next to it; ``--env.word_list_path`` reads another list, one word per
line) and, with ``--env.random_string_percentage``, from random letter strings. Counting ignores case: both
"R" and "r" count for the letter 'r'.

Items are deterministic for a ``random_seed``: the word list is split once into training and held-out
evaluation words (``train_test_split``), training item ``i`` is always the same, and evaluation uses
``eval_sample_size`` items built from the held-out words only.

Reply form: optional reasoning in ``<think>...</think>``, then the count in ``\\boxed{}``. The reward is 1.0
when the one boxed answer after the reasoning is the exact count, written in digits (``\\boxed{3}``,
``\\boxed{ 3 }``, ``\\boxed{\\text{3}}``) or as an English number word up to twenty (``\\boxed{three}``); 0.0
otherwise (no box, a box only inside the reasoning, boxes with different numbers, anything else in the box).

``python environments/letter_counting_environment.py {serve,process,evaluate} --openai.base_url ...``
"""

from __future__ import annotations

import random
import re
import string
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from pydantic import Field, model_validator

from atroposlib.envs.config_defaults import LocalServerDefaults
from atroposlib.envs.data_loading import DatasetError
from atroposlib.envs.single_turn import SingleTurnEnv, SingleTurnEnvConfig
from atroposlib.utils.replies import final_boxed_answer

DEFAULT_WORD_LIST = Path(__file__).resolve().parent / "resources" / "words.txt"

SYSTEM_PROMPT = (
    "You may think before answering: put your reasoning inside <think> </think> tags. After the reasoning, "
    "give the count as a number inside \\boxed{}, for example \\boxed{2}. Give exactly one boxed answer."
)

NUMBER_WORDS = {
    word: value
    for value, word in enumerate(
        "zero one two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen "
        "sixteen seventeen eighteen nineteen twenty".split()
    )
}
_TEXT_WRAPPER = re.compile(r"^\\(?:text|textbf|mathrm|mathbf)\s*\{(.*)\}$", re.DOTALL)


@dataclass(frozen=True)
class LetterCountItem:
    """One question: how often ``letter`` occurs in ``text`` (case-insensitive); ``count`` is the answer."""

    text: str
    letter: str
    count: int

    @property
    def question(self) -> str:
        return (
            f"How many times does the letter '{self.letter}' appear in \"{self.text}\"? "
            "Count upper- and lower-case letters alike."
        )


def count_letter(text: str, letter: str) -> int:
    """Occurrences of ``letter`` in ``text``, ignoring case."""
    return text.lower().count(letter.lower())


def parse_count(answer: str) -> Optional[int]:
    """The non-negative integer a boxed answer states (digits or an English word up to twenty), or None."""
    text = answer.strip()
    wrapped = _TEXT_WRAPPER.match(text)
    if wrapped:
        text = wrapped.group(1).strip()
    if text.isascii() and text.isdigit():
        return int(text)
    return NUMBER_WORDS.get(text.lower())


def score_reply(reply: str, count: int) -> float:
    """1.0 when the reply's one boxed answer after its reasoning equals ``count``, else 0.0."""
    boxed = final_boxed_answer(reply)
    if boxed is None:
        return 0.0
    return 1.0 if parse_count(boxed) == count else 0.0


def read_word_list(path: str | Path) -> list[str]:
    """Distinct alphabetic words of a one-word-per-line file, in file order.

    Raises :class:`DatasetError` when the file is missing or holds no alphabetic word.
    """
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"{path}: no such file")
    seen: dict[str, None] = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        word = line.strip()
        if word.isalpha():
            seen.setdefault(word, None)
    if not seen:
        raise DatasetError(f"{path}: no words (one alphabetic word per line expected)")
    return list(seen)


class LetterCountingConfig(SingleTurnEnvConfig):
    """SingleTurnEnvConfig plus the word source and the question mix."""

    word_list_path: Optional[str] = Field(
        None, description="one word per line; default: the list shipped in environments/resources/words.txt"
    )
    min_word_length: int = Field(3, ge=1, description="shortest word used")
    max_word_length: int = Field(30, ge=1, description="longest word used")
    train_test_split: float = Field(
        0.95, gt=0.0, lt=1.0, description="share of the words used for training; the rest are held out"
    )
    random_seed: int = Field(42, description="seed of the word split and of every generated question")
    eval_sample_size: int = Field(200, ge=1, description="questions in the evaluation set")
    use_all_letters: bool = Field(True, description="ask about any of a-z (false: only custom_letters)")
    custom_letters: str = Field(
        "aeiou", min_length=1, description="letters asked about when use_all_letters is off"
    )
    present_letter_bias: float = Field(
        0.5, ge=0.0, le=1.0, description="probability of asking about a letter that occurs in the text"
    )
    random_string_percentage: float = Field(
        0.0, ge=0.0, le=1.0, description="share of questions about random letter strings instead of words"
    )
    random_string_min_length: int = Field(3, ge=1, description="shortest random string")
    random_string_max_length: int = Field(15, ge=1, description="longest random string")
    uppercase_word_percentage: float = Field(
        0.01, ge=0.0, le=1.0, description="share of words written in upper case"
    )
    capitalized_word_percentage: float = Field(
        0.01, ge=0.0, le=1.0, description="share of words written with a capital first letter"
    )

    @model_validator(mode="after")
    def _check_ranges(self) -> LetterCountingConfig:
        if self.min_word_length > self.max_word_length:
            raise ValueError(
                f"min_word_length ({self.min_word_length}) exceeds max_word_length ({self.max_word_length})"
            )
        if self.random_string_min_length > self.random_string_max_length:
            raise ValueError(
                f"random_string_min_length ({self.random_string_min_length}) exceeds "
                f"random_string_max_length ({self.random_string_max_length})"
            )
        if self.uppercase_word_percentage + self.capitalized_word_percentage > 1.0:
            raise ValueError("uppercase_word_percentage + capitalized_word_percentage exceeds 1.0")
        if not self.use_all_letters and not all(c in string.ascii_letters for c in self.custom_letters):
            raise ValueError(f"custom_letters must be ASCII letters, got {self.custom_letters!r}")
        return self


class LetterCountingTask:
    """Deterministic letter-counting questions over a word list with held-out evaluation words.

    Raises :class:`DatasetError` when no word fits the length bounds or the split leaves one side empty.
    """

    def __init__(self, words: list[str], config: LetterCountingConfig) -> None:
        self.config = config
        fitting = [w for w in words if config.min_word_length <= len(w) <= config.max_word_length]
        if len(fitting) < 2:
            raise DatasetError(
                f"word list: {len(fitting)} words of {config.min_word_length}-{config.max_word_length} letters; "
                "need at least 2 (one for training, one held out)"
            )
        random.Random(f"letter-split:{config.random_seed}").shuffle(fitting)
        cut = min(max(1, int(len(fitting) * config.train_test_split)), len(fitting) - 1)
        self.train_words = fitting[:cut]
        self.eval_words = fitting[cut:]
        letters = string.ascii_lowercase if config.use_all_letters else config.custom_letters.lower()
        self.letters = sorted(set(letters))
        self.eval_items = [
            self._make(self.eval_words, f"eval:{i}", allow_random=False)
            for i in range(config.eval_sample_size)
        ]

    def train_item(self, index: int) -> LetterCountItem:
        """Training question number ``index`` (the same for the same settings)."""
        return self._make(self.train_words, f"train:{index}", allow_random=True)

    def _make(self, words: list[str], key: str, allow_random: bool) -> LetterCountItem:
        cfg = self.config
        rng = random.Random(f"letter-item:{cfg.random_seed}:{key}")
        if allow_random and rng.random() < cfg.random_string_percentage:
            length = rng.randint(cfg.random_string_min_length, cfg.random_string_max_length)
            text = "".join(rng.choice(string.ascii_letters) for _ in range(length))
        else:
            text = rng.choice(words)
            roll = rng.random()
            if roll < cfg.uppercase_word_percentage:
                text = text.upper()
            elif roll < cfg.uppercase_word_percentage + cfg.capitalized_word_percentage:
                text = text.capitalize()
        present = [c for c in self.letters if c in text.lower()]
        absent = [c for c in self.letters if c not in text.lower()]
        if present and (not absent or rng.random() < cfg.present_letter_bias):
            letter = rng.choice(present)
        else:
            letter = rng.choice(absent)
        return LetterCountItem(text=text, letter=letter, count=count_letter(text, letter))


class LetterCountingEnv(LocalServerDefaults, SingleTurnEnv):
    """Rewards the exact boxed count of a letter in a word or random string."""

    name = "letter_counting"
    env_config_cls = LetterCountingConfig
    config: LetterCountingConfig

    def __init__(self, config: LetterCountingConfig, server_configs, slurm=False, testing=False):
        super().__init__(config, server_configs, slurm, testing)
        self.task: Optional[LetterCountingTask] = None

    @classmethod
    def default_env_config(cls) -> LetterCountingConfig:
        return LetterCountingConfig(
            group_size=16,
            total_steps=250,
            batch_size=256,
            steps_per_eval=20,
            max_token_length=4096,
            eval_temperature=0.2,
        )

    async def setup(self) -> None:
        words = read_word_list(self.config.word_list_path or DEFAULT_WORD_LIST)
        self.task = LetterCountingTask(words, self.config)

    async def get_next_item(self) -> LetterCountItem:
        item = self.task.train_item(self.iter)
        self.iter += 1
        return item

    def prompt_messages(self, item: LetterCountItem) -> list[dict[str, str]]:
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": item.question}]

    def score_reply(self, reply: str, item: LetterCountItem) -> float:
        return score_reply(reply, item.count)

    def eval_items(self) -> list[LetterCountItem]:
        return self.task.eval_items

    def eval_sample_fields(self, item: LetterCountItem) -> dict:
        return {"question": item.question, "gold_answer": item.count}


if __name__ == "__main__":
    LetterCountingEnv.cli()
