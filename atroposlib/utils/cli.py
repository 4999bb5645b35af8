"""Small helpers for building namespaced command-line configurations out of pydantic models.

These are the public helpers environment authors could import from ``atroposlib.utils.cli``. The
environment CLI itself (``atroposlib.envs.cli``) uses the first four; ``get_double_dash_flags`` is kept
for scripts that relied on it but is not used by the CLI, which takes its values from argparse.
"""

from __future__ import annotations

import copy
import sys
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic import BaseModel, Field, create_model
from pydantic_core import PydanticUndefined

__all__ = [
    "get_prefixed_pydantic_model",
    "merge_dicts",
    "extract_namespace",
    "adjust_model_defaults",
    "get_double_dash_flags",
]


def _field_spec(field: Any, default: Any = PydanticUndefined) -> tuple[Any, Any]:
    """Return ``(annotation, FieldInfo)`` for ``create_model`` copying description and default."""
    kwargs: dict[str, Any] = {"description": field.description}
    if default is not PydanticUndefined:
        kwargs["default"] = default
    elif field.default_factory is not None:
        kwargs["default_factory"] = field.default_factory
    elif field.default is not PydanticUndefined:
        kwargs["default"] = field.default
    return field.annotation, Field(**kwargs)


def get_prefixed_pydantic_model(model_cls: type[BaseModel], prefix: str) -> type[BaseModel]:
    """Return a new model whose fields are ``model_cls``'s fields renamed to ``prefix + name``.

    Annotation, description and default (or default factory) of each field are kept; required fields
    stay required. ``prefix`` is used verbatim (pass ``"env."`` to get ``env.group_size``).
    """
    fields = {f"{prefix}{name}": _field_spec(info) for name, info in model_cls.model_fields.items()}
    label = prefix.strip(".").replace(".", "_").capitalize()
    return create_model(f"{label}{model_cls.__name__}", __base__=BaseModel, **fields)


def merge_dicts(*dicts: Mapping[str, Any] | None) -> dict[str, Any]:
    """Merge mappings left to right; later values win, nested mappings are merged recursively.

    ``None`` arguments are skipped. Inputs are never modified (values are deep-copied).
    """
    result: dict[str, Any] = {}
    for d in dicts:
        if not d:
            continue
        for key, value in d.items():
            if isinstance(value, Mapping) and isinstance(result.get(key), Mapping):
                result[key] = merge_dicts(result[key], value)
            else:
                result[key] = copy.deepcopy(value)
    return result


def extract_namespace(model: Any, prefix: str) -> dict[str, Any]:
    """Return the entries of ``model`` whose keys start with ``prefix``, with the prefix stripped.

    ``model`` may be a pydantic model (``model_dump()``), an object with ``to_dict()``, or a mapping.
    Raises ``TypeError`` for anything else.
    """
    if hasattr(model, "model_dump"):
        data = model.model_dump()
    elif hasattr(model, "to_dict"):
        data = model.to_dict()
    elif isinstance(model, Mapping):
        data = model
    else:
        raise TypeError(f"cannot extract a namespace from {type(model).__name__}")
    return {key[len(prefix) :]: value for key, value in data.items() if key.startswith(prefix)}


def adjust_model_defaults(
    model_cls: type[BaseModel], defaults: Mapping[str, Any] | BaseModel
) -> type[BaseModel]:
    """Return a subclass ``{Name}WithDefaults`` of ``model_cls`` whose field defaults are replaced.

    ``defaults`` is a mapping or a model instance; keys that are not fields of ``model_cls`` are ignored.
    Values are deep-copied so instances never share mutable defaults with ``defaults``.
    """
    if isinstance(defaults, BaseModel):
        values = {name: getattr(defaults, name) for name in type(defaults).model_fields}
    else:
        values = dict(defaults)
    fields = {
        name: _field_spec(info, copy.deepcopy(values[name]))
        for name, info in model_cls.model_fields.items()
        if name in values
    }
    return create_model(f"{model_cls.__name__}WithDefaults", __base__=model_cls, **fields)


def get_double_dash_flags(argv: Sequence[str] | None = None) -> dict[str, Any]:
    """Collect ``--key value`` / ``--key=value`` / bare ``--key`` flags from ``argv`` (default ``sys.argv``).

    Values stay strings except the literal ``"None"`` (-> ``None``) and bare flags (-> ``True``). A value
    that starts with ``-`` is not consumed, so ``--x -1`` reads as ``{"x": True}``: callers that need
    negative numbers should use ``--x=-1`` or, better, a real argparse parser.
    """
    args = list(sys.argv[1:] if argv is None else argv)
    flags: dict[str, Any] = {}
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("--") and len(arg) > 2:
            key = arg[2:]
            if "=" in key:
                key, value = key.split("=", 1)
                flags[key] = None if value == "None" else value
            elif i + 1 < len(args) and not args[i + 1].startswith("-"):
                value = args[i + 1]
                flags[key] = None if value == "None" else value
                i += 1
            else:
                flags[key] = True
        i += 1
    return flags
