"""The strict (fast-path) schema of a scored group, as msgspec types.

A body that fits these types exactly (plain ints for token ids, JSON numbers for floats, the
documented containers) is accepted with the values the original's pydantic model would give it.
Anything else is decided by that pydantic model (:mod:`atroposlib.api.validation`).
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from atroposlib.api.schemas import GROUP_FIELDS

INT32_MIN = -(2**31)
INT32_MAX = 2**31 - 1

Int32 = Annotated[int, msgspec.Meta(ge=INT32_MIN, le=INT32_MAX)]


class StrictRest(msgspec.Struct):
    """Every field of a group after ``tokens`` and ``masks``, in stored order."""

    scores: list[float]
    advantages: list[list[float]] | None = None
    ref_logprobs: list[list[float]] | None = None
    messages: list[list[dict[str, Any]]] | None = None
    generation_params: dict[str, Any] | None = None
    inference_logprobs: list[list[float]] | None = None
    overrides: list[dict[str, Any]] | None = None
    group_overrides: dict[str, Any] | None = None
    images: Any = None
    env_id: Annotated[int, msgspec.Meta(ge=0)] | None = None
    distill_token_ids: list[list[list[Int32]]] | None = None
    distill_logprobs: list[list[list[float]]] | None = None


def _field(info: msgspec.structs.FieldInfo) -> tuple[Any, ...]:
    if info.default is msgspec.NODEFAULT:
        return (info.name, info.type)
    return (info.name, info.type, info.default)


#: The whole group: ``tokens`` and ``masks`` (int32 matrices), then :class:`StrictRest`'s fields.
StrictGroup = msgspec.defstruct(
    "StrictGroup",
    [
        ("tokens", list[list[Int32]]),
        ("masks", list[list[Int32]]),
        *(_field(info) for info in msgspec.structs.fields(StrictRest)),
    ],
)

assert tuple(StrictGroup.__struct_fields__) == GROUP_FIELDS


def messages_complete(messages: list[list[dict[str, Any]]] | None) -> bool:
    """The original's message rule (each message has ``role`` and ``content``), on typed messages."""
    if messages is None:
        return True
    return all("role" in m and "content" in m for conversation in messages for m in conversation)
