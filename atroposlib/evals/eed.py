"""PHYBench's Expression Edit Distance (EED) score, from its definition (arXiv:2504.16074, section 3.2).

An answer and the gold answer, both LaTeX, are converted to sympy expressions and simplified. Equal
expressions score 100. Otherwise both become expression trees (numbers and symbols are leaves; sums,
products, powers and functions are inner nodes with their arguments as children) and the score follows the
tree edit distance ``d`` that turns the answer's tree into the gold's, relative to the gold tree's size
``n`` (its node count), ``r = d / n``::

    score = 100            if r == 0
            60 - 100 r     if 0 < r < 0.6
            0              otherwise

Inserting, deleting or relabelling a node costs 1. As in the paper, a whole subtree of ``s`` nodes may
also be inserted or deleted at once for ``min(s, 0.6 (s - 5) + 5)`` (a missing or extra term is one
mistake, not ``s``). The distance is Zhang and Shasha's algorithm with those two extra operations.

Reading LaTeX: a ``\\boxed{}`` is unwrapped, only the right-hand side of the last ``=`` (or ``\\approx``)
counts, and formatting (``\\left``, ``\\text{}``, ``\\mathrm{}``, ``\\displaystyle``, spacing, ``$``) is
dropped. Symbols keep their case (``R`` is not ``r``) and ``I`` is a symbol (a current), not the imaginary
unit. An answer that does not parse scores 0.

:func:`eed_score` runs in the calling process and may take unbounded time on hostile input;
:class:`EEDScorer` runs it in worker processes with a time limit (the pool of
:class:`atroposlib.utils.math_checking.MathChecker`), where a score that runs over is 0.
"""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from typing import Any, Optional

from atroposlib.utils.replies import boxed_answers

logger = logging.getLogger(__name__)

#: Score of a distance-0 (equivalent) answer, and the relative distance where the score reaches 0.
FULL_SCORE = 100.0
ZERO_AT = 0.6
#: Subtree operations: a subtree of ``s`` nodes costs ``min(s, SLOPE * (s - BAR) + BAR)``.
SUBTREE_BAR = 5
SUBTREE_SLOPE = 0.6


@dataclass(frozen=True)
class EEDResult:
    """An EED score with what it came from: ``relative_distance`` = ``distance / gold_size`` (0 for an
    equivalent answer; None where no distance was computed: the answer did not parse)."""

    score: float
    distance: Optional[float] = None
    gold_size: Optional[int] = None
    relative_distance: Optional[float] = None

    @property
    def equivalent(self) -> bool:
        return self.score == FULL_SCORE


ZERO = EEDResult(0.0)


# ------------------------------------------------------------------------------------------- trees


@dataclass
class Node:
    """An expression-tree node: ``kind`` is ``number``, ``symbol``, ``operator`` or ``function``."""

    kind: str
    label: str
    children: list[Node]

    def size(self) -> int:
        return 1 + sum(child.size() for child in self.children)


def expression_tree(expr: Any) -> Node:
    """The expression tree of a sympy expression (see the module docstring)."""
    import sympy

    if expr.is_Number or expr.is_NumberSymbol or expr in (sympy.oo, -sympy.oo, sympy.zoo, sympy.nan):
        return Node("number", str(expr), [])
    if expr.is_Symbol:
        return Node("symbol", str(expr), [])
    children = [expression_tree(arg) for arg in expr.args]
    if expr.is_Function:
        return Node("function", type(expr).__name__, children)
    if not children:
        return Node("symbol", str(expr), [])
    return Node("operator", type(expr).__name__, children)


def subtree_cost(size: int) -> float:
    """Cost of inserting or deleting a whole subtree of ``size`` nodes at once."""
    return min(float(size), SUBTREE_SLOPE * (size - SUBTREE_BAR) + SUBTREE_BAR)


class _Annotated:
    """A tree in postorder (1-based): nodes, leftmost leaf of each node, subtree sizes and keyroots."""

    def __init__(self, root: Node) -> None:
        self.nodes: list[Node] = [root]  # index 0 unused
        self.leftmost: list[int] = [0]
        self.sizes: list[int] = [0]

        def walk(node: Node) -> int:
            first = None
            for child in node.children:
                index = walk(child)
                first = self.leftmost[index] if first is None else first
            self.nodes.append(node)
            position = len(self.nodes) - 1
            self.leftmost.append(position if first is None else first)
            self.sizes.append(position - self.leftmost[position] + 1)
            return position

        walk(root)
        self.nodes[0] = root
        count = len(self.nodes) - 1
        highest = {self.leftmost[i]: i for i in range(1, count + 1)}  # the last (highest) wins
        self.keyroots = sorted(highest.values())
        self.count = count


