"""``ServerHarness``: an in-process fake inference backend (what ``testing=True`` uses).

It is a full :class:`APIServer` (semaphores, health flag, retries, metrics, ``split``), so it works
through ``ServerManager`` routing, ``ManagedServer`` and ``wandb_metrics`` exactly like a real server.

Answers, in order of precedence:

1. exact responses registered with :meth:`ServerHarness.set_desired_response` (chat, keyed by the
   messages), :meth:`~ServerHarness.set_desired_completion` (keyed by the prompt),
   :meth:`~ServerHarness.set_tokens_and_logprobs_response` and :meth:`~ServerHarness.set_logprobs_response`;
2. otherwise ``respond(prompt_or_messages, index) -> str`` (default: ``default_response``).
   Token-level answers tokenise that text with ``tokenizer`` (UTF-8 bytes when there is none),
   end it with the EOS token, honour ``max_tokens`` (finish "length") and give every generated
   token the logprob :func:`harness_logprob`.

Every call is appended to :attr:`ServerHarness.calls` for assertions.
"""

from __future__ import annotations

import copy
from collections.abc import Callable
from typing import Any, Literal, Optional, Union

from openai.types.chat.chat_completion import ChatCompletion
from openai.types.completion import Completion

from atroposlib.envs.server_handling.responses import chat_completion_of, completion_of
from atroposlib.envs.server_handling.server_baseline import APIServer, APIServerConfig, ReasoningConfig

FinishReason = Literal["stop", "length", "tool_calls", "content_filter", "function_call"]

DEFAULT_RESPONSE = "This is a test response."


def create_chat_completion(
    resp: Union[str, list[str]],
    n: int = 1,
    finish_reason: Union[FinishReason, list[FinishReason]] = "stop",
) -> ChatCompletion:
    """A ``ChatCompletion`` with ``n`` assistant choices (``resp`` one text for all, or one per choice)."""
    return chat_completion_of(
        _per_choice(resp, n), _per_choice(finish_reason, n), "test_model", id="test_id", created=0
    )


def create_completion(
    resp: Union[str, list[str]],
    n: int = 1,
    finish_reason: Union[FinishReason, list[FinishReason]] = "stop",
) -> Completion:
    """A ``Completion`` with ``n`` choices (``resp`` one text for all, or one per choice)."""
    return completion_of(
        _per_choice(resp, n), _per_choice(finish_reason, n), "test_model", id="test_id", created=0
    )


def _per_choice(value: Union[str, list[str]], n: int) -> list[str]:
    """``value`` for each of ``n`` choices: a string repeated, or the first ``n`` entries of a list."""
    return [value if isinstance(value, str) else value[i] for i in range(n)]


def harness_logprob(token_id: int, position: int) -> float:
    """The deterministic logprob the harness reports for ``token_id`` at output ``position``."""
    return -(((int(token_id) * 7 + position * 13) % 97) + 1) / 100.0


