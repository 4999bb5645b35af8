"""Broken JSON for schema-editing tasks: a valid instance of a JSON Schema, then errors put into it.

:func:`valid_instance` builds the smallest instance a JSON Schema (as pydantic's ``model_json_schema()``
writes it: ``$defs``/``$ref``, ``anyOf``, ``enum``, ``const``, string formats and length bounds, numeric
bounds, arrays, objects with ``required``) accepts, or None where it cannot (a string ``pattern``, an
unknown type). :func:`introduce_errors` applies up to ``max_errors`` errors of the enabled kinds
(:data:`ERROR_TYPES`, atroposlib 0.4.0's names) to a copy of an instance; each is kept only when the
caller's ``is_valid`` says the result no longer validates.
"""

from __future__ import annotations

import copy
import random
from collections.abc import Callable
from typing import Any, Optional

#: The error kinds of atroposlib 0.4.0's error introduction.
ERROR_TYPES = (
    "type_error",
    "format_error",
    "constraint_error",
    "enum_error",
    "required_field_missing",
    "extra_field",
    "nested_error",
    "list_error",
    "validator_error",
)

_FORMAT_SAMPLES = {
    "email": "user@example.com",
    "uri": "https://example.com/",
    "uuid": "12345678-1234-5678-1234-567812345678",
    "date": "2024-01-01",
    "date-time": "2024-01-01T00:00:00Z",
    "time": "12:00:00",
}
_BAD_FORMATS = {
    "email": "not-an-email",
    "uri": "not a url",
    "uuid": "not-a-uuid",
    "date": "2024-13-45",
    "date-time": "yesterday",
    "time": "25:61",
}


class _NoInstance(Exception):
    pass


def _resolve(schema: dict, root: dict) -> dict:
    while "$ref" in schema:
        name = schema["$ref"].rsplit("/", 1)[-1]
        schema = {**root.get("$defs", {}).get(name, {}), **{k: v for k, v in schema.items() if k != "$ref"}}
    return schema


def _instance(schema: dict, root: dict, depth: int) -> Any:
    if depth > 8:
        raise _NoInstance
    schema = _resolve(schema, root)
    if "const" in schema:
        return schema["const"]
    if "enum" in schema:
        return schema["enum"][0]
    for key in ("anyOf", "oneOf"):
        if key in schema:
            options = [o for o in schema[key] if _resolve(o, root).get("type") != "null"] or schema[key]
            return _instance(options[0], root, depth + 1)
    if "allOf" in schema and len(schema["allOf"]) == 1:
        return _instance(schema["allOf"][0], root, depth + 1)
    kind = schema.get("type")
    if isinstance(kind, list):
        kind = next((k for k in kind if k != "null"), "null")
    if kind == "string":
        if "pattern" in schema:
            raise _NoInstance
        text = _FORMAT_SAMPLES.get(schema.get("format", ""), "x")
        low, high = schema.get("minLength", 0), schema.get("maxLength")
        if len(text) < low:
            text = text + "x" * (low - len(text))
        if high is not None and len(text) > high:
            if "format" in schema:
                raise _NoInstance
            text = text[:high]
        return text
    if kind in ("integer", "number"):
        value: float = 0
        if "minimum" in schema:
            value = schema["minimum"]
        elif "exclusiveMinimum" in schema:
            value = schema["exclusiveMinimum"] + 1
        elif "maximum" in schema and schema["maximum"] < 0:
            value = schema["maximum"]
        elif "exclusiveMaximum" in schema and schema["exclusiveMaximum"] <= 0:
            value = schema["exclusiveMaximum"] - 1
        return int(value) if kind == "integer" else float(value)
    if kind == "boolean":
        return True
    if kind == "null":
        return None
    if kind == "array":
        count = schema.get("minItems", 0)
        return [_instance(schema.get("items", {}), root, depth + 1) for _ in range(count)]
    if kind == "object" or "properties" in schema:
        properties = schema.get("properties", {})
        return {name: _instance(properties[name], root, depth + 1) for name in schema.get("required", [])}
    raise _NoInstance


