"""Scripted answers for trying docs/examples/first_env.py without a model.

``respond`` is a ``--respond-fn`` for ``python -m atroposlib.testing.scripted_server``: the right capital
(with a full stop) for even choice indices and a wrong city for odd ones, so every group has differing scores.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

CAPITALS = {
    row["country"]: row["capital"]
    for row in map(json.loads, Path(__file__).with_name("capitals.jsonl").read_text().splitlines())
}


def respond(prompt: Any, index: int) -> str:
    """Answer the last "What is the capital of <country>?" of ``prompt`` (chat messages or text)."""
    text = prompt[-1]["content"] if isinstance(prompt, list) else str(prompt)
    country = next((name for name in CAPITALS if f"capital of {name}?" in text), None)
    if country is None:
        return "I do not know."
    return f"{CAPITALS[country]}." if index % 2 == 0 else "Springfield"