class ServerHarness(APIServer):
    """Fake backend answering from registered responses or a ``respond`` callable.

    Args:
        config: server settings (default: model "test_model", no health check).
        reasoning_config: as for any APIServer.
        tokenizer: Hugging Face tokenizer for token-level answers (optional).
        respond: ``respond(prompt_text_or_messages, index) -> str`` for unregistered requests.
        default_response: text used when there is neither a registered answer nor ``respond``.
    """

    def __init__(
        self,
        config: Optional[APIServerConfig] = None,
        reasoning_config: Optional[ReasoningConfig] = None,
        tokenizer: Optional[Any] = None,
        respond: Optional[Callable[[Any, int], str]] = None,
        default_response: str = DEFAULT_RESPONSE,
    ):
        config = config or APIServerConfig(
            model_name="test_model", base_url=None, api_key="", health_check=False
        )
        super().__init__(config, reasoning_config=reasoning_config)
        self.tokenizer = tokenizer
        self.respond = respond
        self.default_response = default_response
        self.response_map: dict[str, Any] = {}
        self.tokens_and_logprobs_map: dict[str, tuple] = {}
        self.logprobs_map: dict[str, dict[str, Any]] = {}
        #: Every request received: ``{"method": ..., **kwargs}``.
        self.calls: list[dict[str, Any]] = []

    # -- registration (atroposlib 0.4.0 API) ---------------------------------------------------------
    @staticmethod
    def conv_to_dictkey(input_message: list[dict[str, Any]]) -> str:
        """The lookup key of a message list: ``role:...``/``content:...`` lines."""
        lines = []
        for item in input_message:
            lines.append(f"role:{item['role']}")
            lines.append(f"content:{item.get('content')}")
        return "\n".join(lines)

    def set_desired_response(
        self, input_message: list[dict[str, Any]], desired_response: ChatCompletion
    ) -> None:
        """Answer chat requests with exactly these ``messages`` with ``desired_response``."""
        self.response_map[self.conv_to_dictkey(input_message)] = desired_response

    def set_desired_completion(self, input_message: str, completion: Completion) -> None:
        """Answer completion requests with exactly this ``prompt`` with ``completion``."""
        self.response_map[input_message] = completion

    def set_tokens_and_logprobs_response(
        self,
        prompt: str,
        prompt_tokens: list,
        output_tokens_list: list,
        output_logprobs_list: list,
        finish_reasons: list,
    ) -> None:
        """Answer token-level requests for ``prompt`` with the given tuple."""
        self.tokens_and_logprobs_map[prompt] = (
            prompt_tokens,
            output_tokens_list,
            output_logprobs_list,
            finish_reasons,
        )

    def set_logprobs_response(self, prompt: str, payload: dict[str, Any]) -> None:
        """Answer ``get_logprobs`` for ``prompt`` with ``payload``."""
        self.logprobs_map[prompt] = payload

    # -- health --------------------------------------------------------------------------------------
    async def check_server_status_task(self, chat_completion: bool = True):
        self.server_healthy = True

    # -- generation helpers -------------------------------------------------------------------------------
    def _text_for(self, prompt: Any, index: int) -> str:
        if self.respond is not None:
            return str(self.respond(prompt, index))
        return self.default_response

    def _encode(self, text: str, add_special_tokens: bool = False) -> list[int]:
        if self.tokenizer is None:
            return list(text.encode("utf-8"))
        ids = self.tokenizer.encode(text, add_special_tokens=add_special_tokens)
        return list(ids["input_ids"] if isinstance(ids, dict) else ids)

    def _decode(self, ids: list[int]) -> str:
        if self.tokenizer is None:
            return bytes(t for t in ids if 0 <= t < 256).decode("utf-8", errors="replace")
        return self.tokenizer.decode(ids, skip_special_tokens=False)

    def _prompt_text(self, kwargs: dict[str, Any]) -> str:
        prompt = kwargs.get("prompt")
        if prompt is None and kwargs.get("input_ids") is not None:
            return self._decode(list(kwargs["input_ids"]))
        return "" if prompt is None else str(prompt)

    def _output(self, text: str, max_tokens: Optional[int]) -> tuple[list[int], list[float], str]:
        ids = self._encode(text)
        eos = getattr(self.tokenizer, "eos_token_id", None) if self.tokenizer is not None else None
        if eos is not None:
            ids.append(eos)
        finish = "stop"
        if max_tokens is not None and len(ids) > max_tokens:
            ids = ids[:max_tokens]
            finish = "length"
        return ids, [harness_logprob(t, i) for i, t in enumerate(ids)], finish

    # -- backend hooks ----------------------------------------------------------------------------------
    async def _chat_completion_wrapper(self, **kwargs) -> ChatCompletion:
        self.calls.append({"method": "chat_completion", **kwargs})
        messages = kwargs.get("messages") or []
        stored = self.response_map.get(self.conv_to_dictkey(messages))
        if stored is not None:
            return copy.deepcopy(stored)
        n = int(kwargs.get("n") or 1)
        return create_chat_completion([self._text_for(messages, i) for i in range(n)], n=n)

    async def _completion_wrapper(self, **kwargs) -> Completion:
        self.calls.append({"method": "completion", **kwargs})
        prompt = kwargs.get("prompt")
        stored = self.response_map.get(prompt) if isinstance(prompt, str) else None
        if stored is not None:
            return copy.deepcopy(stored)
        n = int(kwargs.get("n") or 1)
        return create_completion([self._text_for(prompt, i) for i in range(n)], n=n)

    async def _tokens_and_logprobs_completion_wrapper(self, **kwargs) -> tuple[list, list, list, list]:
        self.calls.append({"method": "tokens_and_logprobs_completion", **kwargs})
        prompt = self._prompt_text(kwargs)
        stored = (
            self.tokens_and_logprobs_map.get(kwargs.get("prompt"))
            if kwargs.get("prompt") is not None
            else None
        )
        if stored is not None:
            return copy.deepcopy(stored)
        if kwargs.get("input_ids") is not None:
            prompt_tokens = [int(t) for t in kwargs["input_ids"]]
        else:
            prompt_tokens = self._encode(prompt, add_special_tokens=True)
        n = int(kwargs.get("n") or 1)
        max_tokens = (
            kwargs.get("max_tokens") or kwargs.get("max_new_tokens") or kwargs.get("max_completion_tokens")
        )
        outputs, logprobs, finishes = [], [], []
        for i in range(n):
            ids, lps, finish = self._output(self._text_for(prompt, i), max_tokens)
            outputs.append(ids)
            logprobs.append(lps)
            finishes.append(finish)
        return prompt_tokens, outputs, logprobs, finishes

    async def _get_logprobs_wrapper(self, **kwargs) -> dict[str, Any]:
        self.calls.append({"method": "get_logprobs", **kwargs})
        if kwargs.get("prompt") in self.logprobs_map:
            return copy.deepcopy(self.logprobs_map[kwargs["prompt"]])
        if kwargs.get("input_ids") is not None:
            tokens = [int(t) for t in kwargs["input_ids"]]
        else:
            tokens = self._encode(self._prompt_text(kwargs), add_special_tokens=True)
        top_k = max(1, int(kwargs.get("top_k") or kwargs.get("top_logprobs") or 1))
        ids = [
            [] if pos == 0 else [tokens[pos]] + [(tokens[pos] + j) for j in range(1, top_k)]
            for pos in range(len(tokens))
        ]
        lps = [[harness_logprob(t, pos) - j for j, t in enumerate(row)] for pos, row in enumerate(ids)]
        return {"prompt_tokens": tokens, "prompt_topk_token_ids": ids, "prompt_topk_logprobs": lps}
