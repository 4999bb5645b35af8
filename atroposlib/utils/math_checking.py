"""Checking math answers with ``math_verify`` in worker processes, each check under a time limit.

Parsing LaTeX into sympy and comparing expressions can take unbounded time or memory on hostile input
(``9^{9^{9^{9}}}`` never finishes), and ``math_verify``'s own timeouts rely on ``SIGALRM``, which only works
in a process's main thread. :class:`MathChecker` therefore runs every check in a pool of worker processes
(``pebble``): a check that exceeds ``timeout_s`` seconds of run time scores as wrong, its worker is killed
and replaced, and the caller's event loop only ever awaits a future, so it never stalls. The pool is
created on the first check and reused; :meth:`MathChecker.close` (also run at interpreter exit) stops it.

Equivalent forms count as equal: ``0.5`` = ``\\frac{1}{2}``, ``\\sqrt{8}`` = ``2\\sqrt{2}``,
``(x+1)^2`` = ``x^2+2x+1``, ``x = 3`` = ``3``, ``14/3`` = ``\\dfrac{14}{3}``, sets and intervals by value.

Which part of a reply is the answer is the caller's business (:func:`reply_answers` reads the boxed
convention of :mod:`atroposlib.utils.replies`); the checker compares LaTeX strings.
"""

from __future__ import annotations

import asyncio
import atexit
import logging
import multiprocessing
import os
import re
import signal
from collections.abc import Callable, Sequence
from typing import Any, Optional

from pebble import ProcessExpired, ProcessPool

from atroposlib.utils.replies import answer_section, boxed_answers

logger = logging.getLogger(__name__)

#: Seconds one check may run before it scores as wrong and its worker is replaced.
DEFAULT_TIMEOUT_S = 5.0
#: Checks a worker runs before it is replaced (sympy caches grow without bound).
TASKS_PER_WORKER = 1000


def gold_latex(answer: Any) -> str:
    """A data set's gold answer as LaTeX: the last ``\\boxed{}`` content when the answer is boxed,
    integral floats (``27.0`` from numeric columns) as integers, anything else as its stripped string."""
    if isinstance(answer, float) and answer.is_integer():
        return str(int(answer))
    text = str(answer).strip()
    boxed = boxed_answers(text)
    return boxed[-1] if boxed else text


def reply_answers(reply: str) -> Optional[list[str]]:
    """The distinct ``\\boxed{}`` answers after a reply's reasoning (whitespace ignored), or None.

    None when the reasoning is malformed (an unclosed or repeated think block, see
    :func:`atroposlib.utils.replies.answer_section`) or no box after it holds an answer (an unboxed
    answer, or one only inside the think block). Several distinct entries are a hedge unless they are
    all equal in value, which :meth:`MathChecker.matches_all` decides.
    """
    section = answer_section(reply)
    if section is None:
        return None
    distinct: dict[str, str] = {}
    for answer in boxed_answers(section):
        if answer:
            distinct.setdefault(re.sub(r"\s+", "", answer), answer)
    return list(distinct.values()) or None


def answers_match(gold: str, answer: str) -> bool:
    """Whether LaTeX ``answer`` equals LaTeX ``gold`` by ``math_verify`` (parse both, then ``verify``).

    Runs in the calling process with ``math_verify``'s own timeouts off: call it through
    :class:`MathChecker`, which bounds its run time. False when either side does not parse.
    """
    from latex2sympy2_extended import NormalizationConfig
    from math_verify import LatexExtractionConfig, parse, verify

    gold_parsed = parse(
        f"\\boxed{{{gold}}}",
        extraction_config=[LatexExtractionConfig(boxed_match_priority=0)],
        extraction_mode="first_match",
        parsing_timeout=None,
    )
    if not gold_parsed:
        return False
    answer_parsed = parse(
        f"\\boxed{{{answer}}}",
        extraction_config=[
            LatexExtractionConfig(
                normalization_config=NormalizationConfig(
                    nits=False, malformed_operators=False, basic_latex=True, boxed="all", units=True
                ),
                boxed_match_priority=0,
                try_extract_without_anchor=False,
            )
        ],
        extraction_mode="first_match",
        parsing_timeout=None,
    )
    if not answer_parsed:
        return False
    return bool(verify(gold_parsed, answer_parsed, timeout_seconds=None))


