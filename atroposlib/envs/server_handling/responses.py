"""OpenAI response objects assembled from generated texts, for backends that do not speak OpenAI.

Choice ``i`` gets ``texts[i]`` and ``finish_reasons[i]``; the response gets a fresh id and the current
time unless ``id``/``created`` are given (fixed values make test fixtures reproducible).
"""

from __future__ import annotations

import time
import uuid
from collections.abc import Sequence
from typing import Any, Optional, TypeVar

from openai.types.chat.chat_completion import ChatCompletion, ChatCompletionMessage, Choice
from openai.types.completion import Completion, CompletionChoice

_R = TypeVar("_R", ChatCompletion, Completion)


def chat_completion_of(
    texts: Sequence[Optional[str]],
    finish_reasons: Sequence[Any],
    model: str,
    *,
    id: Optional[str] = None,
    created: Optional[int] = None,
) -> ChatCompletion:
    """A ``ChatCompletion`` with one assistant message per text."""
    choices = [
        Choice(finish_reason=finish, index=i, message=ChatCompletionMessage(role="assistant", content=text))
        for i, (text, finish) in enumerate(zip(texts, finish_reasons, strict=True))
    ]
    return _response(ChatCompletion, "chat.completion", choices, model, id, created)


def completion_of(
    texts: Sequence[str],
    finish_reasons: Sequence[Any],
    model: str,
    *,
    id: Optional[str] = None,
    created: Optional[int] = None,
) -> Completion:
    """A text ``Completion`` with one choice per text."""
    choices = [
        CompletionChoice(finish_reason=finish, index=i, text=text)
        for i, (text, finish) in enumerate(zip(texts, finish_reasons, strict=True))
    ]
    return _response(Completion, "text_completion", choices, model, id, created)


def _response(
    cls: type[_R], kind: str, choices: list[Any], model: str, id: Optional[str], created: Optional[int]
) -> _R:
    return cls(
        id=str(uuid.uuid4()) if id is None else id,
        created=int(time.time()) if created is None else created,
        model=model,
        object=kind,
        choices=choices,
    )
