"""The demo's task, behind a small declared interface: :class:`DemoTask`.

The demo needs four things from a task: the environment script to serve (and its teacher-distillation
variant), supervised warm-start examples from the task's training split, the held-out items, and the scorer
that marks a reply right or wrong. A task is chosen by name or by ``module:factory`` / ``path.py:factory``
(:func:`load_task`); the factory is called with the task settings (a JSON-able mapping that also keys the
warm-start cache). The built-in ``arithmetic`` task (:mod:`example_trainer.demo.arithmetic_task`) reads the
arithmetic environment's file at run time, so the demo imports nothing from ``environments/`` statically.
"""

from __future__ import annotations

import importlib
import importlib.util
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Protocol, runtime_checkable

REPO_ROOT = Path(__file__).resolve().parents[2]
#: Messages in the chat format (``{"role": ..., "content": ...}``).
Messages = list[dict[str, str]]
#: Task names the demo knows, with the ``module:factory`` that builds each.
BUILTIN_TASKS = {"arithmetic": "example_trainer.demo.arithmetic_task:ArithmeticDemoTask"}


@dataclass(frozen=True)
class HeldoutItem:
    """One held-out problem: its question text, the gold answer and the prompt the model is given."""

    question: str
    answer: Any
    messages: Messages


@runtime_checkable
class DemoTask(Protocol):
    """What the demo reads from its task."""

    #: The settings the task was built from (JSON-able); they identify a warm start in the cache.
    settings: Mapping[str, Any]
    #: The environment served during GRPO (``python <env_script> serve ...``).
    env_script: Path
    #: The same task with groups scored by a teacher too (``--teacher-model``); None: not offered.
    distill_env_script: Path | None

    def env_flags(self) -> list[str]:
        """The environment's own ``--env.*`` flags for these settings (the task's difficulty, seed, ...)."""
        ...

    def sft_examples(self, n: int) -> Iterator[tuple[Messages, str]]:
        """``n`` supervised examples ``(prompt messages, answer text)`` from the training split (never a
        held-out item)."""
        ...

    def heldout(self) -> Sequence[HeldoutItem]:
        """The held-out evaluation items, in a fixed order."""
        ...

    def score(self, reply: str, answer: Any) -> float:
        """1.0 for a right reply, 0.0 for a wrong one (the environment's own reward)."""
        ...


def load_task(spec: str, settings: Mapping[str, Any]) -> DemoTask:
    """The task named by ``spec`` built from ``settings``.

    ``spec``: a name of :data:`BUILTIN_TASKS`, ``package.module:factory`` or ``path/to/file.py:factory``.
    Raises ``ValueError`` for a spec of another form or a factory whose result lacks the interface.
    """
    target = BUILTIN_TASKS.get(spec, spec)
    where, sep, factory_name = target.rpartition(":")
    if not sep or not where or not factory_name:
        raise ValueError(f"unknown task {spec!r}: give one of {sorted(BUILTIN_TASKS)} or module:factory")
    module = load_module_file(Path(where)) if where.endswith(".py") else importlib.import_module(where)
    task = getattr(module, factory_name)(**dict(settings))
    if not isinstance(task, DemoTask):
        raise ValueError(f"{target} did not build a DemoTask (it lacks part of the interface)")
    return task


def load_module_file(path: Path, name: str | None = None) -> ModuleType:
    """The module in the Python file ``path`` (relative paths: to the repository root), imported once.

    ``name`` defaults to its dotted name under the repository root (``environments.arithmetic_server``),
    so that the module's own imports and pickling see one module object."""
    path = path if path.is_absolute() else REPO_ROOT / path
    if name is None:
        try:
            name = ".".join(path.resolve().relative_to(REPO_ROOT).with_suffix("").parts)
        except ValueError:
            name = path.stem
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    if spec is None or spec.loader is None:
        raise ValueError(f"cannot import {path}")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module
