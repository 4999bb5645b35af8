"""Helpers for the community environments' tests: command-line ``--env.*`` flags from values, ``process`` and
``evaluate`` on a local file, and a set-up on local rows that must stop at a bad row."""

from __future__ import annotations

import itertools
import re
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

from atroposlib.envs.data_loading import DatasetError
from tests.helpers.single_turn_runs import (
    Evaluation,
    Responder,
    ScriptedRuns,
    offline_env,
    setup_failure,
    write_jsonl,
)


def env_flags(**values: Any) -> list[str]:
    """``--env.<name> <value>`` for each keyword, in order (values as strings), e.g.
    ``env_flags(dataset_path=SAMPLE, group_size=2)`` for ``process``/``evaluate`` arguments."""
    flags: list[str] = []
    for name, value in values.items():
        flags += [f"--env.{name}", str(value)]
    return flags


async def bad_rows_error(
    env_cls: type, tokenizer_dir: Any, tmp_path: Path, rows: list[dict[str, Any]], match: str
) -> DatasetError:
    """Set up ``env_cls`` on ``rows`` written to a local file: the set-up must stop with a
    :class:`DatasetError` matching ``match`` that names the file; return the error."""
    path = write_jsonl(tmp_path / "rows.jsonl", rows)
    error = await setup_failure(offline_env(env_cls, tokenizer_dir, dataset_path=path), match)
    assert path in str(error)
    return error


def process_local(
    scripted: ScriptedRuns, env_cls: type, sample: Any, respond: Responder, **values: Any
) -> list:
    """The groups ``process`` of ``env_cls`` writes with ``--env.dataset_path sample`` and ``--env.*``
    ``values``, against the scripted server answering ``respond``."""
    return scripted.process(env_cls, env_flags(dataset_path=sample, **values), respond)


def evaluate_local(
    scripted: ScriptedRuns, env_cls: type, sample: Any, respond: Responder, **values: Any
) -> Evaluation:
    """``evaluate`` of ``env_cls`` with ``sample`` as both its training and evaluation file and ``--env.*``
    ``values``, against the scripted server answering ``respond``."""
    return scripted.evaluation(
        env_cls, env_flags(dataset_path=sample, eval_dataset_path=sample, **values), respond
    )


def always(reply: str) -> Responder:
    """A scripted-server responder answering every prompt with ``reply``."""
    return lambda prompt, index: reply


_EPISODE = re.compile(r"<think>episode (\d+)</think>")


def numbered_episodes(act: Callable[[Any, bool], str], spoil_every: int = 0) -> Responder:
    """A scripted-server responder for multi-turn episodes that tells them apart: each reply opens with
    ``<think>episode k</think>``, ``k`` read from the conversation so far, or the next number (in order of
    arrival) for a new conversation; the rest is ``act(prompt, spoiled)``, ``spoiled`` when ``spoil_every``
    and ``k % spoil_every == 1`` (so such episodes can play a bad move)."""
    counter = itertools.count()
    lock = threading.Lock()

    def respond(prompt: Any, index: int) -> str:
        found = _EPISODE.search(str(prompt))
        with lock:
            episode = int(found.group(1)) if found else next(counter)
        spoiled = bool(spoil_every) and episode % spoil_every == 1
        return f"<think>episode {episode}</think>{act(prompt, spoiled)}"

    return respond
