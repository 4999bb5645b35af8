"""Translation between OpenAI ``tool_calls`` and the raw text a model generates, using vLLM's parsers.

Outbound (model -> caller): raw text such as ``<tool_call>{...}</tool_call>`` becomes structured
OpenAI tool calls, using the vLLM tool parser named ``parser_name`` (hermes, llama3_json, mistral,
qwen3 ...). Inbound (caller -> model): assistant messages carrying ``tool_calls`` are turned back
into the exact raw text that produced them (remembered by call id), or a best-effort
``<tool_call>{json}</tool_call>`` rendering, so the chat template reproduces the trained tokens.

Without vLLM, the ``hermes`` format is read by :func:`atroposlib.utils.tool_calls.split_tool_calls`
(strict JSON blocks); other parser names then disable parsing (raw text is returned unchanged, with a
warning), while message conversion and decoding still work. vLLM is imported only when a translator
is built (importing it takes seconds).
"""

from __future__ import annotations

import importlib.util
import json
import logging
import uuid
import warnings
from dataclasses import dataclass, field
from typing import Any, Optional

from atroposlib.utils.tool_calls import ToolCallError, decode_arguments, split_tool_calls

logger = logging.getLogger(__name__)

#: Whether the optional ``vllm`` package is installed (checked without importing it).
VLLM_AVAILABLE = importlib.util.find_spec("vllm") is not None


def _load_vllm_parsing():
    """``(ToolParserManager, ChatCompletionRequest)`` across vLLM versions."""
    try:
        from vllm.tool_parsers.abstract_tool_parser import ToolParserManager
    except ImportError:  # vLLM < 0.11 kept the parsers under entrypoints
        from vllm.entrypoints.openai.tool_parsers import ToolParserManager  # type: ignore[no-redef]
    try:
        from vllm.entrypoints.openai.chat_completion.protocol import ChatCompletionRequest
    except ImportError:
        from vllm.entrypoints.openai.protocol import ChatCompletionRequest  # type: ignore[no-redef]
    return ToolParserManager, ChatCompletionRequest


@dataclass(frozen=True)
class ParsedFunction:
    """The function part of a parsed call: its name and its arguments as a JSON string."""

    name: str
    arguments: str


@dataclass(frozen=True)
class ParsedToolCall:
    """A call read without vLLM, shaped like vLLM's ``ToolCall`` (``.id``, ``.function``)."""

    function: ParsedFunction
    id: str = field(default_factory=lambda: f"chatcmpl-tool-{uuid.uuid4().hex}")
    type: str = "function"


class _HermesParser:
    """The ``hermes`` format read by :func:`split_tool_calls`, answering like a vLLM tool parser."""

    def extract(self, raw_text: str) -> Optional[tuple[Optional[str], list[ParsedToolCall]]]:
        """``(content before the calls or None, calls)``, or None when the text makes no valid call."""
        split = split_tool_calls(raw_text)
        if split is None or not split[1]:
            return None
        content, calls = split
        parsed = [
            ParsedToolCall(ParsedFunction(c.name, json.dumps(c.arguments, ensure_ascii=False))) for c in calls
        ]
        return content or None, parsed


