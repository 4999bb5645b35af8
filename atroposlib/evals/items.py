"""What an evaluation is made of: items it asks, replies it gets and the scores it gives them."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Union

Messages = list[dict[str, Any]]


@dataclass
class EvalItem:
    """One question of a benchmark.

    ``id``: stable within the benchmark (it names the item in ``samples.jsonl`` and, with the prompt, keys
    the samples a resumed run reuses). ``prompt``: the user turn's text, or the chat messages to send
    (without the system prompt, which the core adds). ``gold``: the reference answer, whatever the scorer
    compares against. ``groups``: breakdown key -> value (``{"subject": "anatomy", "category": "STEM"}``).
    ``fields``: more values written with every sample of the item (the question, the options ...).
    """

    id: str
    prompt: Union[str, Messages]
    gold: Any
    groups: dict[str, str] = field(default_factory=dict)
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass
class Reply:
    """One sampled reply: its text and the server's ``finish_reason`` (``"length"``: cut at max tokens)."""

    text: str
    finish_reason: Optional[str] = None


@dataclass
class Score:
    """The score of one reply.

    ``value``: the benchmark's main metric for this reply (1.0 right, 0.0 wrong, or a fraction); ``None``
    means the reply could not be scored (e.g. the judge answered garbage): it is counted apart
    (``eval/unscored``) and left out of every mean, never counted as right or wrong.
    ``extracted``: the answer read from the reply (None: no answer); ``method``: how it was read.
    ``metrics``: further per-reply metrics (``{"f1": 0.5}``), averaged with a standard error like ``value``.
    ``fields``: more values for ``samples.jsonl`` (a judge's verdict, the checks that failed ...).
    """

    value: Optional[float]
    extracted: Any = None
    method: Optional[str] = None
    metrics: dict[str, float] = field(default_factory=dict)
    fields: dict[str, Any] = field(default_factory=dict)


__all__ = ["EvalItem", "Messages", "Reply", "Score"]
