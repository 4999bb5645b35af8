"""Scoring a reply to a BFCL entry with BFCL's own AST checker.

The reply is read by the project's Hermes conventions (:mod:`atroposlib.utils.tool_calls`): only the
part after the think block counts, ``<tool_call>`` tags must pair up and each block must be one call in
strict JSON (``{"name": ..., "arguments": {...}}``; arguments as an object or a JSON string). The calls
are handed to ``bfcl_eval``'s ``ast_checker`` as BFCL's decoders produce them, ``[{name: {argument:
value}}]``, with the argument values exactly as the model wrote them (``5.0`` stays a float, so an
integer parameter given ``5.0`` is wrong, as on the leaderboard).

* AST categories: a reply that cannot be decoded is wrong (``ast_decoder:decoder_failed``); otherwise
  the checker's verdict (function name, count, required/unexpected arguments, types, values; parallel
  calls in any order) decides.
* ``irrelevance`` / ``live_irrelevance``: right when the reply makes no call (as BFCL, a reply whose
  calls cannot be decoded makes none); ``live_relevance``: right when it makes at least one.

``ast_checker`` imports BFCL's model table only to learn whether a model's tool names had their dots
replaced; that table imports every vendor SDK. A private copy of the checker module is loaded with, while
it loads, a table that answers "yes" for every model (the prompt replaces dots, see
:mod:`atroposlib.evals.bfcl.prompt`); nothing else of ``bfcl_eval`` is replaced.
"""

from __future__ import annotations

import functools
import importlib.util
import sys
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from atroposlib.evals.bfcl.data import AST_CATEGORIES, BfclItem, BfclUnavailable, bfcl_package
from atroposlib.evals.bfcl.prompt import tool_name
from atroposlib.utils.replies import answer_section
from atroposlib.utils.tool_calls import (
    ToolCall,
    ToolCallError,
    call_from_object,
    decode_arguments,
    extract_tool_call_blocks,
    load_json,
)

#: The model name handed to the checker (only used for the dot-replacement lookup).
CHECKER_MODEL = "atroposlib-hermes-fc"
_MODEL_TABLE = "bfcl_eval.constants.model_config"


class _DotsReplaced:
    """BFCL's model-config entry, reduced to the one field the AST checker reads."""

    underscore_to_dot = True


class _AnyModel(dict):
    def __missing__(self, key: str) -> _DotsReplaced:
        return _DotsReplaced()


@functools.cache
def ast_checker() -> Callable[..., dict[str, Any]]:
    """``ast_checker`` of ``bfcl_eval/eval_checker/ast_eval/ast_checker.py``, loaded once as a private copy
    (so a copy someone else imported with BFCL's real model table is neither used nor changed; see the
    module docstring). :class:`BfclUnavailable` when ``bfcl-eval`` is not installed."""
    source = Path(list(bfcl_package().__path__)[0]) / "eval_checker" / "ast_eval" / "ast_checker.py"
    spec = importlib.util.spec_from_file_location(f"{__name__}._bfcl_ast_checker", source)
    if spec is None or spec.loader is None:
        raise BfclUnavailable(f"{source}: BFCL's AST checker is missing from the installed bfcl-eval")
    module = importlib.util.module_from_spec(spec)
    stand_in = types.ModuleType(_MODEL_TABLE)
    stand_in.MODEL_CONFIG_MAPPING = _AnyModel()  # type: ignore[attr-defined]
    previous = sys.modules.get(_MODEL_TABLE)
    sys.modules[_MODEL_TABLE] = stand_in
    try:
        spec.loader.exec_module(module)
    finally:
        if previous is None:
            sys.modules.pop(_MODEL_TABLE, None)
        else:
            sys.modules[_MODEL_TABLE] = previous
    return module.ast_checker


def python_language() -> Any:
    """BFCL's ``Language.PYTHON`` (the checker's type rules for Python functions)."""
    from bfcl_eval.constants.enums import Language

    return Language.PYTHON