def tree_edit_distance(source: Node, target: Node) -> float:
    """Edit distance from ``source`` to ``target``: unit node insertion, deletion and relabelling (0 for
    the same kind and label), plus whole-subtree insertion and deletion at :func:`subtree_cost`."""
    a, b = _Annotated(source), _Annotated(target)
    tree = [[0.0] * (b.count + 1) for _ in range(a.count + 1)]

    def relabel(i: int, j: int) -> float:
        x, y = a.nodes[i], b.nodes[j]
        return 0.0 if (x.kind, x.label) == (y.kind, y.label) else 1.0

    for x in a.keyroots:
        for y in b.keyroots:
            lx, ly = a.leftmost[x], b.leftmost[y]
            # forest[i][j]: distance between a's forest lx..i and b's forest ly..j (offset by lx-1, ly-1)
            rows, cols = x - lx + 2, y - ly + 2
            forest = [[0.0] * cols for _ in range(rows)]
            for i in range(lx, x + 1):
                fi = i - lx + 1
                li = a.leftmost[i] - lx
                forest[fi][0] = min(forest[fi - 1][0] + 1.0, forest[li][0] + subtree_cost(a.sizes[i]))
            for j in range(ly, y + 1):
                fj = j - ly + 1
                lj = b.leftmost[j] - ly
                forest[0][fj] = min(forest[0][fj - 1] + 1.0, forest[0][lj] + subtree_cost(b.sizes[j]))
            for i in range(lx, x + 1):
                fi = i - lx + 1
                li = a.leftmost[i] - lx
                delete_tree = subtree_cost(a.sizes[i])
                for j in range(ly, y + 1):
                    fj = j - ly + 1
                    lj = b.leftmost[j] - ly
                    best = min(
                        forest[fi - 1][fj] + 1.0,
                        forest[fi][fj - 1] + 1.0,
                        forest[li][fj] + delete_tree,
                        forest[fi][lj] + subtree_cost(b.sizes[j]),
                    )
                    if a.leftmost[i] == lx and b.leftmost[j] == ly:
                        best = min(best, forest[fi - 1][fj - 1] + relabel(i, j))
                        tree[i][j] = best
                    else:
                        best = min(best, forest[li][lj] + tree[i][j])
                    forest[fi][fj] = best
    return tree[a.count][b.count]


def score_from_distance(distance: float, gold_size: int) -> float:
    """The EED score of a tree edit ``distance`` to a gold tree of ``gold_size`` nodes."""
    if distance == 0:
        return FULL_SCORE
    return max(0.0, 100.0 * ZERO_AT - 100.0 * distance / gold_size)


# ------------------------------------------------------------------------------------------ LaTeX

_DROP = (
    "\\left", "\\right", "\\displaystyle", "\\Bigl", "\\Bigr", "\\bigl", "\\bigr", "\\biggl", "\\biggr",
    "\\Big", "\\big", "\\,", "\\;", "\\:", "\\!", "\\quad", "\\qquad", "$",
)  # fmt: skip
_UNWRAP = ("\\text", "\\mathrm", "\\mathbf", "\\boldsymbol", "\\mathit", "\\operatorname", "\\rm")
_RELATIONS = re.compile(r"=|\\approx|\\simeq|\\equiv")


def _unwrap(text: str, command: str) -> str:
    """``\\command{body}`` -> ``body`` everywhere (braces balanced)."""
    out, pos = [], 0
    pattern = re.compile(re.escape(command) + r"\s*\{")
    while True:
        match = pattern.search(text, pos)
        if match is None:
            out.append(text[pos:])
            return "".join(out)
        depth, end = 1, match.end()
        while end < len(text) and depth:
            depth += {"{": 1, "}": -1}.get(text[end], 0)
            end += 1
        out.append(text[pos : match.start()])
        out.append(text[match.end() : end - 1] if depth == 0 else text[match.end() :])
        pos = end


def _top_level_split(text: str) -> str:
    """The part after the last ``=`` / ``\\approx`` that is not inside braces or brackets."""
    depth, cut = 0, 0
    for match in re.finditer(r"[{}()\[\]]|" + _RELATIONS.pattern, text):
        token = match.group(0)
        if token in "{([":
            depth += 1
        elif token in "})]":
            depth -= 1
        elif depth == 0:
            cut = match.end()
    return text[cut:]


