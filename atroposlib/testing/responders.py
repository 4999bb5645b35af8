"""Scripted answers for ``atroposlib.testing.scripted_server`` (``--respond-fn module:function``).

:func:`arithmetic_half_right` answers the arithmetic environment (``environments/arithmetic_server.py``)
without a model: the right number for even choice indices and a wrong one for odd ones, so every group
has differing scores and reaches the trainer. The SLURM scripts' CPU configuration uses it.
"""

from __future__ import annotations

import ast
import operator
import re
from typing import Any

_QUESTION = re.compile(r"What is ([-+*0-9 ]+)\?")
_OPS = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul}


def _last_text(prompt: Any) -> str:
    if isinstance(prompt, list):
        for message in reversed(prompt):
            content = message.get("content") if isinstance(message, dict) else None
            if isinstance(content, str) and content:
                return content
        return ""
    return str(prompt)


def evaluate_expression(expression: str) -> int:
    """Value of an integer expression of ``+``, ``-``, ``*`` (usual precedence).

    Raises ``ValueError`` for anything else (names, division, powers, calls).
    """

    def walk(node: ast.AST) -> int:
        if isinstance(node, ast.Expression):
            return walk(node.body)
        if isinstance(node, ast.Constant) and type(node.value) is int:
            return node.value
        if isinstance(node, ast.BinOp) and type(node.op) in _OPS:
            return _OPS[type(node.op)](walk(node.left), walk(node.right))
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            return -walk(node.operand)
        raise ValueError(f"not an arithmetic expression: {expression!r}")

    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError:
        raise ValueError(f"not an arithmetic expression: {expression!r}") from None
    return walk(tree)


def arithmetic_half_right(prompt: Any, index: int) -> str:
    """The answer to the last "What is <expression>?" of ``prompt`` for even ``index``, the answer plus
    one for odd ``index``; ``"I don't know"`` when the prompt holds no such question."""
    matches = _QUESTION.findall(_last_text(prompt))
    if not matches:
        return "I don't know"
    try:
        answer = evaluate_expression(matches[-1])
    except ValueError:
        return "I don't know"
    return str(answer if index % 2 == 0 else answer + 1)
