"""Scoring a T1 turn: the model's tool calls against the calls of the ground-truth plan.

A ground-truth plan is Python code (``hotels = search_hotels(city="Austin", ...)``); :func:`plan_calls`
reads every call of a T1 tool in it, in source order (nested calls included), with its arguments:
keyword arguments, and positional ones named by the tool's declared parameter order. A literal argument
(string, number, list, ...) must be matched by value; an argument that refers to a variable or an
expression (``prior_results=hotels``), and the free wording of ``seek_information``'s question and of
cache keys, only have to be present. Strings compare without case or
surrounding spaces, numbers by value.

:func:`score_turn` compares a reply's Hermes tool calls with the plan's: ``tool_call_f1`` (calls matched
with their arguments, each plan call by its own model call; extra model arguments allowed),
``tool_name_f1`` (tool names alone, as multisets) and ``reward``, their mean. A plan with no call wants a
reply with none (reward 1, else 0); a malformed reply (broken call JSON, unpaired tags, unclosed think
block) scores 0.
"""

from __future__ import annotations

import ast
from collections import Counter
from dataclasses import dataclass
from typing import Any, Optional

from atroposlib.utils.tool_calls import ToolCall, reply_tool_calls

try:
    from environments.t1_tool_planning.t1_tools import T1_TOOLS, TOOL_NAMES
except ModuleNotFoundError:  # run as a script: this folder is on the path
    from t1_tools import T1_TOOLS, TOOL_NAMES

_PARAMETERS = {t["function"]["name"]: list(t["function"]["parameters"]["properties"]) for t in T1_TOOLS}
#: Arguments whose wording is the model's own: only their presence is checked.
FREE_TEXT = {("seek_information", "question"), ("save_to_cache", "key"), ("get_results_from_cache", "key")}


class PlanError(ValueError):
    """A ground-truth plan that is not Python code."""


@dataclass(frozen=True)
class Reference:
    """An argument that names a variable or computes something: only its presence is checked."""

    source: str


@dataclass(frozen=True)
class PlanCall:
    """One tool call of a plan: the tool and its arguments (values or :class:`Reference`)."""

    name: str
    arguments: dict[str, Any]


def _value(node: ast.AST) -> Any:
    try:
        return ast.literal_eval(node)
    except (ValueError, SyntaxError, TypeError, MemoryError, RecursionError):
        return Reference(ast.unparse(node))


class _Calls(ast.NodeVisitor):
    def __init__(self) -> None:
        self.calls: list[PlanCall] = []

    def visit_Call(self, node: ast.Call) -> None:
        if isinstance(node.func, ast.Name) and node.func.id in TOOL_NAMES:
            names = _PARAMETERS[node.func.id]
            arguments = {names[i]: _value(a) for i, a in enumerate(node.args) if i < len(names)}
            arguments.update({k.arg: _value(k.value) for k in node.keywords if k.arg})
            for key in arguments:
                if (node.func.id, key) in FREE_TEXT:
                    arguments[key] = Reference(ast.unparse(node))
            self.calls.append(PlanCall(node.func.id, arguments))
        self.generic_visit(node)


def plan_calls(code: Optional[str]) -> list[PlanCall]:
    """The T1 tool calls of a plan in source order ([] for an empty plan); :class:`PlanError` when the plan
    is not Python."""
    if code is None or not str(code).strip():
        return []
    try:
        tree = ast.parse(str(code))
    except SyntaxError as exc:
        raise PlanError(f"the plan is not Python ({exc.msg}, line {exc.lineno})") from None
    visitor = _Calls()
    visitor.visit(tree)
    return visitor.calls


def _normal(value: Any) -> Any:
    if isinstance(value, str):
        return value.strip().lower()
    if isinstance(value, bool) or value is None:
        return value
    if isinstance(value, (int, float)):
        return float(value)
    if isinstance(value, (list, tuple)):
        return [_normal(v) for v in value]
    if isinstance(value, dict):
        return {str(k): _normal(v) for k, v in value.items()}
    return value


def _argument_matches(model: dict[str, Any], key: str, expected: Any) -> bool:
    if key not in model:
        return False
    return isinstance(expected, Reference) or _normal(model[key]) == _normal(expected)


def call_matches(made: ToolCall, planned: PlanCall) -> bool:
    """Same tool, and every planned argument present (literal ones with the planned value)."""
    return made.name == planned.name and all(
        _argument_matches(made.arguments, key, value) for key, value in planned.arguments.items()
    )


def _f1(matched: int, made: int, planned: int) -> float:
    if made == 0 and planned == 0:
        return 1.0
    if matched == 0:
        return 0.0
    precision, recall = matched / made, matched / planned
    return 2 * precision * recall / (precision + recall)


def score_turn(planned: list[PlanCall], reply: str) -> dict[str, float]:
    """``{"reward", "tool_call_f1", "tool_name_f1", "calls"}`` of ``reply`` against the plan's calls."""
    made = reply_tool_calls(reply)
    if made is None:
        return {"reward": 0.0, "tool_call_f1": 0.0, "tool_name_f1": 0.0, "calls": 0.0}
    free = list(made)
    matched = 0
    for want in planned:
        found = next((c for c in free if call_matches(c, want)), None)
        if found is not None:
            free.remove(found)
            matched += 1
    names = sum((Counter(c.name for c in made) & Counter(p.name for p in planned)).values())
    call_f1 = _f1(matched, len(made), len(planned))
    name_f1 = _f1(names, len(made), len(planned))
    return {
        "reward": (call_f1 + name_f1) / 2,
        "tool_call_f1": call_f1,
        "tool_name_f1": name_f1,
        "calls": float(len(made)),
    }