def reply_extraction() -> list[Any]:
    """``math_verify`` extraction settings for a model's boxed answer: the boxed expression only (no
    fallback to unanchored text), LaTeX normalised (basic LaTeX, equations, units, every box) without
    repairing malformed operators or nits."""
    from latex2sympy2_extended import NormalizationConfig
    from math_verify import LatexExtractionConfig

    normalization = NormalizationConfig(
        nits=False, malformed_operators=False, basic_latex=True, equations=True, boxed="all", units=True
    )
    return [
        LatexExtractionConfig(
            normalization_config=normalization, boxed_match_priority=0, try_extract_without_anchor=False
        )
    ]


def _prepare_worker() -> None:
    # Ctrl-C belongs to the parent; a worker only stops when the pool stops or kills it.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    # Loaded before the first task so no check pays for the import; the disabled-timeout notices are
    # expected here (the pool enforces the limit).
    import math_verify  # noqa: F401

    logging.getLogger("math_verify").setLevel(logging.ERROR)
    # The first parse loads sympy's and the LaTeX parser's lazy parts (about a second, several under load):
    # pay it here, not inside the first check's time limit, where it would score a right answer as wrong.
    try:
        answers_match("\\frac{1}{2}", "0.5")
    except Exception:  # noqa: BLE001 - a failed warm-up only means the first check pays for it
        pass


def _default_context() -> Any:
    methods = multiprocessing.get_all_start_methods()
    # forkserver: workers fork from a clean single-threaded server (cheap replacements, no locks
    # inherited from the caller's threads); spawn where it does not exist.
    return multiprocessing.get_context("forkserver" if "forkserver" in methods else "spawn")


class MathChecker:
    """Compares answers with a gold answer in worker processes, ``timeout_s`` seconds per check.

    ``workers`` processes (default: up to 4, at most the CPU count) are started on the first check.
    ``match_fn(gold, answer) -> bool`` is the comparison (default :func:`answers_match`); it must be a
    picklable module-level function. A check that raises, runs out of time or loses its worker
    (killed, out of memory) scores False and is counted in :attr:`timeouts` / :attr:`failures`.
    """

    def __init__(
        self,
        timeout_s: float = DEFAULT_TIMEOUT_S,
        workers: Optional[int] = None,
        match_fn: Callable[[str, str], bool] = answers_match,
    ) -> None:
        if timeout_s <= 0:
            raise ValueError(f"timeout_s must be positive, got {timeout_s}")
        self.timeout_s = float(timeout_s)
        self.workers = workers or max(1, min(4, os.cpu_count() or 1))
        self.match_fn = match_fn
        self.timeouts = 0
        self.failures = 0
        self._pool: Optional[ProcessPool] = None
        self._stop_at_exit = False

    def _ensure_pool(self) -> ProcessPool:
        if self._pool is None or not self._pool.active:
            self._pool = ProcessPool(
                max_workers=self.workers,
                max_tasks=TASKS_PER_WORKER,
                initializer=_prepare_worker,
                context=_default_context(),
            )
            if not self._stop_at_exit:
                atexit.register(self.close)
                self._stop_at_exit = True
        return self._pool

    async def matches(self, gold: str, answer: Optional[str]) -> bool:
        """Whether ``answer`` equals ``gold``; False for a None answer, a failure or a timeout."""
        if answer is None:
            return False
        future = self._ensure_pool().schedule(self.match_fn, args=(gold, answer), timeout=self.timeout_s)
        try:
            return bool(await asyncio.wrap_future(future))
        except TimeoutError:
            self.timeouts += 1
            logger.warning(
                "math check ran over %.1f s and scores as wrong (answer %.80r)", self.timeout_s, answer
            )
        except ProcessExpired as exc:
            self.failures += 1
            logger.warning("math check worker died (%s); the answer scores as wrong", exc)
        except Exception as exc:  # noqa: BLE001 - any failure inside the check is a wrong answer
            self.failures += 1
            logger.warning("math check failed (%s: %s); the answer scores as wrong", type(exc).__name__, exc)
        return False

    async def matches_all(self, gold: str, answers: Optional[Sequence[str]]) -> bool:
        """Whether there is at least one answer and every one equals ``gold`` (boxes that differ in value
        are a hedge, boxes that only differ in form are one answer)."""
        if not answers:
            return False
        return all(await asyncio.gather(*(self.matches(gold, answer) for answer in answers)))

    async def matches_many(self, gold: str, answers: Sequence[Optional[str]]) -> list[bool]:
        """:meth:`matches` for each answer, run concurrently."""
        return list(await asyncio.gather(*(self.matches(gold, answer) for answer in answers)))

    def close(self) -> None:
        """Stop the workers (running checks are abandoned); the next check starts a new pool."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.stop()
            pool.join(timeout=10)
