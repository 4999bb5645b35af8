"""Turn a chat into the ``tokens`` / ``masks`` pair the trainer consumes.

Mask convention (shared by the whole library): a position that is trained holds its token id, a position
that is not trained holds ``-100``.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from atroposlib.type_definitions import Message

logger = logging.getLogger(__name__)

#: Roles whose messages are trained when ``train_on_all_assistant_turns`` is set.
UNMASKED_ROLES = ["assistant", "agent"]

MASKED = -100


def _as_id_list(rendered: Any) -> list[int]:
    """Normalise what ``apply_chat_template(tokenize=True)`` returned into a flat list of ints.

    transformers 4.x returns a list; 5.x returns a ``BatchEncoding`` (a mapping with ``input_ids``); some
    wrappers return tensors or arrays.
    """
    if isinstance(rendered, Mapping):
        rendered = rendered["input_ids"]
    if hasattr(rendered, "tolist"):
        rendered = rendered.tolist()
    ids = list(rendered)
    # A batched result for a single conversation: [[...]].
    if len(ids) == 1 and isinstance(ids[0], (list, tuple)):
        ids = list(ids[0])
    return [int(t) for t in ids]


def _render_empty_conversation(tokenizer: Any, add_generation_prompt: bool) -> list[int]:
    """Token ids of the chat template applied to no messages.

    transformers 5 refuses an empty conversation, but the generation prompt alone (e.g.
    ``<|im_start|>assistant\\n``) is exactly the prefix to mask before a first assistant message, so the
    template is rendered directly with jinja the same way ``apply_chat_template`` would.
    """
    template = tokenizer.get_chat_template() if hasattr(tokenizer, "get_chat_template") else None
    template = template or getattr(tokenizer, "chat_template", None)
    if not template:
        raise ValueError("tokenizer has no chat template")
    try:
        from transformers.utils.chat_template_utils import _compile_jinja_template

        compiled = _compile_jinja_template(template)
    except ImportError:  # pragma: no cover - very old transformers
        from jinja2.sandbox import ImmutableSandboxedEnvironment

        compiled = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True).from_string(template)
    special = dict(getattr(tokenizer, "special_tokens_map", {}) or {})
    text = compiled.render(messages=[], add_generation_prompt=add_generation_prompt, **special)
    return list(tokenizer.encode(text, add_special_tokens=False))


def chat_template_ids(
    tokenizer: Any, messages: Sequence[Message], add_generation_prompt: bool = False
) -> list[int]:
    """``tokenizer.apply_chat_template(messages, tokenize=True)`` as a plain list of token ids.

    Works with transformers 4.x (list) and 5.x (``BatchEncoding``), and with an empty ``messages`` list
    (which transformers 5 rejects).
    """
    messages = list(messages)
    if not messages:
        try:
            return _as_id_list(
                tokenizer.apply_chat_template(
                    messages, tokenize=True, add_generation_prompt=add_generation_prompt
                )
            )
        except Exception:
            return _render_empty_conversation(tokenizer, add_generation_prompt)
    return _as_id_list(
        tokenizer.apply_chat_template(messages, tokenize=True, add_generation_prompt=add_generation_prompt)
    )


def _common_prefix_len(a: list[int], b: list[int]) -> int:
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


def _turn_content_start(tokenizer: Any, chat: Sequence[Message], i: int) -> int:
    """Index of the first token of message ``i``'s content (just after its role header).

    For ``assistant`` this is the length of the generation prompt after ``chat[:i]``. The generation
    prompt opens an *assistant* turn, so for any other role (``agent``, a custom role) the header is found
    by rendering the message with empty content and taking the common prefix.
    """
    if chat[i].get("role") == "assistant":
        return len(chat_template_ids(tokenizer, chat[:i], add_generation_prompt=True))
    with_content = chat_template_ids(tokenizer, chat[: i + 1])
    empty = chat_template_ids(tokenizer, [*chat[:i], {**chat[i], "content": ""}])
    return _common_prefix_len(with_content, empty)


def tokenize_for_trainer(
    tokenizer: Any,
    chat: list[Message],
    include_messages: bool = False,
    train_on_all_assistant_turns: bool = False,
    finish_reason: str = "",
    unmasked_role: str | None = None,
) -> dict:
    """Tokenise ``chat`` with the tokenizer's chat template and build the training mask.

    Args:
        tokenizer: a Hugging Face tokenizer (or anything with ``apply_chat_template``).
        chat: the full conversation, normally ending with the assistant reply to train on.
        include_messages: also return ``"messages": chat``.
        train_on_all_assistant_turns: train every message whose role is in :data:`UNMASKED_ROLES`
            (plus ``unmasked_role``) instead of only the last message.
        finish_reason: the backend's finish reason for the last reply; with ``"length"`` a trailing EOS
            token (added by the template, never generated) is dropped from tokens and masks.
        unmasked_role: one extra role to train when ``train_on_all_assistant_turns`` is set.

    Returns:
        ``{"tokens": list[int], "masks": list[int]}`` (+ ``"messages"``), both the same length; masks hold
        ``-100`` at untrained positions and the token id at trained ones.

    Raises:
        ValueError: ``chat`` is empty.
    """
    if not chat:
        raise ValueError("tokenize_for_trainer needs at least one message")
    tokens = chat_template_ids(tokenizer, chat)

    if not train_on_all_assistant_turns:
        prefix_len = len(chat_template_ids(tokenizer, chat[:-1], add_generation_prompt=True))
        prefix_len = min(prefix_len, len(tokens))
        masks = [MASKED] * prefix_len + tokens[prefix_len:]
    else:
        trained_roles = set(UNMASKED_ROLES)
        if unmasked_role:
            trained_roles.add(unmasked_role)
        masks = [MASKED] * len(tokens)
        for i, message in enumerate(chat):
            if message.get("role") not in trained_roles:
                continue
            start = _turn_content_start(tokenizer, chat, i)
            # The template of chat[:i+1] is a prefix of the full render, so its end marks this turn's end.
            end = min(len(chat_template_ids(tokenizer, chat[: i + 1])), len(tokens))
            masks[start:end] = tokens[start:end]

    eos = getattr(tokenizer, "eos_token_id", None)
    if finish_reason == "length" and tokens and eos is not None and tokens[-1] == eos:
        # A reply cut by max_tokens never produced the EOS the template appended; training on it would
        # teach the model to stop where it did not.
        logger.debug("finish_reason=length: dropping the template-added EOS token")
        tokens = tokens[:-1]
        masks = masks[:-1]

    result: dict = {"tokens": tokens, "masks": masks}
    if include_messages:
        result["messages"] = chat
    return result
