"""A scripted-server responder for the recorded-conversation tool-use environments' tests."""

from __future__ import annotations

import itertools
import json
import re
from collections.abc import Callable, Sequence
from typing import Any

from tests.helpers.multi_turn_runs import tool_call


def recorded_calls(row: dict[str, Any]) -> list[dict[str, Any]]:
    """The calls of a conversation's tool-calling turns, one per turn, in order."""
    calls = []
    for turn in row["conversations"]:
        if "<tool_call>" in turn["value"]:
            calls.append(json.loads(turn["value"].split("<tool_call>")[1].split("</tool_call>")[0]))
    return calls


def replayer(rows: Sequence[dict[str, Any]]) -> Callable[[Any, int], str]:
    """Even episodes (in order of arrival) make each turn's recorded call; odd ones send every argument
    of it as the string ``"wrong"``. A turn after the last recorded call is answered with a short summary."""
    counter = itertools.count()
    scripts = {row["conversations"][1]["value"]: recorded_calls(row) for row in rows}

    def respond(prompt: Any, index: int) -> str:
        text = str(prompt)
        question = next(q for q in scripts if q in text)
        marker = re.search(r"<think>episode (\d+)</think>", text)
        episode = int(marker.group(1)) if marker else next(counter)
        turn = text.count("<|im_start|>assistant") - 1
        if turn >= len(scripts[question]):  # a narration turn after the last call
            return f"<think>episode {episode}</think>That is all the tools had to say."
        call = scripts[question][turn]
        arguments = {key: "wrong" for key in call["arguments"]} if episode % 2 else call["arguments"]
        return f"<think>episode {episode}</think>" + tool_call(call["name"], **arguments)

    return respond