class ToolCallTranslator:
    """Parse tool calls out of model text and rebuild model text from tool calls.

    Args:
        tokenizer: the model's Hugging Face tokenizer (the parsers use it).
        parser_name: a vLLM tool parser name (see ``ToolParserManager.list_registered()``).

    Raises:
        KeyError: ``parser_name`` is not a registered vLLM parser (only when vLLM is installed).
    """

    def __init__(self, tokenizer: Any, parser_name: str = "hermes"):
        self.tokenizer = tokenizer
        self.parser_name = parser_name
        self.parser = None
        self._request_cls = None
        #: tool_call id -> the raw model text that produced it.
        self.call_id_to_raw_text: dict[str, str] = {}
        #: Without vLLM: the built-in hermes reader, or None (parsing disabled).
        self._fallback: Optional[_HermesParser] = None
        if not VLLM_AVAILABLE:
            if parser_name == "hermes":
                self._fallback = _HermesParser()
                return
            warnings.warn(
                f"vLLM is not installed: the {parser_name!r} tool parser is unavailable, so tool call parsing "
                "is disabled and model output is returned as text (pip install vllm to enable it).",
                stacklevel=2,
            )
            return
        manager, self._request_cls = _load_vllm_parsing()
        parser_cls = manager.get_tool_parser(parser_name)
        self.parser = parser_cls(tokenizer)

    def parse_model_output(
        self,
        raw_text: str,
        tool_choice: Optional[str] = None,
        tools: Optional[list[dict]] = None,
    ) -> tuple[Optional[str], Optional[list[Any]], str]:
        """Split raw model text into ``(content, tool_calls or None, finish_reason)``.

        ``finish_reason`` is "tool_calls" when calls were found, else "stop" (callers keep a backend
        "length"). With ``tool_choice == "none"``, no tools, or no parser, the text is returned as is.
        Tool calls are vLLM ``ToolCall`` objects (``.id``, ``.function.name``, ``.function.arguments``).
        """
        if tool_choice == "none" or not tools:
            return raw_text, None, "stop"
        if self._fallback is not None:
            return self._remember(raw_text, self._fallback.extract(raw_text))
        if self.parser is None:
            return raw_text, None, "stop"
        request = self._request_cls(
            messages=[{"role": "user", "content": ""}],
            model="atropos",
            tools=tools,
            tool_choice=tool_choice or "auto",
        )
        result = self.parser.extract_tool_calls(raw_text, request)
        found = (
            (result.content, list(result.tool_calls)) if result.tools_called and result.tool_calls else None
        )
        return self._remember(raw_text, found)

    def _remember(
        self, raw_text: str, found: Optional[tuple[Optional[str], list[Any]]]
    ) -> tuple[Optional[str], Optional[list[Any]], str]:
        """The answer of :meth:`parse_model_output`, remembering the raw text of each call id."""
        if found is None:
            return raw_text, None, "stop"
        content, calls = found
        for call in calls:
            self.call_id_to_raw_text[call.id] = raw_text
        return content, calls, "tool_calls"

    def reconstruct_raw_text_from_tool_calls(self, tool_calls: list[dict]) -> str:
        """The raw text for OpenAI-format ``tool_calls``: the remembered model text when the first id
        is known, else one ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` per call."""
        if not tool_calls:
            return ""
        first_id = _call_field(tool_calls[0], "id") or ""
        if first_id in self.call_id_to_raw_text:
            return self.call_id_to_raw_text[first_id]
        parts = []
        for call in tool_calls:
            function = _call_field(call, "function") or {}
            name = _call_field(function, "name") or ""
            arguments = _call_field(function, "arguments") or "{}"
            try:
                parsed = decode_arguments(arguments)
            except ToolCallError:
                parsed = arguments  # not JSON: kept as the string the caller sent
            parts.append(f"<tool_call>{json.dumps({'name': name, 'arguments': parsed})}</tool_call>")
        return "\n".join(parts)

    def convert_messages_for_template(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """Replace assistant messages that carry ``tool_calls`` by their raw text; others pass through."""
        converted = []
        for msg in messages:
            if msg.get("role") == "assistant" and msg.get("tool_calls"):
                calls = msg["tool_calls"]
                exact = (_call_field(calls[0], "id") or "") in self.call_id_to_raw_text
                raw = self.reconstruct_raw_text_from_tool_calls(calls)
                if not exact and msg.get("content"):
                    raw = f"{msg['content']}\n{raw}"
                converted.append({"role": "assistant", "content": raw})
            else:
                converted.append(msg)
        return converted

    def decode_with_tool_awareness(self, token_ids: list[int], has_tools: bool = False) -> str:
        """Decode, keeping special tokens when tools are active (some tokenizers mark the tags special)."""
        return self.tokenizer.decode(token_ids, skip_special_tokens=not has_tools)


def _call_field(obj: Any, name: str) -> Any:
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)
