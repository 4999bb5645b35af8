"""Reading an optimizer reply: the one code block that defines a ``torch.optim.Optimizer`` subclass.

After the optional ``<think>`` block (nothing inside it counts), the answer must hold exactly one fenced
Python code block (``python``/``py``/``python3`` or untagged) defining a class whose bases name
``Optimizer`` (``torch.optim.Optimizer``, ``optim.Optimizer`` or an imported ``Optimizer``), and exactly
one such class in it. Several such blocks or classes are a hedge; none, reasoning left open or a block
that is not Python is malformed.

The rules the prompt states are checked here, before anything runs: imports only from
:data:`ALLOWED_IMPORTS`; no use of torch's own optimizers (the update rule must be the reply's); no names
that reach the interpreter's frames, globals, builtins or the file system (:data:`FORBIDDEN_NAMES`,
dunder attributes other than :data:`ALLOWED_DUNDERS`).
"""

from __future__ import annotations

import ast
import re
from dataclasses import dataclass
from typing import Optional

from atroposlib.utils.replies import answer_section

_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.DOTALL)
_PYTHON_TAGS = ("python", "py", "python3", "")
#: top-level modules a reply may import
ALLOWED_IMPORTS = frozenset(
    {"torch", "math", "typing", "collections", "dataclasses", "functools", "itertools", "numbers", "abc",
     "copy", "operator", "__future__"}
)  # fmt: skip
#: torch.optim's own optimizers: a reply writes its update rule instead of delegating to one
BUILTIN_OPTIMIZERS = frozenset(
    {"SGD", "Adam", "AdamW", "Adamax", "Adagrad", "Adadelta", "Adafactor", "ASGD", "LBFGS", "NAdam", "RAdam",
     "RMSprop", "Rprop", "SparseAdam"}
)  # fmt: skip
#: names that reach frames, globals, builtins, other modules or files
FORBIDDEN_NAMES = frozenset(
    {"__import__", "eval", "exec", "compile", "open", "globals", "locals", "vars", "breakpoint", "input",
     "getattr", "setattr", "delattr", "__builtins__", "_getframe", "f_back", "f_locals", "f_globals",
     "gi_frame", "tb_frame", "cr_frame", "load", "save", "from_file"}
)  # fmt: skip
ALLOWED_DUNDERS = frozenset({"__init__", "__setstate__", "__getstate__", "__name__", "__class__", "__repr__"})


@dataclass(frozen=True)
class OptimizerReply:
    """The optimizer source of a reply and its class name, or why there is none (``code`` is None)."""

    code: Optional[str]
    class_name: Optional[str] = None
    problem: Optional[str] = None


def _names_optimizer(base: ast.expr) -> bool:
    return (isinstance(base, ast.Name) and base.id == "Optimizer") or (
        isinstance(base, ast.Attribute) and base.attr == "Optimizer"
    )


def optimizer_classes(tree: ast.Module) -> list[str]:
    """Names of the module-level classes of ``tree`` whose bases name ``Optimizer``."""
    return [
        node.name
        for node in tree.body
        if isinstance(node, ast.ClassDef) and any(_names_optimizer(b) for b in node.bases)
    ]


def rule_violation(tree: ast.Module) -> Optional[str]:
    """The first rule of the module docstring that ``tree`` breaks, or None."""
    for node in ast.walk(tree):
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or "."]
            for module in modules:
                if module.split(".")[0] not in ALLOWED_IMPORTS or (node_level(node) > 0):
                    return f"imports {module} (allowed: {', '.join(sorted(ALLOWED_IMPORTS))})"
            if isinstance(node, ast.ImportFrom):
                used = {a.name for a in node.names} & BUILTIN_OPTIMIZERS
                if used:
                    return f"uses torch's own optimizer {sorted(used)[0]}"
        name = (
            node.id if isinstance(node, ast.Name) else node.attr if isinstance(node, ast.Attribute) else None
        )
        if name is None:
            continue
        if name in BUILTIN_OPTIMIZERS:
            return f"uses torch's own optimizer {name}"
        if name in FORBIDDEN_NAMES or (name.startswith("__") and name not in ALLOWED_DUNDERS):
            return f"uses {name}, which the rules forbid"
    return None


def node_level(node: ast.stmt) -> int:
    """The relative level of an import (0 for absolute imports)."""
    return getattr(node, "level", 0) or 0


def extract_optimizer(reply: str) -> OptimizerReply:
    """The one optimizer block of ``reply``, checked against the rules (see the module docstring)."""
    section = answer_section(reply)
    if section is None:
        return OptimizerReply(None, problem="the <think> block is malformed")
    found: list[tuple[str, ast.Module]] = []
    for tag, body in _FENCE.findall(section):
        if tag.lower() not in _PYTHON_TAGS:
            continue
        try:
            tree = ast.parse(body)
        except SyntaxError as exc:
            if re.search(r"^\s*class\s+\w+\s*\([^)]*Optimizer", body, re.MULTILINE):
                return OptimizerReply(None, problem=f"the optimizer block is not valid Python: {exc.msg}")
            continue
        if optimizer_classes(tree):
            found.append((body, tree))
    if not found:
        return OptimizerReply(None, problem="no python code block defines a torch.optim.Optimizer subclass")
    if len(found) > 1:
        return OptimizerReply(None, problem=f"{len(found)} code blocks define optimizers (a hedge)")
    code, tree = found[0]
    classes = optimizer_classes(tree)
    if len(classes) > 1:
        return OptimizerReply(None, problem=f"{len(classes)} optimizer classes in the block (a hedge)")
    violation = rule_violation(tree)
    if violation:
        return OptimizerReply(None, classes[0], problem=violation)
    return OptimizerReply(code, classes[0])