def decode_reply(reply: str) -> Optional[list[dict[str, dict[str, Any]]]]:
    """The calls of ``reply`` as ``[{name: arguments}]`` (values as written), or None when the reply
    cannot be decoded (unclosed think block, unpaired tags, a block that is not one call in strict
    JSON). A reply without calls gives ``[]``."""
    section = answer_section(reply or "")
    blocks = extract_tool_call_blocks(section) if section is not None else None
    if blocks is None:
        return None
    calls = []
    for block in blocks:
        try:
            value = load_json(block)
            call = call_from_object(value)
        except ToolCallError:
            return None
        # Values as written (not canonical): BFCL's type rules tell 1 from 1.0.
        calls.append({call.name: decode_arguments(value.get("arguments", {}))})
    return calls


@dataclass(frozen=True)
class Verdict:
    """Whether a reply is right, and BFCL's ``error_type`` and error lines when it is not."""

    valid: bool
    error_type: Optional[str] = None
    errors: tuple[str, ...] = ()

    def record(self) -> dict[str, Any]:
        """The verdict as sample fields."""
        return {"valid": self.valid, "error_type": self.error_type, "errors": list(self.errors)}


def check_reply(item: BfclItem, reply: str) -> Verdict:
    """BFCL's verdict on ``reply`` to ``item`` (see the module docstring)."""
    calls = decode_reply(reply)
    if item.category not in AST_CATEGORIES:
        makes_call = bool(calls) and any(call for call in calls)
        if item.category.endswith("irrelevance"):
            if makes_call:
                return Verdict(False, "irrelevance_error:decoder_success", ("a function was called",))
            return Verdict(True)
        if not makes_call:
            return Verdict(False, "relevance_error:decoder_failed", ("no function was called",))
        return Verdict(True)
    if calls is None:
        return Verdict(False, "ast_decoder:decoder_failed", ("the reply's tool calls cannot be decoded",))
    result = ast_checker()(
        list(item.functions),
        calls,
        list(item.ground_truth or ()),
        python_language(),
        item.category,
        CHECKER_MODEL,
    )
    if result["valid"]:
        return Verdict(True)
    errors = result.get("error", [])
    return Verdict(False, result.get("error_type"), tuple(str(e) for e in errors))


def _first_value(values: list[Any]) -> Any:
    """The first acceptable value that is not ``""`` (BFCL's mark of an optional argument), or ``""``."""
    return next((value for value in values if value != ""), "")


def _is_answer_dict(value: Any) -> bool:
    """Whether ``value`` is a possible answer of a dict parameter (each key -> acceptable values)."""
    return isinstance(value, dict) and all(isinstance(v, list) for v in value.values())


def _concrete(value: Any) -> Any:
    """A possible-answer value as a model would write it: a dict parameter's acceptable values per key
    (also in lists of such dicts) are resolved recursively; keys that may be left out are."""
    if _is_answer_dict(value):
        return {key: _concrete(_first_value(v)) for key, v in value.items() if "" not in v}
    if isinstance(value, list) and value and all(_is_answer_dict(item) for item in value):
        return [_concrete(item) for item in value]
    return value


def reference_reply(item: BfclItem) -> str:
    """A Hermes reply built from ``item``'s possible answers: an argument that may be left out (``""``
    among its acceptable values) and is not required is left out; any other takes its first acceptable
    value that is not ``""``. The tests use it to check the scoring end to end."""
    required = {f["name"]: set(f.get("parameters", {}).get("required", [])) for f in item.functions}
    calls = []
    for answer in item.ground_truth or ():
        ((name, parameters),) = answer.items()
        needed = required.get(name, set())
        arguments = {
            key: _concrete(_first_value(values))
            for key, values in parameters.items()
            if key in needed or "" not in values
        }
        calls.append(ToolCall(tool_name(name), arguments).to_text())
    return "\n".join(calls)
