"""Record layouts written by ``atropos-sft-gen`` and ``atropos-dpo-gen``.

``atropos`` keeps the text (``prefix``/``completion``, or ``messages``) with its ``score`` (compat:
atroposlib 0.4.0's layout); ``trl`` is what TRL's ``SFTTrainer`` (``messages`` or
``prompt``/``completion``) and ``DPOTrainer`` (``prompt``/``chosen``/``rejected``) read.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from atroposlib.cli._tooling.text import decode_group, split_conversations

Format = Literal["atropos", "trl"]
FORMATS: tuple[str, ...] = ("atropos", "trl")


@dataclass
class GroupView:
    """What a group's sequences look like as training text.

    Text mode fills ``prefix``/``completions`` (decoded tokens, common prompt split off); messages
    mode fills ``messages`` (full conversations) plus ``prompt_messages``/``replies`` (shared turns and
    each conversation's remaining turns).
    """

    prefix: str = ""
    completions: list[str] | None = None
    messages: list[Any] | None = None
    prompt_messages: list[Any] | None = None
    replies: list[list[Any]] | None = None


def text_view(group: dict[str, Any], tokenizer: Any) -> GroupView:
    """Text-mode view of ``group`` (decodes its tokens)."""
    decoded = decode_group(group, tokenizer)
    return GroupView(prefix=decoded.prefix, completions=decoded.completions)


def messages_view(group: dict[str, Any]) -> GroupView | None:
    """Messages-mode view, or None when the group carries no usable ``messages`` per sequence."""
    messages = group.get("messages")
    scores = group.get("scores") or []
    if not isinstance(messages, list) or len(messages) != len(scores) or not all(messages):
        return None
    prompt, replies = split_conversations(messages)
    return GroupView(messages=list(messages), prompt_messages=prompt, replies=replies)


def sft_record(view: GroupView, i: int, score: float, fmt: Format) -> dict[str, Any]:
    """One SFT line for sequence ``i`` of a group."""
    if view.messages is not None:
        if fmt == "trl":
            return {"messages": view.messages[i]}
        return {"messages": view.messages[i], "score": score}
    assert view.completions is not None
    if fmt == "trl":
        return {"prompt": view.prefix, "completion": view.completions[i]}
    return {"prefix": view.prefix, "completion": view.completions[i], "score": score}


def dpo_record(view: GroupView, chosen: int, rejected: int, score: float, fmt: Format) -> dict[str, Any]:
    """One DPO line pairing sequence ``chosen`` (with ``score``) over sequence ``rejected``."""
    if view.messages is not None:
        if fmt == "trl":
            assert view.replies is not None
            return {
                "prompt": view.prompt_messages or [],
                "chosen": view.replies[chosen],
                "rejected": view.replies[rejected],
            }
        return {"pos": view.messages[chosen], "score": score, "neg": view.messages[rejected]}
    assert view.completions is not None
    if fmt == "trl":
        return {
            "prompt": view.prefix,
            "chosen": view.completions[chosen],
            "rejected": view.completions[rejected],
        }
    return {
        "prefix": view.prefix,
        "pos": view.completions[chosen],
        "score": score,
        "neg": view.completions[rejected],
    }
