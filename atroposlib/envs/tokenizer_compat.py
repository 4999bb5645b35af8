"""Keep ``tokenizer.apply_chat_template`` returning token-id lists, as environments written for
transformers 4.x expect.

transformers 5 returns a ``BatchEncoding`` (``{"input_ids", "attention_mask"}``) from
``apply_chat_template(..., tokenize=True)``; code such as ``len(tokenizer.apply_chat_template(chat))`` then
silently measures the wrong thing. The env's tokenizer gets a thin wrapper that returns ``["input_ids"]``
unless the caller explicitly asks for a dict (``return_dict=True``). On transformers 4.x it changes nothing.
"""

from __future__ import annotations

import functools
from typing import Any

_MARKER = "_atropos_token_list_chat_template"


def ensure_token_list_chat_template(tokenizer: Any) -> Any:
    """Wrap ``tokenizer.apply_chat_template`` in place (idempotent); returns the tokenizer."""
    original = getattr(tokenizer, "apply_chat_template", None)
    if original is None or getattr(original, _MARKER, False):
        return tokenizer

    @functools.wraps(original)
    def apply_chat_template(*args: Any, **kwargs: Any) -> Any:
        result = original(*args, **kwargs)
        if kwargs.get("return_dict") or kwargs.get("tokenize", True) is False:
            return result
        if hasattr(result, "keys") and "input_ids" in result:
            return result["input_ids"]
        return result

    setattr(apply_chat_template, _MARKER, True)
    try:
        tokenizer.apply_chat_template = apply_chat_template
    except (AttributeError, TypeError):  # an object that refuses instance attributes: leave it alone
        pass
    return tokenizer


__all__ = ["ensure_token_list_chat_template"]
