"""The demo reaches its task through :class:`example_trainer.demo.task.DemoTask` only: the arithmetic task is
loaded by name from the environment's file, another task by ``path.py:factory``, and no module of
``example_trainer`` imports ``environments`` statically."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from example_trainer.demo.config import DemoConfig
from example_trainer.demo.heldout_eval import evaluate_heldout
from example_trainer.demo.task import REPO_ROOT, DemoTask, load_task

SETTINGS = {"min_digits": 1, "max_digits": 1, "operations": ["+", "-"], "seed": 5, "eval_size": 6}


def test_no_module_of_example_trainer_imports_environments():
    offenders = []
    for path in sorted((REPO_ROOT / "example_trainer").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            offenders += [
                f"{path}: {n}" for n in names if n == "environments" or n.startswith("environments.")
            ]
    assert offenders == []


def test_the_arithmetic_task_is_the_environments_own():
    task = load_task("arithmetic", SETTINGS)
    assert isinstance(task, DemoTask)
    assert task.env_script == REPO_ROOT / "environments" / "arithmetic_server.py"
    assert task.distill_env_script.is_file()
    assert task.settings == SETTINGS
    flags = task.env_flags()
    assert dict(zip(flags[::2], flags[1::2], strict=True)) == {
        "--env.min_digits": "1", "--env.max_digits": "1", "--env.operations": json.dumps(["+", "-"]),
        "--env.seed": "5", "--env.eval_size": "6",
    }  # fmt: skip
    items = task.heldout()
    assert len(items) == 6 and all(item.messages[-1]["content"] == item.question for item in items)
    questions = {item.question for item in items}
    trained = [messages[-1]["content"] for messages, _ in task.sft_examples(200)]
    assert questions.isdisjoint(trained)  # the held-out split is never a warm-start example
    first = items[0]
    assert task.score(f"\\boxed{{{first.answer}}}", first.answer) == 1.0
    assert task.score(f"\\boxed{{{first.answer + 1}}}", first.answer) == 0.0
    assert DemoConfig(**{k: v for k, v in SETTINGS.items()}).load_task().settings == SETTINGS


class _Echo:
    """A task whose right answer is the question itself."""

    env_script = Path("echo_server.py")
    distill_env_script = None

    def __init__(self, **settings):
        self.settings = settings

    def env_flags(self):
        return []

    def sft_examples(self, n):
        return iter([])

    def heldout(self):
        from example_trainer.demo.task import HeldoutItem

        return [HeldoutItem(q, q, [{"role": "user", "content": q}]) for q in ("a", "b", "c")]

    def score(self, reply, answer):
        return float(reply == answer)


def test_another_task_is_loaded_from_its_file_and_evaluated_with_its_scorer(tmp_path, monkeypatch):
    from example_trainer.demo import heldout_eval

    module = tmp_path / "echo_task.py"
    module.write_text(
        "from tests.example_trainer.demo.test_demo_task import _Echo\n"
        "def build(**settings):\n    return _Echo(**settings)\n"
    )
    task = load_task(f"{module}:build", {"level": 2})
    assert isinstance(task, DemoTask) and task.settings == {"level": 2}
    replies = iter(["a", "x", "c"])  # what the "model" answers to the three held-out items
    monkeypatch.setattr(
        heldout_eval, "chat_replies", lambda model, tok, prompts, **kw: [next(replies) for _ in prompts]
    )
    result = evaluate_heldout(object(), None, task)
    assert (result.correct, result.total) == (2, 3)
    assert [s.correct for s in result.samples] == [True, False, True]


def test_a_spec_that_names_no_task_is_refused():
    with pytest.raises(ValueError, match="unknown task"):
        load_task("sudoku", {})
