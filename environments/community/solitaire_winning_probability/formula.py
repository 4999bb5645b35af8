"""Evaluating a probability formula safely: numbers, ``+ - * / ^ **``, parentheses, ``factorial(n)``,
``C(n, r)`` / ``comb``, ``P(n, r)`` / ``perm`` and ``\\frac{a}{b}``, parsed into a syntax tree and computed
exactly with fractions. Nothing else (names, attributes, calls to anything but those functions) is allowed,
and sizes are bounded, so a formula cannot run code or exhaust the machine.
"""

from __future__ import annotations

import ast
import math
import re
from fractions import Fraction
from typing import Optional

MAX_INT_ARG = 1000  # largest argument of factorial / C / P
MAX_EXPONENT = 64
MAX_BITS = 20_000  # largest power computed, in bits
_FUNCTIONS = {
    "factorial": (1, lambda n: math.factorial(n)),
    "C": (2, math.comb),
    "comb": (2, math.comb),
    "P": (2, math.perm),
    "perm": (2, math.perm),
}
_FRAC = re.compile(r"\\[dt]?frac\s*\{([^{}]*)\}\s*\{([^{}]*)\}")


class FormulaError(ValueError):
    """A formula that cannot be evaluated (syntax, a disallowed construct, a size limit, division by zero)."""


def _integer(value: Fraction) -> int:
    if value.denominator != 1 or not 0 <= value <= MAX_INT_ARG:
        raise FormulaError(f"function arguments must be whole numbers from 0 to {MAX_INT_ARG}")
    return int(value)


def _eval(node: ast.AST) -> Fraction:
    if isinstance(node, ast.Expression):
        return _eval(node.body)
    if (
        isinstance(node, ast.Constant)
        and isinstance(node.value, (int, float))
        and not isinstance(node.value, bool)
    ):
        return Fraction(str(node.value)) if isinstance(node.value, float) else Fraction(node.value)
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.UAdd, ast.USub)):
        value = _eval(node.operand)
        return value if isinstance(node.op, ast.UAdd) else -value
    if isinstance(node, ast.BinOp):
        left, right = _eval(node.left), _eval(node.right)
        if isinstance(node.op, ast.Add):
            return left + right
        if isinstance(node.op, ast.Sub):
            return left - right
        if isinstance(node.op, ast.Mult):
            return left * right
        if isinstance(node.op, ast.Div):
            if right == 0:
                raise FormulaError("division by zero")
            return left / right
        if isinstance(node.op, ast.Pow):
            if right.denominator != 1 or abs(right) > MAX_EXPONENT or (left == 0 and right < 0):
                raise FormulaError(f"exponents must be whole numbers up to {MAX_EXPONENT}")
            size = max(left.numerator.bit_length(), left.denominator.bit_length()) * abs(int(right))
            if size > MAX_BITS:
                raise FormulaError("the number would be too large")
            return left ** int(right)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and not node.keywords:
        arity, function = _FUNCTIONS.get(node.func.id, (None, None))
        if function is not None and len(node.args) == arity:
            return Fraction(function(*(_integer(_eval(a)) for a in node.args)))
    raise FormulaError(f"not allowed in a formula: {ast.dump(node)[:60]}")


def evaluate_formula(text: str) -> Optional[Fraction]:
    """The exact value of ``text``, or None when it is empty or not a valid formula."""
    text = text.strip().strip("$").strip()
    for _ in range(10):  # nested \frac, innermost first
        text, count = _FRAC.subn(r"((\1)/(\2))", text)
        if not count:
            break
    text = (
        text.replace("\\cdot", "*")
        .replace("\\times", "*")
        .replace("^", "**")
        .replace("{", "(")
        .replace("}", ")")
    )
    if not text or len(text) > 500:
        return None
    try:
        return _eval(ast.parse(text, mode="eval"))
    except (SyntaxError, FormulaError, ValueError, RecursionError, OverflowError, ZeroDivisionError):
        return None
