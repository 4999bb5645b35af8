"""Grading a response against a row's IFEval instructions, strictly and loosely.

A row names its instructions by id with one argument dict each (``instruction_id_list`` and ``kwargs``);
:func:`bind_instructions` checks both against :data:`~atroposlib.utils.ifeval.instructions.INSTRUCTIONS`
once, so bad data fails at load time. :func:`grade_response` then gives, per instruction, whether the
response follows it:

* strict: the response as it is;
* loose: any of the response, the response without its first line, without its last line, without
  both, and each of these with every ``*`` removed (markdown emphasis), follows it.

An empty (or whitespace-only) response follows nothing. :func:`grade_reply` applies the reply convention
first: the ``<think>`` block is removed, and a reply whose think block never closes follows nothing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Optional

from pydantic import ValidationError

from atroposlib.utils.ifeval.instructions import INSTRUCTIONS, Arguments, Instruction
from atroposlib.utils.replies import answer_section


class InstructionError(ValueError):
    """An instruction id that is not registered, or arguments that do not fit it (one-line message)."""


@dataclass(frozen=True)
class BoundInstruction:
    """An instruction with its validated arguments."""

    spec: Instruction
    arguments: Arguments

    @property
    def id(self) -> str:
        return self.spec.id

    def follows(self, response: str) -> bool:
        """Whether ``response`` (non-empty) follows this instruction."""
        return bool(response.strip()) and bool(self.spec.check(response, self.arguments))


def bind_instruction(instruction_id: str, kwargs: Optional[Mapping[str, Any]]) -> BoundInstruction:
    """Validate ``kwargs`` for ``instruction_id``; None values mean "not given".

    Raises :class:`InstructionError` for an unknown id, a missing argument or an argument of the wrong
    type or range.
    """
    spec = INSTRUCTIONS.get(instruction_id)
    if spec is None:
        raise InstructionError(f"unknown instruction id {instruction_id!r}")
    given = {key: value for key, value in (kwargs or {}).items() if value is not None}
    try:
        arguments = spec.arguments.model_validate(given)
    except ValidationError as exc:
        error = exc.errors()[0]
        field = ".".join(str(part) for part in error["loc"]) or "arguments"
        problem = "missing" if error["type"] == "missing" else error["msg"]
        raise InstructionError(f"instruction {instruction_id!r}: argument {field!r}: {problem}") from None
    return BoundInstruction(spec=spec, arguments=arguments)


def bind_instructions(
    instruction_ids: Sequence[str], kwargs: Sequence[Optional[Mapping[str, Any]]]
) -> tuple[BoundInstruction, ...]:
    """Bind every instruction of a row (see :func:`bind_instruction`).

    Raises :class:`InstructionError` when the row has no instruction, the two lists differ in length,
    or any instruction does not bind.
    """
    if isinstance(instruction_ids, str) or not isinstance(instruction_ids, Sequence):
        raise InstructionError("instruction_id_list must be a list of ids")
    if not isinstance(kwargs, Sequence) or isinstance(kwargs, str):
        raise InstructionError("kwargs must be a list of dicts")
    if not instruction_ids:
        raise InstructionError("no instructions")
    if len(kwargs) != len(instruction_ids):
        raise InstructionError(f"{len(instruction_ids)} instruction ids but {len(kwargs)} kwargs")
    for item in kwargs:
        if item is not None and not isinstance(item, Mapping):
            raise InstructionError("kwargs must be a list of dicts")
    return tuple(bind_instruction(i, k) for i, k in zip(instruction_ids, kwargs, strict=True))


def loose_variants(response: str) -> list[str]:
    """The response and the variants the loose grading also tries (see the module docstring)."""
    lines = response.split("\n")
    trimmed = [
        response,
        "\n".join(lines[1:]).strip(),
        "\n".join(lines[:-1]).strip(),
        "\n".join(lines[1:-1]).strip(),
    ]
    return trimmed + [text.replace("*", "") for text in trimmed]


@dataclass(frozen=True)
class Grade:
    """Per instruction (in row order): ``strict`` and ``loose`` verdicts."""

    strict: tuple[bool, ...]
    loose: tuple[bool, ...]

    @property
    def strict_fraction(self) -> float:
        """Share of instructions followed strictly (the training reward)."""
        return sum(self.strict) / len(self.strict) if self.strict else 0.0


def grade_response(response: Optional[str], instructions: Sequence[BoundInstruction]) -> Grade:
    """Grade ``response`` (None: no usable response, nothing followed) against ``instructions``."""
    if response is None or not response.strip():
        nothing = tuple(False for _ in instructions)
        return Grade(strict=nothing, loose=nothing)
    variants = [text for text in loose_variants(response) if text.strip()]
    strict = tuple(item.follows(response) for item in instructions)
    loose = tuple(
        followed or any(item.follows(text) for text in variants[1:])
        for item, followed in zip(instructions, strict, strict=True)
    )
    return Grade(strict=strict, loose=loose)


def grade_reply(reply: str, instructions: Sequence[BoundInstruction]) -> Grade:
    """Grade a model reply: its think block removed, surrounding whitespace stripped (see module docstring)."""
    section = answer_section(reply)
    return grade_response(None if section is None else section.strip(), instructions)
