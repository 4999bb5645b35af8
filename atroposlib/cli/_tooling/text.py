"""Turning a group's tokens or messages into a shared prompt and per-sequence completions.

The prompt is the decoded texts' longest common character prefix and a completion is everything
after it (a completion that repeats the prefix is kept whole). The prefix never reaches past the
prompt part of any sequence (the leading positions whose mask is ``-100``), so identical or
single-sequence groups still get a non-empty completion.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from atroposlib.cli._tooling.errors import ToolError

IGNORE_INDEX = -100  # mask value of positions that are not trained


def common_prefix(texts: Sequence[str]) -> str:
    """Longest common leading substring of ``texts`` ("" for an empty sequence)."""
    if not texts:
        return ""
    shortest, longest = min(texts), max(texts)  # lexicographic extremes bound every other string
    n = 0
    for a, b in zip(shortest, longest, strict=False):
        if a != b:
            break
        n += 1
    return shortest[:n]


def split_on_common_prefix(texts: Sequence[str], prompt_heads: Sequence[str] = ()) -> tuple[str, list[str]]:
    """``(prefix, completions)`` with ``completions[i] = texts[i][len(prefix):]``.

    ``prompt_heads`` are the decoded untrained heads of the sequences; non-empty ones cap the
    prefix so it does not swallow generated text. Never raises, also for an empty prefix.
    """
    heads = [h for h in prompt_heads if h]
    prefix = common_prefix(list(texts) + heads)
    return prefix, [t[len(prefix) :] for t in texts]


def first_trained_index(mask: Sequence[int] | None) -> int:
    """Index of the first trained position of ``mask`` (``len(mask)`` if none; 0 without a mask)."""
    if not mask:
        return 0
    for i, m in enumerate(mask):
        if m != IGNORE_INDEX:
            return i
    return len(mask)


def trained_count(mask: Sequence[int] | None) -> int:
    """Number of trained positions (mask != -100)."""
    return sum(1 for m in mask or () if m != IGNORE_INDEX)


def mask_runs(tokens: Sequence[int], mask: Sequence[int] | None) -> list[tuple[bool, list[int]]]:
    """Split ``tokens`` into maximal runs of equal trained-ness: ``[(trained, token_ids), ...]``.

    Without a mask every token counts as untrained. A mask shorter than ``tokens`` marks the
    uncovered tail untrained.
    """
    runs: list[tuple[bool, list[int]]] = []
    for i, tok in enumerate(tokens):
        trained = bool(mask) and i < len(mask) and mask[i] != IGNORE_INDEX
        if runs and runs[-1][0] == trained:
            runs[-1][1].append(tok)
        else:
            runs.append((trained, [tok]))
    return runs


def load_tokenizer(name: str | None, *, required: bool, local_files_only: bool = False) -> Any | None:
    """Load a Hugging Face tokenizer by hub name or local path, once.

    ``name`` of None, "" or "none" means no tokenizer. ``local_files_only`` skips the hub (only a
    local directory or the local cache). On failure: ToolError if ``required``, else None (the
    caller shows messages instead of decoded tokens).
    """
    if not name or name.lower() == "none":
        if required:
            raise ToolError("a tokenizer is needed to decode tokens: pass --tokenizer NAME_OR_PATH")
        return None
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    from atroposlib.utils.hf_tokenizers import load_hf_tokenizer

    try:
        return load_hf_tokenizer(name, flag="--tokenizer", local_files_only=local_files_only)
    except Exception as exc:  # noqa: BLE001 - any hub/IO/format failure means "no tokenizer"
        if required:
            raise ToolError(str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__)
        return None


def decode(tokenizer: Any, ids: Sequence[int]) -> str:
    """Decode ``ids`` keeping special tokens (the viewers show them)."""
    return tokenizer.decode(list(ids), skip_special_tokens=False)


@dataclass
class DecodedGroup:
    """A group decoded to text: the shared ``prefix`` and each sequence's ``completions[i]``."""

    prefix: str
    completions: list[str]
    texts: list[str]


def render_conversation(tokenizer: Any, messages: Sequence[Any], add_generation_prompt: bool = False) -> str:
    """``messages`` as the model sees them (the tokenizer's chat template), or a plain transcript."""
    if tokenizer is not None and getattr(tokenizer, "chat_template", None):
        try:
            return tokenizer.apply_chat_template(
                list(messages), tokenize=False, add_generation_prompt=add_generation_prompt
            )
        except Exception:  # noqa: BLE001 - odd content the template cannot render
            pass
    text = conversation_text(messages)
    return text + "\n\n" if add_generation_prompt and text else text


def decode_group(group: dict[str, Any], tokenizer: Any) -> DecodedGroup:
    """Decode every token row of ``group`` and split off the common prompt prefix.

    Groups without tokens (messages only) are rendered through the tokenizer's chat template.
    """
    tokens = group.get("tokens") or []
    if not tokens and isinstance(group.get("messages"), list):
        convs = group["messages"]
        prompt, _ = split_conversations(convs)
        texts = [render_conversation(tokenizer, c) for c in convs]
        head = render_conversation(tokenizer, prompt, add_generation_prompt=True) if prompt else ""
        prefix, completions = split_on_common_prefix(texts, [head])
        return DecodedGroup(prefix, completions, texts)
    masks = group.get("masks") or []
    texts = [decode(tokenizer, row) for row in tokens]
    heads = []
    for i, row in enumerate(tokens):
        mask = masks[i] if i < len(masks) else None
        cut = first_trained_index(mask)
        heads.append(decode(tokenizer, row[:cut]) if mask and 0 < cut < len(row) else "")
    prefix, completions = split_on_common_prefix(texts, heads)
    return DecodedGroup(prefix, completions, texts)


def message_equal(a: Any, b: Any) -> bool:
    """Two chat messages are the same turn if role and content match (other keys are ignored)."""
    if isinstance(a, dict) and isinstance(b, dict):
        return a.get("role") == b.get("role") and a.get("content") == b.get("content")
    return a == b


def split_conversations(conversations: Sequence[Sequence[Any]]) -> tuple[list[Any], list[list[Any]]]:
    """``(shared_prompt_messages, [remaining messages of each conversation])``.

    The shared prompt is the longest run of leading messages identical in every conversation, but
    always leaves at least one message per conversation as its completion.
    """
    convs = [list(c) if isinstance(c, (list, tuple)) else [c] for c in conversations]
    if not convs:
        return [], []
    k = 0
    limit = max(0, min(len(c) for c in convs) - 1)
    while k < limit and all(message_equal(c[k], convs[0][k]) for c in convs):
        k += 1
    return convs[0][:k], [c[k:] for c in convs]


def message_text(message: Any) -> str:
    """Plain text of one message's content (text parts of multimodal content are joined)."""
    content = message.get("content") if isinstance(message, dict) else message
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict):
                if part.get("type") == "text" or "text" in part:
                    parts.append(str(part.get("text", "")))
                elif part.get("type") in ("image", "image_url"):
                    parts.append("[Image]")
            else:
                parts.append(str(part))
        return "\n".join(parts)
    return "" if content is None else str(content)


def conversation_text(messages: Sequence[Any]) -> str:
    """A readable transcript: one ``role: content`` paragraph per message."""
    out = []
    for m in messages:
        role = m.get("role", "?") if isinstance(m, dict) else "?"
        out.append(f"{role}: {message_text(m)}")
    return "\n\n".join(out)