def clean_latex(latex: str) -> str:
    """The expression part of a LaTeX answer (see the module docstring)."""
    text = str(latex).strip()
    boxed = boxed_answers(text)
    if boxed:
        text = boxed[-1]
    text = text.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac")
    for command in _UNWRAP:
        text = _unwrap(text, command)
    for token in _DROP:
        text = text.replace(token, " ")
    return " ".join(_top_level_split(text).split()).rstrip(".").strip()


def latex_to_sympy(latex: str) -> Any:
    """The sympy expression of a LaTeX answer (cleaned by :func:`clean_latex`).

    Raises ValueError when it is empty or does not parse to an expression.
    """
    import sympy
    from latex2sympy2_extended import latex2sympy
    from latex2sympy2_extended.latex2sympy2 import ConversionConfig, NormalizationConfig

    text = clean_latex(latex)
    if not text:
        raise ValueError("empty expression")
    expr = latex2sympy(
        text,
        normalization_config=NormalizationConfig(
            basic_latex=True, units=False, malformed_operators=False, nits=False, boxed="all", equations=False
        ),
        conversion_config=ConversionConfig(
            interpret_as_mixed_fractions=False,
            interpret_simple_eq_as_assignment=False,
            interpret_contains_as_eq=True,
            lowercase_symbols=False,
        ),
    )
    if not isinstance(expr, sympy.Expr):
        raise ValueError(f"not an expression: {type(expr).__name__}")
    return expr.subs(sympy.I, sympy.Symbol("I"))


def _simplified(expr: Any) -> Any:
    import sympy

    positive, back = sympy.posify(expr)
    return sympy.simplify(positive).subs(back)


def eed_score(gold: str, answer: Optional[str]) -> EEDResult:
    """The EED score of LaTeX ``answer`` against LaTeX ``gold`` (see the module docstring).

    0 when the answer is missing or does not parse; raises ValueError when the gold does not parse.
    """
    import sympy

    gold_expr = _simplified(latex_to_sympy(gold))
    if answer is None or not str(answer).strip():
        return ZERO
    try:
        answer_expr = _simplified(latex_to_sympy(answer))
    except Exception:  # noqa: BLE001 - an answer that does not parse scores 0
        return ZERO
    gold_tree = expression_tree(gold_expr)
    gold_size = gold_tree.size()
    try:
        difference = sympy.simplify(sympy.expand(gold_expr - answer_expr))
    except Exception:  # noqa: BLE001 - a difference sympy cannot form: compare the trees
        difference = None
    if gold_expr == answer_expr or difference == 0:
        return EEDResult(FULL_SCORE, 0.0, gold_size, 0.0)
    distance = tree_edit_distance(expression_tree(answer_expr), gold_tree)
    return EEDResult(score_from_distance(distance, gold_size), distance, gold_size, distance / gold_size)


def _score_fields(
    gold: str, answer: Optional[str]
) -> tuple[float, Optional[float], Optional[int], Optional[float]]:
    result = eed_score(gold, answer)
    return result.score, result.distance, result.gold_size, result.relative_distance


class EEDScorer:
    """:func:`eed_score` in worker processes, ``timeout_s`` seconds per score (a score that runs over, or
    a gold answer that does not parse, is :data:`ZERO` and counted in :attr:`timeouts` /
    :attr:`failures`)."""

    def __init__(self, timeout_s: float = 20.0, workers: Optional[int] = None) -> None:
        from atroposlib.utils.math_checking import MathChecker

        self._pool = MathChecker(timeout_s=timeout_s, workers=workers)
        self.timeouts = 0
        self.failures = 0

    async def score(self, gold: str, answer: Optional[str]) -> EEDResult:
        import asyncio

        if answer is None or not str(answer).strip():
            return ZERO
        pool = self._pool._ensure_pool()
        future = pool.schedule(_score_fields, args=(gold, answer), timeout=self._pool.timeout_s)
        try:
            return EEDResult(*await asyncio.wrap_future(future))
        except TimeoutError:
            self.timeouts += 1
            logger.warning("EED score ran over %.1f s and is 0 (answer %.80r)", self._pool.timeout_s, answer)
        except Exception as exc:  # noqa: BLE001 - a worker that fails or dies scores 0
            self.failures += 1
            logger.warning("EED score failed (%s: %s) and is 0", type(exc).__name__, exc)
        return ZERO

    def close(self) -> None:
        self._pool.close()
