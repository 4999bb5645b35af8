"""Pydantic models from model source code, built without executing it.

Data sets of structured-output tasks ship the target model as Python source (``class Order(BaseModel): ...``).
Running that source would run whatever the data holds, so :func:`model_from_source` reads it with :mod:`ast`
and rebuilds the declarations with :func:`pydantic.create_model` instead. Only declarative parts are
understood:

* ``class X(BaseModel)`` (or a subclass of a model defined earlier in the source) with annotated fields, a
  default that is a literal or ``Field(...)`` with literal arguments (``default_factory`` may be ``list``,
  ``dict`` or ``set``), and ``model_config = ConfigDict(...)`` with literal arguments;
* ``class E(Enum)`` / ``class E(str, Enum)`` / ``IntEnum`` with literal members;
* annotations built from ``str int float bool bytes None Any``, ``list dict set tuple`` and their ``typing``
  names, ``Optional Union Literal Annotated``, ``X | Y``, ``datetime date time timedelta Decimal UUID``,
  ``EmailStr HttpUrl AnyUrl``, ``constr conint confloat conlist`` with literal arguments, and classes defined
  earlier in the source;
* imports, docstrings, ``pass`` and methods are skipped: decorated validators (``field_validator``,
  ``model_validator``) are NOT enforced, since their bodies are code.

Anything else (a call, a name or an expression outside this list, a forward reference to a later class) raises
:class:`UnsupportedSource` with a one-line reason.
"""

from __future__ import annotations

import ast
import datetime
import decimal
import enum
import typing
import uuid
from typing import Any, Optional

import pydantic
from pydantic import BaseModel, ConfigDict, Field, create_model

_BASE_TYPES: dict[str, Any] = {
    "str": str,
    "int": int,
    "float": float,
    "bool": bool,
    "bytes": bytes,
    "None": type(None),
    "Any": Any,
    "datetime": datetime.datetime,
    "date": datetime.date,
    "time": datetime.time,
    "timedelta": datetime.timedelta,
    "Decimal": decimal.Decimal,
    "UUID": uuid.UUID,
    "EmailStr": pydantic.EmailStr,
    "HttpUrl": pydantic.HttpUrl,
    "AnyUrl": pydantic.AnyUrl,
}
_GENERICS: dict[str, Any] = {
    "list": list,
    "List": list,
    "dict": dict,
    "Dict": dict,
    "set": set,
    "Set": set,
    "frozenset": frozenset,
    "FrozenSet": frozenset,
    "tuple": tuple,
    "Tuple": tuple,
    "Sequence": typing.Sequence,
    "Mapping": typing.Mapping,
}
_CONSTRAINED = {"constr": pydantic.constr, "conint": pydantic.conint, "confloat": pydantic.confloat}
_FACTORIES = {"list": list, "dict": dict, "set": set}
_ENUM_BASES = {"Enum": enum.Enum, "IntEnum": enum.IntEnum, "StrEnum": getattr(enum, "StrEnum", enum.Enum)}
_FIELD_KWARGS = {
    "default", "default_factory", "alias", "title", "description", "examples", "gt", "ge", "lt", "le",
    "multiple_of", "min_length", "max_length", "pattern", "strict", "max_digits", "decimal_places",
    "allow_inf_nan", "frozen", "validation_alias", "serialization_alias", "json_schema_extra",
}  # fmt: skip


class UnsupportedSource(ValueError):
    """The source uses a construct that cannot be rebuilt without running it (message: one line)."""


def _name(node: ast.AST) -> Optional[str]:
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):  # typing.List, pydantic.Field, datetime.date ...
        return node.attr
    return None


def _literal(node: ast.AST) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError):
        raise UnsupportedSource(
            f"line {getattr(node, 'lineno', '?')}: not a literal: {ast.unparse(node)}"
        ) from None


