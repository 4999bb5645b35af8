"""A calculator tool: arithmetic on numbers, evaluated by walking the expression's syntax tree.

Only number literals, ``+ - * / // % **``, unary ``+``/``-`` and parentheses are accepted; names,
calls, attributes and every other construct are refused, so nothing but arithmetic can run. Sizes are
bounded: the expression text, exponents, and integer results (a result above ``10**MAX_DIGITS`` is an
error rather than a slow computation).
"""

from __future__ import annotations

import ast
import math
import operator
from typing import Any, Union

from atroposlib.envs.tools.base import ToolError

Number = Union[int, float]

MAX_EXPRESSION_CHARS = 1000
MAX_DIGITS = 300
_LIMIT = 10**MAX_DIGITS

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}


def _check_size(value: Number) -> Number:
    if isinstance(value, float) and not math.isfinite(value):
        raise ToolError("the result is not a finite number")
    if isinstance(value, int) and abs(value) >= _LIMIT:
        raise ToolError(f"the result has more than {MAX_DIGITS} digits")
    return value


def _power(base: Number, exponent: Number) -> Number:
    if abs(exponent) > 10_000:
        raise ToolError("the exponent is too large")
    if base != 0 and abs(base) != 1 and abs(exponent) * math.log10(abs(base)) > MAX_DIGITS:
        raise ToolError(f"the result has more than {MAX_DIGITS} digits")
    if base == 0 and exponent < 0:
        raise ToolError("division by zero")
    result = base**exponent
    if isinstance(result, complex):
        raise ToolError("the result is not a real number")
    return result


def _evaluate(node: ast.AST) -> Number:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant):
        if isinstance(node.value, bool) or not isinstance(node.value, (int, float)):
            raise ToolError(f"{node.value!r} is not a number")
        return node.value
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.BinOp):
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow):
            return _check_size(_power(left, right))
        op = _BINARY.get(type(node.op))
        if op is None:
            hint = " (use ** for powers)" if isinstance(node.op, ast.BitXor) else ""
            raise ToolError(f"operator {type(node.op).__name__} is not supported{hint}")
        try:
            return _check_size(op(left, right))
        except ZeroDivisionError:
            raise ToolError("division by zero") from None
        except OverflowError:
            raise ToolError("the result is too large") from None
    raise ToolError(f"{type(node).__name__} is not allowed: only numbers and + - * / // % ** ( )")


def evaluate_expression(expression: str) -> Number:
    """The value of an arithmetic ``expression``; :class:`ToolError` saying why when it has none."""
    if not isinstance(expression, str) or not expression.strip():
        raise ToolError("the expression is empty")
    if len(expression) > MAX_EXPRESSION_CHARS:
        raise ToolError(f"the expression is longer than {MAX_EXPRESSION_CHARS} characters")
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as exc:
        raise ToolError(f"invalid expression: {exc.msg}") from None
    try:
        return _evaluate(tree)
    except RecursionError:
        raise ToolError("the expression is nested too deeply") from None


def format_number(value: Number) -> str:
    """``value`` as text: integers exactly, floats by ``repr`` (shortest round-tripping form)."""
    return str(value) if isinstance(value, int) else repr(value)


class CalculatorTool:
    """The ``calculator`` tool: ``{"expression": "3 * (4 + 5) / 2"}`` -> ``"13.5"``."""

    name = "calculator"
    description = (
        "Evaluate an arithmetic expression exactly. Supports numbers, + - * / // % ** and parentheses; "
        "no variables or functions."
    )
    parameters: dict[str, Any] = {
        "type": "object",
        "properties": {
            "expression": {"type": "string", "description": "the expression, e.g. (12 + 30) * 1.5"}
        },
        "required": ["expression"],
        "additionalProperties": False,
    }

    async def call(self, arguments: dict[str, Any]) -> str:
        return format_number(evaluate_expression(arguments["expression"]))
