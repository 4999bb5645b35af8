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

Several letters at once (``max_letters_to_count`` > 1, asked with ``multi_letter_probability``): the counts go
in the box as a JSON object, ``\\boxed{{"e": 2, "o": 0}}``; the reward is 1.0 only when it names exactly the
asked letters, each with its count as an integer.

Difficulty curriculum (atroposlib 0.4.0's ``difficulty_*`` settings; on with ``adaptive_difficulty``, and on by
itself when any of those settings is given): training questions come from one of ten tiers
(:data:`DIFFICULTY_TIERS`: tiers 1-5 real words of growing length and more letters at once, tiers 6-10 random
strings of up to 500 letters with up to 50 letters to count), starting at ``starting_difficulty_level`` and kept
within ``min_difficulty_level``..``max_difficulty_level``. Each training group's mean score at the current tier
joins a window of the last ``difficulty_window_size`` groups; once half the window (at least 10) is filled, a
mean above ``difficulty_increase_threshold`` moves one tier up, below ``difficulty_decrease_threshold`` one tier
down, and the window starts afresh. Groups scoring above the increase threshold or below the decrease threshold
are not trained on (too easy or too hard). Without the curriculum, ``max_group_average_for_training`` drops
groups whose mean is above it.

``python environments/letter_counting_environment.py {serve,process,evaluate} --openai.base_url ...``
"""

from __future__ import annotations

import json
import random
import re
import string
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from pydantic import Field, model_validator

from atroposlib.envs.config_defaults import LocalServerDefaults
from atroposlib.envs.data_loading import DatasetError
from atroposlib.envs.env_config import ORIGINAL_DUMP_AND_LOG_KEYS
from atroposlib.envs.groups import ScoredDataGroup
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
    """One question: how often ``letter`` occurs in ``text`` (case-insensitive); ``count`` is the answer.

    With several letters (``letters``, more than one), the answer is ``counts``, one count per letter;
    ``level`` is the curriculum tier the item was made at (0 without the curriculum)."""

    text: str
    letter: str
    count: int
    letters: tuple[str, ...] = ()
    counts: dict[str, int] = field(default_factory=dict, compare=False, hash=False)
    level: int = 0

    @property
    def multi(self) -> bool:
        return len(self.letters) > 1

    @property
    def question(self) -> str:
        if self.multi:
            names = ", ".join(f"'{c}'" for c in self.letters[:-1]) + f" and '{self.letters[-1]}'"
            example = "{" + ", ".join(f'"{c}": 0' for c in self.letters) + "}"
            return (
                f'How many times does each of the letters {names} appear in "{self.text}"? Count upper- and '
                f"lower-case letters alike, and give the counts as one JSON object inside the box, e.g. "
                f"\\boxed{{{example}}}."
            )
        return (
            f"How many times does the letter '{self.letter}' appear in \"{self.text}\"? "
            "Count upper- and lower-case letters alike."
        )


#: The curriculum's ten tiers (atroposlib 0.4.0's): text length range, share of several-letter questions, how
#: many letters then, and whether the text is a random letter string instead of a word.
DIFFICULTY_TIERS: dict[int, dict[str, object]] = {
    1: {
        "min_length": 3,
        "max_length": 8,
        "multi_letter_probability": 0.0,
        "letters": (1, 1),
        "random": False,
    },
    2: {
        "min_length": 5,
        "max_length": 12,
        "multi_letter_probability": 0.5,
        "letters": (1, 2),
        "random": False,
    },
    3: {
        "min_length": 8,
        "max_length": 18,
        "multi_letter_probability": 0.6,
        "letters": (2, 3),
        "random": False,
    },
    4: {
        "min_length": 10,
        "max_length": 25,
        "multi_letter_probability": 0.8,
        "letters": (3, 5),
        "random": False,
    },
    5: {
        "min_length": 15,
        "max_length": 35,
        "multi_letter_probability": 0.9,
        "letters": (5, 8),
        "random": False,
    },
    6: {
        "min_length": 40,
        "max_length": 80,
        "multi_letter_probability": 1.0,
        "letters": (8, 12),
        "random": True,
    },
    7: {
        "min_length": 80,
        "max_length": 150,
        "multi_letter_probability": 1.0,
        "letters": (12, 20),
        "random": True,
    },
    8: {
        "min_length": 150,
        "max_length": 250,
        "multi_letter_probability": 1.0,
        "letters": (18, 26),
        "random": True,
    },
    9: {
        "min_length": 250,
        "max_length": 400,
        "multi_letter_probability": 1.0,
        "letters": (25, 26),
        "random": True,
    },
    10: {
        "min_length": 400,
        "max_length": 500,
        "multi_letter_probability": 1.0,
        "letters": (26, 26),
        "random": True,
    },
}
#: The curriculum's settings with 0.4.0's defaults.
CURRICULUM_DEFAULTS: dict[str, Any] = {
    "difficulty_window_size": 150,
    "difficulty_increase_threshold": 0.8,
    "difficulty_decrease_threshold": 0.2,
    "min_difficulty_level": 1,
    "max_difficulty_level": 10,
    "starting_difficulty_level": 3,
}


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


def parse_counts(answer: str) -> Optional[dict[str, int]]:
    """The ``{letter: count}`` JSON object a boxed answer states (integer counts, one-letter keys), or None."""
    try:
        value = json.loads(answer.strip())
    except ValueError:
        return None
    if not isinstance(value, dict):
        return None
    counts: dict[str, int] = {}
    for key, count in value.items():
        if len(key) != 1 or not key.isalpha() or type(count) is not int or count < 0 or key.lower() in counts:
            return None
        counts[key.lower()] = count
    return counts


def score_reply(reply: str, count: int | dict[str, int]) -> float:
    """1.0 when the reply's one boxed answer after its reasoning equals ``count`` (a number, or a
    ``{letter: count}`` object for several letters, which must name exactly those letters), else 0.0."""
    boxed = final_boxed_answer(reply)
    if boxed is None:
        return 0.0
    if isinstance(count, dict):
        return 1.0 if parse_counts(boxed) == {k.lower(): v for k, v in count.items()} else 0.0
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
    max_letters_to_count: int = Field(
        1, ge=1, le=26, description="most letters asked about at once (1: always one letter)"
    )
    multi_letter_probability: float = Field(
        0.2,
        ge=0.0,
        le=1.0,
        description="share of questions about several letters when max_letters_to_count > 1",
    )
    max_group_average_for_training: float = Field(
        1.0, ge=0.0, le=1.0, description="groups whose mean score is above this are not trained on (too easy)"
    )
    adaptive_difficulty: Optional[bool] = Field(
        None,
        description="the ten-tier difficulty curriculum; unset: on exactly when a difficulty_* setting is given",
    )
    difficulty_window_size: Optional[int] = Field(
        None, ge=1, description="recent groups the curriculum judges a tier by (unset: 150)"
    )
    difficulty_increase_threshold: Optional[float] = Field(
        None,
        ge=0.0,
        le=1.0,
        description="window mean above which the tier goes up; such groups are not trained (unset: 0.8)",
    )
    difficulty_decrease_threshold: Optional[float] = Field(
        None,
        ge=0.0,
        le=1.0,
        description="window mean below which the tier goes down; such groups are not trained (unset: 0.2)",
    )
    min_difficulty_level: Optional[int] = Field(
        None, ge=1, le=10, description="lowest curriculum tier (unset: 1)"
    )
    max_difficulty_level: Optional[int] = Field(
        None, ge=1, le=10, description="highest curriculum tier (unset: 10)"
    )
    starting_difficulty_level: Optional[int] = Field(
        None, ge=1, le=10, description="curriculum tier of the first questions (unset: 3)"
    )

    original_key_aliases = {"generation_temperature": "temperature", "max_generation_tokens": "max_tokens"}
    unsupported_original_keys = {
        **ORIGINAL_DUMP_AND_LOG_KEYS,
        "use_text_passages": "0.4.0 cut passages from the OpenWebText hub set; give your texts as a word list "
        "(--env.word_list_path)",
        "text_passage_percentage": "passages are not supported (see use_text_passages)",
        "min_text_length": "passages are not supported (see use_text_passages)",
        "max_text_length": "passages are not supported (see use_text_passages)",
        "include_punctuation_in_count": "only passages hold punctuation (see use_text_passages)",
        "include_spaces_in_count": "only passages hold spaces (see use_text_passages)",
    }

    @property
    def curriculum_enabled(self) -> bool:
        """Whether the difficulty curriculum runs: ``adaptive_difficulty``, or when unset, whether any
        ``difficulty_*`` setting is given."""
        if self.adaptive_difficulty is not None:
            return self.adaptive_difficulty
        return any(getattr(self, key) is not None for key in CURRICULUM_DEFAULTS)

    def curriculum_setting(self, key: str) -> Any:
        """A curriculum setting's value, or 0.4.0's default when unset."""
        value = getattr(self, key)
        return CURRICULUM_DEFAULTS[key] if value is None else value

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
        low, high = (
            self.curriculum_setting("min_difficulty_level"),
            self.curriculum_setting("max_difficulty_level"),
        )
        if low > high:
            raise ValueError(f"min_difficulty_level ({low}) exceeds max_difficulty_level ({high})")
        down = self.curriculum_setting("difficulty_decrease_threshold")
        up = self.curriculum_setting("difficulty_increase_threshold")
        if down > up:
            raise ValueError(
                f"difficulty_decrease_threshold ({down}) exceeds difficulty_increase_threshold ({up})"
            )
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

    def train_item(self, index: int, level: int = 0) -> LetterCountItem:
        """Training question number ``index`` (the same for the same settings); at curriculum tier ``level``
        when given (1..10)."""
        if level:
            return self._make_at_level(index, level)
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
        several = cfg.max_letters_to_count > 1 and rng.random() < cfg.multi_letter_probability
        number = rng.randint(2, cfg.max_letters_to_count) if several else 1
        return self._question(rng, text, number, level=0)

    def _make_at_level(self, index: int, level: int) -> LetterCountItem:
        tier = DIFFICULTY_TIERS[level]
        rng = random.Random(f"letter-tier:{self.config.random_seed}:{level}:{index}")
        low, high = int(tier["min_length"]), int(tier["max_length"])
        fitting = [w for w in self.train_words if low <= len(w) <= high]
        if tier["random"] or not fitting:
            text = "".join(rng.choice(string.ascii_lowercase) for _ in range(rng.randint(low, high)))
        else:
            text = rng.choice(fitting)
        fewest, most = tier["letters"]
        several = rng.random() < float(tier["multi_letter_probability"])
        number = rng.randint(max(2, int(fewest)), max(2, int(most))) if several else 1
        return self._question(rng, text, min(number, len(self.letters)), level=level)

    def _question(self, rng: random.Random, text: str, number: int, level: int) -> LetterCountItem:
        present = [c for c in self.letters if c in text.lower()]
        absent = [c for c in self.letters if c not in text.lower()]
        chosen: list[str] = []
        for _ in range(number):
            if present and (not absent or rng.random() < self.config.present_letter_bias):
                chosen.append(present.pop(rng.randrange(len(present))))
            elif absent:
                chosen.append(absent.pop(rng.randrange(len(absent))))
        counts = {c: count_letter(text, c) for c in chosen}
        letters = tuple(chosen) if len(chosen) > 1 else ()
        return LetterCountItem(
            text=text, letter=chosen[0], count=counts[chosen[0]], letters=letters, counts=counts, level=level
        )


class DifficultyCurriculum:
    """The tier of the next training question, moved by the mean scores of recent groups at that tier."""

    def __init__(self, config: LetterCountingConfig) -> None:
        self.setting = config.curriculum_setting
        low, high = self.setting("min_difficulty_level"), self.setting("max_difficulty_level")
        self.level = min(max(self.setting("starting_difficulty_level"), low), high)
        self.window: list[float] = []

    def record(self, level: int, group_mean: float) -> None:
        """Count a group of tier ``level`` (groups of an earlier tier are ignored) and move the tier."""
        if level != self.level:
            return
        size = self.setting("difficulty_window_size")
        self.window = [*self.window, group_mean][-size:]
        if len(self.window) < max(10, size // 2):
            return
        rate = sum(self.window) / len(self.window)
        if rate > self.setting("difficulty_increase_threshold") and self.level < self.setting(
            "max_difficulty_level"
        ):
            self.level += 1
            self.window = []
        elif rate < self.setting("difficulty_decrease_threshold") and self.level > self.setting(
            "min_difficulty_level"
        ):
            self.level -= 1
            self.window = []

    def trains_on(self, group_mean: float) -> bool:
        """False for a group too easy or too hard to learn from at the thresholds."""
        low, high = (
            self.setting("difficulty_decrease_threshold"),
            self.setting("difficulty_increase_threshold"),
        )
        return low <= group_mean <= high


class LetterCountingEnv(LocalServerDefaults, SingleTurnEnv):
    """Rewards the exact boxed count of a letter in a word or random string."""

    name = "letter_counting"
    env_config_cls = LetterCountingConfig
    config: LetterCountingConfig

    def __init__(self, config: LetterCountingConfig, server_configs, slurm=False, testing=False):
        super().__init__(config, server_configs, slurm, testing)
        self.task: Optional[LetterCountingTask] = None
        self.curriculum = DifficultyCurriculum(config) if config.curriculum_enabled else None

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
        item = self.task.train_item(self.iter, self.curriculum.level if self.curriculum else 0)
        self.iter += 1
        return item

    def on_group_scored(self, item: LetterCountItem, scores: Sequence[float]) -> None:
        if self.curriculum is not None and scores:
            self.curriculum.record(item.level, sum(scores) / len(scores))

    async def collect_trajectories(self, item: LetterCountItem) -> tuple[Optional[ScoredDataGroup], list]:
        group, backlog = await super().collect_trajectories(item)
        if group is None:
            return group, backlog
        mean = sum(group["scores"]) / len(group["scores"])
        trains = (
            self.curriculum.trains_on(mean)
            if self.curriculum
            else mean <= self.config.max_group_average_for_training
        )
        if not trains:
            self.record_group_scores(group["scores"], kept=False, equal_scores=False)
            return None, backlog
        return group, backlog

    # The curriculum's state under 0.4.0's checkpoint names (load_checkpoint sets these attributes).
    @property
    def current_difficulty_level(self) -> Optional[int]:
        return self.curriculum.level if self.curriculum else None

    @current_difficulty_level.setter
    def current_difficulty_level(self, level: int) -> None:
        if self.curriculum is not None:
            self.curriculum.level = int(level)

    @property
    def recent_scores(self) -> list[float]:
        return list(self.curriculum.window) if self.curriculum else []

    @recent_scores.setter
    def recent_scores(self, scores: list[float]) -> None:
        if self.curriculum is not None:
            self.curriculum.window = [float(s) for s in scores]

    def save_checkpoint(self, step: int, data: Optional[dict] = None) -> None:
        data = dict(data or {})
        if self.curriculum is not None:
            data["current_difficulty_level"] = self.curriculum.level
            data["recent_scores"] = list(self.curriculum.window)
        super().save_checkpoint(step, data)

    def prompt_messages(self, item: LetterCountItem) -> list[dict[str, str]]:
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": item.question}]

    def score_reply(self, reply: str, item: LetterCountItem) -> float:
        return score_reply(reply, item.counts if item.multi else item.count)

    def eval_items(self) -> list[LetterCountItem]:
        return self.task.eval_items

    def eval_sample_fields(self, item: LetterCountItem) -> dict:
        return {"question": item.question, "gold_answer": item.counts if item.multi else item.count}


if __name__ == "__main__":
    LetterCountingEnv.cli()