class _Builder:
    def __init__(self) -> None:
        self.defined: dict[str, Any] = {}

    # -- annotations ------------------------------------------------------------------------------------
    def annotation(self, node: ast.AST) -> Any:
        if isinstance(node, ast.Constant):
            if node.value is None:
                return type(None)
            if isinstance(node.value, str):  # a quoted annotation
                return self.annotation(ast.parse(node.value, mode="eval").body)
            raise UnsupportedSource(f"line {node.lineno}: unsupported annotation {node.value!r}")
        if isinstance(node, ast.BinOp) and isinstance(node.op, ast.BitOr):
            return typing.Union[self.annotation(node.left), self.annotation(node.right)]  # noqa: UP007
        if isinstance(node, ast.Subscript):
            return self.subscript(node)
        if isinstance(node, ast.Call):
            return self.constrained(node)
        name = _name(node)
        if name in self.defined:
            return self.defined[name]
        if name in _BASE_TYPES:
            return _BASE_TYPES[name]
        if name in _GENERICS:
            return _GENERICS[name]
        raise UnsupportedSource(f"line {getattr(node, 'lineno', '?')}: unknown type {ast.unparse(node)}")

    def subscript(self, node: ast.Subscript) -> Any:
        outer = _name(node.value)
        items = node.slice.elts if isinstance(node.slice, ast.Tuple) else [node.slice]
        if outer == "Literal":
            return typing.Literal[tuple(_literal(i) for i in items)]
        if outer == "Annotated":
            base = self.annotation(items[0])
            extras = [self.field_info(i) for i in items[1:]]
            return typing.Annotated[(base, *extras)]
        args = tuple(self.annotation(i) for i in items)
        if outer == "Optional":
            return typing.Optional[args[0]]  # noqa: UP045
        if outer == "Union":
            return typing.Union[args]  # noqa: UP007
        if outer in ("tuple", "Tuple") and isinstance(node.slice, ast.Tuple):
            return tuple[args]
        if outer in _GENERICS:
            return _GENERICS[outer][args if len(args) > 1 else args[0]]
        raise UnsupportedSource(f"line {node.lineno}: unsupported generic {ast.unparse(node.value)}")

    def constrained(self, node: ast.Call) -> Any:
        name = _name(node.func)
        kwargs = {kw.arg: _literal(kw.value) for kw in node.keywords if kw.arg}
        if name in _CONSTRAINED and not node.args:
            return _CONSTRAINED[name](**kwargs)
        if name == "conlist" and len(node.args) == 1:
            return pydantic.conlist(self.annotation(node.args[0]), **kwargs)
        raise UnsupportedSource(f"line {node.lineno}: unsupported call {ast.unparse(node)}")

    # -- fields -----------------------------------------------------------------------------------------
    def default(self, node: ast.AST) -> Any:
        """A literal, ``...``, or a member of an enum defined earlier (``Status.PENDING``)."""
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
            owner = self.defined.get(node.value.id)
            if isinstance(owner, type) and issubclass(owner, enum.Enum) and node.attr in owner.__members__:
                return owner[node.attr]
        return _literal(node)

    def field_info(self, node: ast.AST) -> Any:
        if not (isinstance(node, ast.Call) and _name(node.func) == "Field"):
            return pydantic.fields.FieldInfo(default=self.default(node))
        kwargs: dict[str, Any] = {}
        if node.args:
            kwargs["default"] = self.default(node.args[0])
        for kw in node.keywords:
            if kw.arg not in _FIELD_KWARGS:
                raise UnsupportedSource(f"line {node.lineno}: unsupported Field argument {kw.arg}")
            if kw.arg == "default_factory":
                factory = _name(kw.value)
                if factory not in _FACTORIES:
                    raise UnsupportedSource(
                        f"line {node.lineno}: unsupported default_factory {ast.unparse(kw.value)}"
                    )
                kwargs["default_factory"] = _FACTORIES[factory]
            else:
                kwargs[kw.arg] = self.default(kw.value) if kw.arg == "default" else _literal(kw.value)
        return Field(**kwargs)

    # -- classes ----------------------------------------------------------------------------------------
    def enum_class(self, node: ast.ClassDef, base: type) -> type:
        members = {}
        for stmt in node.body:
            if (
                isinstance(stmt, ast.Assign)
                and len(stmt.targets) == 1
                and isinstance(stmt.targets[0], ast.Name)
            ):
                members[stmt.targets[0].id] = _literal(stmt.value)
            elif not _skippable(stmt):
                raise UnsupportedSource(f"line {stmt.lineno}: unsupported statement in enum {node.name}")
        bases = [_name(b) for b in node.bases]
        mixin = str if "str" in bases else int if "int" in bases else None
        if mixin is not None and base is enum.Enum:
            return enum.Enum(node.name, members, type=mixin)
        return base(node.name, members)

    def model_class(self, node: ast.ClassDef, parent: type[BaseModel]) -> type[BaseModel]:
        fields: dict[str, Any] = {}
        config: Optional[ConfigDict] = None
        for stmt in node.body:
            if isinstance(stmt, ast.AnnAssign) and isinstance(stmt.target, ast.Name):
                annotation = self.annotation(stmt.annotation)
                if stmt.value is None:
                    fields[stmt.target.id] = (annotation, ...)
                else:
                    fields[stmt.target.id] = (annotation, self.field_info(stmt.value))
            elif (
                isinstance(stmt, ast.Assign)
                and len(stmt.targets) == 1
                and _name(stmt.targets[0]) == "model_config"
                and isinstance(stmt.value, ast.Call)
                and _name(stmt.value.func) == "ConfigDict"
            ):
                config = ConfigDict(**{kw.arg: _literal(kw.value) for kw in stmt.value.keywords if kw.arg})
            elif not _skippable(stmt):
                raise UnsupportedSource(f"line {stmt.lineno}: unsupported statement in class {node.name}")
        if config is not None:
            parent = type(f"{node.name}Base", (parent,), {"model_config": {**parent.model_config, **config}})
        try:
            return create_model(node.name, __base__=parent, **fields)
        except Exception as exc:
            raise UnsupportedSource(f"class {node.name}: {' '.join(str(exc).split())[:200]}") from None

    def build(self, source: str) -> dict[str, Any]:
        try:
            tree = ast.parse(source)
        except SyntaxError as exc:
            raise UnsupportedSource(f"not valid Python: {exc.msg} (line {exc.lineno})") from None
        for stmt in tree.body:
            if isinstance(stmt, ast.ClassDef):
                self.defined[stmt.name] = self.class_def(stmt)
            elif not (_skippable(stmt) or isinstance(stmt, (ast.Import, ast.ImportFrom))):
                raise UnsupportedSource(f"line {stmt.lineno}: unsupported top-level statement")
        return self.defined

    def class_def(self, node: ast.ClassDef) -> type:
        if node.decorator_list:
            raise UnsupportedSource(f"line {node.lineno}: decorated class {node.name}")
        base_names = [_name(b) for b in node.bases]
        for name in base_names:
            if name in _ENUM_BASES:
                return self.enum_class(node, _ENUM_BASES[name])
        parents = [self.defined[n] for n in base_names if n in self.defined]
        if "BaseModel" in base_names:
            return self.model_class(node, BaseModel)
        if len(parents) == 1 and isinstance(parents[0], type) and issubclass(parents[0], BaseModel):
            return self.model_class(node, parents[0])
        raise UnsupportedSource(f"line {node.lineno}: class {node.name} is neither a BaseModel nor an Enum")


def _skippable(stmt: ast.stmt) -> bool:
    """Docstrings, ``pass`` and function definitions (methods and validators, whose bodies are code)."""
    if isinstance(stmt, (ast.Pass, ast.FunctionDef, ast.AsyncFunctionDef)):
        return True
    return (
        isinstance(stmt, ast.Expr)
        and isinstance(stmt.value, ast.Constant)
        and isinstance(stmt.value.value, str)
    )


def model_from_source(source: str, model_name: str) -> type[BaseModel]:
    """The pydantic model ``model_name`` declared in ``source``, rebuilt without executing the source.

    Raises :class:`UnsupportedSource` (one-line message) when the source uses anything outside the subset in
    the module docstring or does not declare ``model_name`` as a model.
    """
    defined = _Builder().build(source)
    model = defined.get(model_name)
    if not (isinstance(model, type) and issubclass(model, BaseModel)):
        raise UnsupportedSource(f"no model named {model_name!r} in the source")
    return model
