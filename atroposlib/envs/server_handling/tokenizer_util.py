"""Lazy tokenizer loading for backends that need one (none is downloaded in a constructor)."""

from __future__ import annotations

import threading
from typing import Any, Optional

from atroposlib.envs.server_handling.server_baseline import ServerBaseline, resolved_tokenizer_name


class LazyTokenizer:
    """Descriptor-free holder: ``get()`` loads ``AutoTokenizer.from_pretrained(name)`` on first use.

    A tokenizer can also be injected with ``set()`` (tests, offline use). Loading errors are raised
    with the name that failed, e.g. when the hub is unreachable.
    """

    def __init__(self, config: ServerBaseline):
        self._config = config
        self._tokenizer: Optional[Any] = None
        self._lock = threading.Lock()

    @property
    def name(self) -> str:
        return resolved_tokenizer_name(self._config)

    def loaded(self) -> bool:
        return self._tokenizer is not None

    def set(self, tokenizer: Any) -> None:
        self._tokenizer = tokenizer

    def get(self) -> Any:
        if self._tokenizer is None:
            with self._lock:
                if self._tokenizer is None:
                    from atroposlib.utils.hf_tokenizers import load_hf_tokenizer

                    self._tokenizer = load_hf_tokenizer(self.name, flag="--openai.tokenizer_name")
        return self._tokenizer


def encode_prompt(tokenizer: Any, text: str) -> list[int]:
    """Encode ``text`` with special tokens (BOS where the tokenizer adds one), dropping a doubled BOS.

    A doubled BOS appears when a chat template already starts with BOS and encoding adds another.
    """
    ids = list(tokenizer.encode(text))
    bos = getattr(tokenizer, "bos_token_id", None)
    if bos is not None and len(ids) >= 2 and ids[0] == bos == ids[1]:
        ids = ids[1:]
    return ids


class ConfigTokenizerMixin:
    """Gives a server class a ``tokenizer`` attribute loaded lazily from its config.

    The tokenizer named by ``tokenizer_name`` (or ``model_name``) is loaded on first access; assigning
    ``server.tokenizer = tok`` injects one instead (tests, offline use). Call :meth:`_init_tokenizer` in
    ``__init__``.
    """

    _tokenizer: LazyTokenizer

    def _init_tokenizer(self, config: ServerBaseline) -> None:
        self._tokenizer = LazyTokenizer(config)

    @property
    def tokenizer(self) -> Any:
        """The model's tokenizer, loaded on first access from ``tokenizer_name`` (or ``model_name``)."""
        return self._tokenizer.get()

    @tokenizer.setter
    def tokenizer(self, value: Any) -> None:
        self._tokenizer.set(value)
