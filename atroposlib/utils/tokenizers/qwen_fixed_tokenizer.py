"""A Qwen tokenizer whose chat template renders tool calls inside Jinja's immutable sandbox.

Some Qwen chat templates mutate lists while rendering tool calls, which the sandbox used by
``apply_chat_template`` forbids. :class:`QwenFixedTokenizer` loads the model's tokenizer as usual and swaps
in the bundled ``qwen_chat_template.jinja`` (ChatML with Hermes-style ``<tool_call>`` blocks).
"""

from __future__ import annotations

from functools import lru_cache
from pathlib import Path
from typing import Any

TEMPLATE_PATH = Path(__file__).with_name("qwen_chat_template.jinja")


@lru_cache(maxsize=1)
def _template_text() -> str:
    return TEMPLATE_PATH.read_text(encoding="utf-8")


class QwenFixedTokenizer:
    """Wraps ``AutoTokenizer.from_pretrained(model_name_or_path, **kwargs)`` with the bundled template.

    Every attribute other than :meth:`apply_chat_template` is delegated to the wrapped tokenizer
    (``self.tokenizer``), so the wrapper can be used wherever the tokenizer was.
    """

    @classmethod
    def _load_chat_template(cls) -> str:
        return _template_text()

    def __init__(self, model_name_or_path: str, **kwargs: Any):
        from transformers import AutoTokenizer

        self.tokenizer = AutoTokenizer.from_pretrained(model_name_or_path, **kwargs)
        self.tokenizer.chat_template = self._load_chat_template()

    def __getattr__(self, name: str) -> Any:
        # Only called for attributes not found on the wrapper itself.
        if name == "tokenizer":
            raise AttributeError(name)
        return getattr(self.tokenizer, name)

    def __len__(self) -> int:
        return len(self.tokenizer)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.tokenizer(*args, **kwargs)

    def apply_chat_template(
        self,
        conversation: list[dict[str, Any]],
        tools: list[dict[str, Any]] | None = None,
        tokenize: bool = True,
        padding: bool = False,
        truncation: bool = False,
        max_length: int | None = None,
        return_tensors: str | bool | None = None,
        return_dict: bool = False,
        add_generation_prompt: bool = False,
        **kwargs: Any,
    ):
        """The wrapped tokenizer's ``apply_chat_template`` with the bundled template forced."""
        kwargs.pop("chat_template", None)
        return self.tokenizer.apply_chat_template(
            conversation,
            tools=tools,
            tokenize=tokenize,
            padding=padding,
            truncation=truncation,
            max_length=max_length,
            return_tensors=return_tensors,
            return_dict=return_dict,
            add_generation_prompt=add_generation_prompt,
            chat_template=self._load_chat_template(),
            **kwargs,
        )
