"""Judged benchmarks against two scripted servers: the model under test and a scripted judge.

:func:`judged_evaluation` starts a scripted judge answering with ``judge(prompt_text, index)``, runs the
benchmark's ``evaluate`` (through :class:`~tests.helpers.single_turn_runs.ScriptedRuns`) with ``--judge.*``
flags pointing at it, and returns the evaluation and the judge's user prompts in the order received.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from atroposlib.testing.scripted_server import launch_scripted_server
from tests.helpers.single_turn_runs import Evaluation, ScriptedRuns, prompt_text


def judge_prompts(requests: Sequence[dict[str, Any]]) -> list[str]:
    """The last user message of every chat request a scripted server received."""
    return [prompt_text(r["body"]["messages"]) for r in requests if r["path"] == "/v1/chat/completions"]


def judged_evaluation(
    runs: ScriptedRuns,
    env: type,
    args: Sequence[Any],
    respond: Callable[[Any, int], str],
    judge: Callable[[str, int], str],
) -> tuple[Evaluation, list[str]]:
    """``evaluate`` ``env`` with ``respond`` as the model and ``judge`` (called with the judge prompt's user
    text) as the judge; returns the evaluation and the judge prompts it received."""
    with launch_scripted_server(respond=lambda prompt, index: judge(prompt_text(prompt), index)) as server:
        flags = ["--judge.base_url", server.base_url, "--judge.model_name", "scripted-judge",
                 "--judge.api_key", "x", "--env.retry_delay", "0"]  # fmt: skip
        run = runs.evaluation(env, [*args, *flags], respond, server_type=None)
        return run, judge_prompts(server.requests)
