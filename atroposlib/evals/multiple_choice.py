"""Multiple-choice benchmarks: a row becomes an :class:`MCQuestion`; the core does the rest.

:class:`MultipleChoiceEval` turns each :class:`MCQuestion` into an item whose prompt lists the options as
``A) ...`` (lighteval's generative template by default, :data:`LIGHTEVAL_MC_TEMPLATE`), optionally with the
options in a seeded order (``shuffle_choices = True`` on the class: each item's permutation is seeded by the
config's ``shuffle_seed`` and the item, so it is the same in every run and every process), and scores a
reply 1 when the letter :func:`~atroposlib.evals.answers.extract_letter` reads from it is the right one,
0 otherwise (no answer, two letters, an unclosed ``<think>``, an empty reply). ``samples.jsonl`` keeps the
question, the options as shown, the gold letter, the extracted letter and how it was read.
"""

from __future__ import annotations

import hashlib
import random
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar, Optional

from atroposlib.evals.answers import LETTERS, extract_letter, extract_number
from atroposlib.evals.data import Row, RowError
from atroposlib.evals.env import EvalEnv
from atroposlib.evals.items import EvalItem, Reply, Score

#: The user turn of lighteval's generative multiple-choice tasks (compat: atroposlib 0.4.0's evaluations send it).
LIGHTEVAL_MC_TEMPLATE = """Answer the following multiple choice question. Think step by step before answering.

Provide your final answer within <answer></answer> tags, containing only the letter ({valid_letters}).

Example format:
<answer>A</answer>

{question}

{choices}"""


@dataclass
class MCQuestion:
    """A multiple-choice question: the text, the options (in data order), the 0-based index of the right
    one, and optionally a stable ``id`` (default: the row's subset and index), breakdown ``groups`` and
    extra sample ``fields``."""

    question: str
    choices: Sequence[str]
    answer: int
    id: Optional[str] = None
    groups: dict[str, str] = field(default_factory=dict)
    fields: dict[str, Any] = field(default_factory=dict)


def seeded_order(count: int, seed: Any, key: str) -> list[int]:
    """A permutation of ``range(count)`` that depends only on ``seed`` and ``key`` (the same in every run and
    every process)."""
    digest = hashlib.sha256(f"{seed}\n{key}".encode()).digest()
    order = list(range(count))
    random.Random(int.from_bytes(digest[:8], "big")).shuffle(order)
    return order


def answer_index(value: Any, count: int, field_name: str = "answer") -> int:
    """A gold answer given as an index (``2``, ``"2"``) or a letter (``"C"``) as a 0-based option index;
    :class:`RowError` when it names no option of ``count``."""
    if isinstance(value, str):
        text = value.strip().strip("()").strip()
        if text.isdigit():
            value = int(text)
        elif len(text) == 1 and text.upper() in LETTERS:
            value = LETTERS.index(text.upper())
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value < count:
        raise RowError(field_name, f"must name one of the {count} options (index or letter), got {value!r}")
    return value


def option_labels(count: int, numbered: bool = False) -> list[str]:
    """The labels of ``count`` options: ``A``, ``B`` ... or, ``numbered``, ``1``, ``2`` ..."""
    return [str(i + 1) for i in range(count)] if numbered else list(LETTERS[:count])


def format_choices(
    choices: Sequence[str], template: str = "{label}) {choice}", numbered: bool = False
) -> str:
    """One line per option, ``template`` filled with its ``label`` and ``choice`` (default ``A) first``)."""
    labels = option_labels(len(choices), numbered)
    return "\n".join(
        template.format(label=label, choice=choice) for label, choice in zip(labels, choices, strict=True)
    )


def labelled_choices(row: Row, key_field: str) -> tuple[list[str], int]:
    """The option texts of a row whose ``choices`` is ``{"text": [...], "label": [...]}`` (ARC, OpenBookQA) and
    the index of the option whose label the row's ``key_field`` holds; :class:`RowError` otherwise."""
    choices = row.data["choices"]
    if not isinstance(choices, dict) or "text" not in choices or "label" not in choices:
        raise RowError("choices", "must be an object with 'text' and 'label' lists")
    labels = [str(label).strip() for label in choices["label"]]
    key = str(row.data[key_field]).strip()
    if key not in labels:
        raise RowError(key_field, f"must be one of the labels {labels}, got {key!r}")
    return [str(t) for t in choices["text"]], labels.index(key)


