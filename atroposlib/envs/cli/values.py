"""Turning command-line strings into typed values for pydantic fields (used by the environment CLI).

Every flag of the environment CLI corresponds to a pydantic field. The parser built here converts the
string argparse hands over into a value of the field's annotation, so errors surface while parsing
(argparse turns them into a one-line message naming the flag) and ``--env.max_token_length -1`` is the
integer -1. Conventions shared by all flags:

* ``None`` / ``null`` (any case) means ``None`` for fields that accept it;
* booleans accept ``true/false``, ``yes/no``, ``on/off``, ``1/0`` (any case);
* lists, dicts, tuples, sets and nested models are written as JSON or flow-style YAML (``[1, 2]``);
* enums take their value (``STOP_TRAIN``), literals one of their values.
"""

from __future__ import annotations

import argparse
import enum
import json
import types
import typing
from collections.abc import Callable
from typing import Any

import yaml
from pydantic import BaseModel, TypeAdapter, ValidationError

NONE_STRINGS = frozenset({"none", "null"})
TRUE_STRINGS = frozenset({"true", "yes", "on", "1", "t", "y"})
FALSE_STRINGS = frozenset({"false", "no", "off", "0", "f", "n"})

_COMPLEX_ORIGINS = (list, dict, tuple, set, frozenset)


def _union_members(annotation: Any) -> tuple[Any, ...] | None:
    origin = typing.get_origin(annotation)
    if origin is typing.Union or origin is types.UnionType:
        return typing.get_args(annotation)
    return None


def strip_optional(annotation: Any) -> tuple[Any, bool]:
    """Return ``(inner, accepts_none)`` where ``inner`` is the annotation without ``None``.

    ``Optional[int]`` gives ``(int, True)``; ``int | str | None`` gives ``(int | str, True)``.
    """
    members = _union_members(annotation)
    if members is None:
        return annotation, annotation is type(None) or annotation is Any
    rest = tuple(m for m in members if m is not type(None))
    accepts_none = len(rest) != len(members)
    if len(rest) == 1:
        return rest[0], accepts_none
    return typing.Union[rest], accepts_none  # noqa: UP007 - built from a runtime tuple


def is_bool_annotation(annotation: Any) -> bool:
    """True when the field is a plain (optionally ``Optional``) boolean."""
    inner, _ = strip_optional(annotation)
    return inner is bool


def _is_complex(annotation: Any) -> bool:
    origin = typing.get_origin(annotation)
    if origin in _COMPLEX_ORIGINS or annotation in _COMPLEX_ORIGINS:
        return True
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return True
    members = _union_members(annotation)
    return bool(members) and any(_is_complex(m) for m in members)


def _first_error(exc: ValidationError) -> str:
    err = exc.errors()[0]
    return str(err.get("msg", exc)).rstrip(".")


def make_value_parser(annotation: Any) -> Callable[[str], Any]:
    """Return a callable turning one command-line string into a value valid for ``annotation``.

    The callable raises ``argparse.ArgumentTypeError`` with a short reason on invalid input, which
    argparse reports together with the flag name.
    """
    inner, accepts_none = strip_optional(annotation)
    adapter = TypeAdapter(annotation)

    def parse(text: str) -> Any:
        lowered = text.strip().lower()
        if lowered in NONE_STRINGS and accepts_none:
            return None
        if inner is bool:
            if lowered in TRUE_STRINGS:
                return True
            if lowered in FALSE_STRINGS:
                return False
            raise argparse.ArgumentTypeError(f"expected true or false, got {text!r}")
        if inner is Any:
            try:
                return yaml.safe_load(text)
            except yaml.YAMLError:
                return text
        value: Any = text
        if _is_complex(inner):
            try:
                value = yaml.safe_load(text)
            except yaml.YAMLError as exc:
                reason = str(exc).splitlines()[0]
                raise argparse.ArgumentTypeError(f"not valid JSON/YAML ({reason}): {text!r}") from None
        try:
            return adapter.validate_python(value)
        except ValidationError as exc:
            raise argparse.ArgumentTypeError(f"{_first_error(exc)} (got {text!r})") from None

    parse.__name__ = describe_type(annotation)  # argparse uses it in "invalid <name> value" messages
    return parse


def describe_type(annotation: Any) -> str:
    """A short human name for an annotation, used as the flag's metavar (``INT``, ``FLOAT|NONE`` ...)."""
    inner, accepts_none = strip_optional(annotation)
    if isinstance(inner, type) and issubclass(inner, enum.Enum):
        name = "{" + ",".join(str(m.value) for m in inner) + "}"
    elif typing.get_origin(inner) is typing.Literal:
        name = "{" + ",".join(str(v) for v in typing.get_args(inner)) + "}"
    elif inner is bool:
        name = "BOOL"
    elif isinstance(inner, type):
        name = inner.__name__.upper()
    else:
        origin = typing.get_origin(inner)
        if origin in _COMPLEX_ORIGINS:
            name = origin.__name__.upper()
        elif _union_members(inner):
            name = "|".join(describe_type(m) for m in typing.get_args(inner))
        else:
            name = "VALUE"
    return f"{name}|NONE" if accepts_none and name != "VALUE" else name


def format_default(value: Any) -> str:
    """Render a default value the way a user would type it on the command line."""
    if value is None:
        return "None"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, enum.Enum):
        return str(value.value)
    if isinstance(value, BaseModel):
        value = value.model_dump(mode="json")
    if isinstance(value, (list, dict, tuple, set)):
        return json.dumps(list(value) if isinstance(value, (tuple, set)) else value, default=str)
    return str(value)
