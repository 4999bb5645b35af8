"""The demo's built-in task: integer arithmetic, served by ``environments/arithmetic_server.py``.

The problems, the training/held-out split and the scorer are the environment's own (read from its file
at run time, :func:`example_trainer.demo.task.load_module_file`), so the demo measures exactly what the
environment rewards.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

from example_trainer.demo.task import REPO_ROOT, DemoTask, HeldoutItem, Messages, load_module_file

ENV_SCRIPT = REPO_ROOT / "environments" / "arithmetic_server.py"
#: The same task, groups scored by a teacher too (``--teacher-model``).
DISTILL_ENV_SCRIPT = REPO_ROOT / "environments" / "arithmetic_server_teacher_distill.py"


def environment_module() -> Any:
    """The arithmetic environment's module (``ArithmeticTask``, ``sft_examples``, ``score_completion``)."""
    return load_module_file(ENV_SCRIPT)


class ArithmeticDemoTask:
    """:class:`~example_trainer.demo.task.DemoTask` for the arithmetic environment.

    The settings are ``ArithmeticTask`` arguments (``min_digits``, ``max_digits``, ``operations``, ``seed``,
    ``eval_size``), the same for the warm start, the environment and the evaluation, so the held-out
    split is never trained on. Raises ``ValueError`` for settings the environment rejects.
    """

    env_script: Path = ENV_SCRIPT
    distill_env_script: Path | None = DISTILL_ENV_SCRIPT

    def __init__(self, **settings: Any) -> None:
        self.settings = dict(settings)
        self._env = environment_module()
        self._problems = self._env.ArithmeticTask(**self.settings)

    def env_flags(self) -> list[str]:
        flags = []
        for name, value in self.settings.items():
            text = json.dumps(list(value)) if isinstance(value, list | tuple) else str(value)
            flags += [f"--env.{name}", text]
        return flags

    def sft_examples(self, n: int) -> Iterator[tuple[Messages, str]]:
        return self._env.sft_examples(n, **self.settings)

    def heldout(self) -> Sequence[HeldoutItem]:
        task = self._problems
        return [HeldoutItem(p.question, p.answer, task.prompt_messages(p)) for p in task.eval_problems]

    def score(self, reply: str, answer: Any) -> float:
        return float(self._env.score_completion(reply, answer))

    @classmethod
    def from_problems(cls, problems: Any) -> ArithmeticDemoTask:
        """The demo task over an existing ``ArithmeticTask`` of the environment module."""
        task = cls.__new__(cls)
        task.settings = {
            "min_digits": problems.min_digits,
            "max_digits": problems.max_digits,
            "operations": list(problems.operations),
            "seed": problems.seed,
            "eval_size": len(problems.eval_problems),
        }
        task._env = environment_module()
        task._problems = problems
        return task


def as_demo_task(task: Any) -> DemoTask:
    """``task`` as a :class:`DemoTask`. compat: callers may pass the arithmetic task's settings (a mapping)
    or the environment's ``ArithmeticTask`` object instead."""
    if isinstance(task, DemoTask):
        return task
    if isinstance(task, Mapping):
        return ArithmeticDemoTask(**task)
    if hasattr(task, "eval_problems") and hasattr(task, "prompt_messages"):
        return ArithmeticDemoTask.from_problems(task)
    raise TypeError(f"not a demo task: {task!r}")