def valid_instance(schema: dict, is_valid: Callable[[Any], bool]) -> Optional[Any]:
    """The smallest instance of ``schema`` (see the module docstring) that ``is_valid`` accepts, or None."""
    try:
        value = _instance(schema, schema, 0)
    except (_NoInstance, KeyError, TypeError, IndexError):
        return None
    return value if is_valid(value) else None


def _fields(value: Any, schema: dict, root: dict, path: tuple = ()) -> list[tuple[tuple, dict, Any]]:
    """Every (path, field schema, value) below an object instance, nested objects included."""
    found = []
    schema = _resolve(schema, root)
    for key in ("anyOf", "oneOf"):
        if key in schema:
            options = [o for o in schema[key] if _resolve(o, root).get("type") != "null"]
            schema = _resolve(options[0], root) if options else schema
    if isinstance(value, dict):
        properties = schema.get("properties", {})
        for name, item in value.items():
            if name in properties:
                sub = _resolve(properties[name], root)
                found.append(((*path, name), sub, item))
                found.extend(_fields(item, sub, root, (*path, name)))
    return found


def _set(value: Any, path: tuple, new: Any) -> Any:
    target = value
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = new
    return value


def _candidates(kind: str, value: Any, schema: dict, rng: random.Random) -> list[Any]:
    """Broken copies of ``value`` (an object instance of ``schema``) for one error kind."""
    fields = _fields(value, schema, schema)
    out = []
    for path, sub, item in fields:
        if kind in ("type_error", "nested_error" if len(path) > 1 else "-", "validator_error"):
            wrong = (
                12345 if isinstance(item, str) else "not a number" if isinstance(item, (int, float)) else 7
            )
            out.append(_set(copy.deepcopy(value), path, wrong))
        elif kind == "format_error" and "format" in sub:
            out.append(_set(copy.deepcopy(value), path, _BAD_FORMATS.get(sub["format"], "???")))
        elif kind == "constraint_error":
            if "minLength" in sub:
                out.append(_set(copy.deepcopy(value), path, ""))
            if "maxLength" in sub:
                out.append(_set(copy.deepcopy(value), path, "x" * (sub["maxLength"] + 1)))
            for bound, delta in (
                ("minimum", -1),
                ("exclusiveMinimum", 0),
                ("maximum", 1),
                ("exclusiveMaximum", 0),
            ):
                if bound in sub:
                    out.append(_set(copy.deepcopy(value), path, sub[bound] + delta))
        elif kind == "enum_error" and "enum" in sub:
            out.append(_set(copy.deepcopy(value), path, "not_a_valid_choice"))
        elif kind == "list_error" and isinstance(item, list):
            out.append(_set(copy.deepcopy(value), path, "not a list"))
    if kind == "required_field_missing" and isinstance(value, dict):
        for name in _resolve(schema, schema).get("required", []):
            broken = copy.deepcopy(value)
            broken.pop(name, None)
            out.append(broken)
    if kind == "extra_field" and isinstance(value, dict):
        out.append({**copy.deepcopy(value), "unexpected_field": "extra"})
    rng.shuffle(out)
    return out


def introduce_errors(
    value: Any,
    schema: dict,
    is_valid: Callable[[Any], bool],
    *,
    error_types: list[str],
    max_errors: int,
    rng: random.Random,
) -> tuple[Any, list[str]]:
    """A copy of ``value`` with 1..``max_errors`` errors of ``error_types`` that ``is_valid`` rejects, and
    the kinds applied; ``(value, [])`` when no enabled kind breaks it."""
    broken, applied = copy.deepcopy(value), []
    for _ in range(max(1, max_errors)):
        kinds = list(error_types)
        rng.shuffle(kinds)
        for kind in kinds:
            options = [c for c in _candidates(kind, broken, schema, rng) if not is_valid(c)]
            if options:
                broken = options[0]
                applied.append(kind)
                break
        else:
            break
    return broken, applied