class MultipleChoiceEval(EvalEnv):
    """A benchmark whose rows are multiple-choice questions (see the module docstring).

    A benchmark implements :meth:`question` (row -> :class:`MCQuestion`) and may set ``prompt_template``
    (filled with ``question``, ``choices`` and ``valid_letters``), ``choice_template`` (one option's line,
    from ``label`` and ``choice``), ``numbered`` (options 1, 2, 3 ... instead of A, B, C ...) or override
    :meth:`format_prompt`.
    """

    prompt_template: ClassVar[str] = LIGHTEVAL_MC_TEMPLATE
    choice_template: ClassVar[str] = "{label}) {choice}"
    numbered: ClassVar[bool] = False
    shuffle_choices: ClassVar[bool] = False

    def question(self, row: Row) -> Optional[MCQuestion]:
        """The question of one row (None skips the row)."""
        raise NotImplementedError

    def format_prompt(self, question: MCQuestion) -> str:
        """The user turn of a question (its options already in the order shown)."""
        return self.prompt_template.format(
            question=question.question,
            choices=self.format_choices(question.choices),
            valid_letters="".join(option_labels(len(question.choices), self.numbered)),
        )

    def format_choices(self, choices: Sequence[str]) -> str:
        """The options as shown, one per line (``choice_template``)."""
        return format_choices(choices, self.choice_template, self.numbered)

    def few_shot_block(self, examples: Sequence[MCQuestion]) -> str:
        """Answered examples to put before a prompt: ``Question: ...``, the options, ``Answer: B``, each
        followed by a ``---`` line (empty for no examples)."""
        shots = [
            f"Question: {e.question}\n{self.format_choices(e.choices)}\n\n"
            f"Answer: {option_labels(len(e.choices), self.numbered)[e.answer]}"
            for e in examples
        ]
        return "".join(f"{shot}\n\n---\n\n" for shot in shots)

    def shuffle(self, question: MCQuestion, item_id: str) -> MCQuestion:
        """The question with its options in this item's seeded order (``shuffle_seed`` None: a fresh random
        order every run)."""
        seed = getattr(self.config, "shuffle_seed", 0)
        if seed is None:
            order = list(range(len(question.choices)))
            random.shuffle(order)
        else:
            order = seeded_order(len(question.choices), seed, f"{item_id}\n{question.question}")
        choices = [question.choices[i] for i in order]
        return MCQuestion(
            question.question,
            choices,
            order.index(question.answer),
            question.id,
            question.groups,
            question.fields,
        )

    def make_item(self, row: Row) -> Optional[EvalItem]:
        question = self.question(row)
        if question is None:
            return None
        choices = [str(c) for c in question.choices]
        if not 2 <= len(choices) <= len(LETTERS):
            raise RowError("choices", f"must hold 2 to {len(LETTERS)} options, got {len(choices)}")
        question.choices = choices
        if isinstance(question.answer, bool) or not isinstance(question.answer, int):
            raise RowError("answer", f"must be an option index, got {question.answer!r}")
        if not 0 <= question.answer < len(choices):
            raise RowError(
                "answer", f"must be an option index from 0 to {len(choices) - 1}, got {question.answer}"
            )
        item_id = question.id or f"{row.subset + '/' if row.subset else ''}{row.index}"
        if self.shuffle_choices:
            question = self.shuffle(question, item_id)
        gold = option_labels(len(choices), self.numbered)[question.answer]
        return EvalItem(
            id=item_id,
            prompt=self.format_prompt(question),
            gold=gold,
            groups=dict(question.groups),
            fields={"question": question.question, "choices": list(question.choices), **question.fields},
        )

    def score(self, item: EvalItem, reply: Reply) -> Score:
        """1.0 when the option read from the reply is the gold one, else 0.0."""
        choices = item.fields.get("choices", ())
        extract = extract_number if self.numbered else extract_letter
        option, method = extract(reply.text, len(choices), choices)
        return Score(1.0 if option == item.gold else 0.0, extracted=option, method=method)


__all__ = [
    "LIGHTEVAL_MC_TEMPLATE",
    "MCQuestion",
    "MultipleChoiceEval",
    "answer_index",
    "format_choices",
    "labelled_choices",
    "option_labels",
    "seeded_order",
]
