"""``ManagedServer``: completions that come back training-ready (tokens, masks, logprobs).

A ``ManagedServer`` wraps one :class:`APIServer` that supports ``tokens_and_logprobs_completion``
(vLLM, SGLang, TRL with logprobs, the testing harness). Every completion is recorded as a
:class:`SequenceNode`: the prompt and completion token ids, ``masked_tokens`` with ``-100`` on
prompt positions, and ``logprobs`` with ``1.0`` on prompt positions and the sampled logprobs on
generated ones.

Multi-turn: when a new prompt *extends* a node's text (the previous prompt plus the model's answer
plus new messages), the node's own tokens are reused and only the new text is tokenised, so the
tokens the model produced are never re-tokenised; the extended node keeps its earlier mask, so all
assistant turns stay trainable, and replaces the old node. Tree mode (``track_tree=True``) keeps
every node (keyed by its text) and masks everything before the newest completion instead.

Ordering: nodes are listed in the order their calls were *made* (for one call with ``n``,
``nodes[i]`` is ``choices[i]``), also when several calls run concurrently in one context.
"""

from __future__ import annotations

import itertools
import logging
import os
import warnings
from collections.abc import Awaitable, Callable
from types import SimpleNamespace
from typing import Any, Optional

from openai.types.chat.chat_completion import ChatCompletion
from openai.types.completion import Completion
from pydantic import BaseModel, PrivateAttr

from atroposlib.envs.server_handling.logprob_parsing import normalize_finish_reason
from atroposlib.envs.server_handling.responses import chat_completion_of, completion_of
from atroposlib.envs.server_handling.server_baseline import APIServer, resolved_tokenizer_name

logger = logging.getLogger(__name__)


class SequenceNode(BaseModel):
    """One tracked sequence (prompt + completion).

    Attributes:
        full_text: prompt text followed by the decoded completion.
        tokens: token ids of prompt and completion.
        masked_tokens: ``-100`` on prompt positions, the token id on trainable (generated) positions.
        logprobs: ``1.0`` on prompt positions, the sampled logprob on generated positions.
        metadata: ``{"finish_reason": ...}``.
    """

    full_text: str
    tokens: list[int]
    masked_tokens: list[int]
    logprobs: list[float]
    metadata: Optional[dict[str, Any]] = None

    # Text of special tokens generated at the very end (e.g. the end-of-turn token) that decoding
    # dropped from full_text; a re-rendered chat template brings that text back in the next prompt.
    _tail_text: str = PrivateAttr(default="")
    # Sort key: the order in which the producing call was made.
    _order: tuple[int, ...] = PrivateAttr(default=(0,))


def _message_dicts(messages: Any) -> list[dict[str, Any]]:
    out = []
    for msg in messages or []:
        if isinstance(msg, dict):
            out.append(msg)
        elif hasattr(msg, "model_dump"):
            out.append(msg.model_dump(exclude_none=True))
        else:
            out.append(dict(msg))
    return out


class _NodeTracking:
    """Where a managed server keeps its nodes: in tree mode ``sequences`` (keyed by full text), else
    ``current_nodes`` (in call order)."""

    def __init__(self, track_tree: bool) -> None:
        self.track_tree = track_tree
        if track_tree:
            self.sequences: dict[str, SequenceNode] = {}
        else:
            self.current_nodes: list[SequenceNode] = []

    def get_state(self) -> dict[str, Any]:
        """``{"nodes": [...]}`` (a copy), or in tree mode ``{"sequences", "tree"}`` (copies)."""
        if self.track_tree:
            return {"sequences": dict(self.sequences), "tree": dict(self.sequences)}
        return {"nodes": list(self.current_nodes)}

    def reset(self) -> None:
        """Forget all tracked sequences."""
        if self.track_tree:
            self.sequences.clear()
        else:
            self.current_nodes.clear()


class ManagedServer(_NodeTracking):
    """Wrap ``server`` and record every completion as a :class:`SequenceNode`.

    Args:
        server: the backend; must implement ``tokens_and_logprobs_completion``.
        tokenizer: Hugging Face tokenizer; default: ``server.tokenizer``, else loaded from the
            server config's tokenizer/model name (a warning and limited tracking if that fails).
        track_tree: keep every node keyed by text (tree) instead of extending nodes in place.
        tool_parser: vLLM tool parser name enabling ``tools=`` in :meth:`chat_completion`.
        preserve_think_blocks: render assistant ``<think>`` blocks as the template does, without
            protecting them (by default they are protected from templates that strip them).
    """

    _THINK_OPEN = "__MNGD_THINK__"
    _THINK_CLOSE = "__MNGD_ENDTHINK__"

    def __init__(
        self,
        server: APIServer,
        tokenizer: Optional[Any] = None,
        track_tree: bool = False,
        tool_parser: Optional[str] = None,
        preserve_think_blocks: bool = False,
    ):
        super().__init__(track_tree)
        self.server = server
        self.tokenizer = tokenizer
        self._tool_parser_name = tool_parser
        self._translator = None
        self._preserve_think_blocks = preserve_think_blocks
        self._call_counter = itertools.count(1)
        if self.tokenizer is None:
            self._initialize_tokenizer()

    # -- setup ------------------------------------------------------------------------------------
    def _initialize_tokenizer(self) -> None:
        try:
            server_tokenizer = getattr(self.server, "tokenizer", None)
        except Exception as exc:  # a lazily loaded server tokenizer may fail to load
            logger.debug("server tokenizer unavailable: %r", exc)
            server_tokenizer = None
        if server_tokenizer is not None:
            self.tokenizer = server_tokenizer
            return
        try:
            from atroposlib.utils.hf_tokenizers import load_hf_tokenizer

            self.tokenizer = load_hf_tokenizer(
                resolved_tokenizer_name(self.server.config), flag="--openai.tokenizer_name"
            )
        except Exception as exc:
            warnings.warn(
                f"ManagedServer could not load a tokenizer ({exc}); pass tokenizer=... for exact token tracking.",
                stacklevel=3,
            )
            self.tokenizer = None

    def _get_translator(self):
        """The ToolCallTranslator, built on first use; None without a parser name or tokenizer."""
        if self._translator is None and self._tool_parser_name and self.tokenizer is not None:
            try:
                from atroposlib.envs.server_handling.tool_call_translator import ToolCallTranslator

                self._translator = ToolCallTranslator(
                    tokenizer=self.tokenizer, parser_name=self._tool_parser_name
                )
            except Exception as exc:
                warnings.warn(f"Tool call parsing disabled: {exc}", stacklevel=3)
                self._tool_parser_name = None
                return None
        return self._translator

    # -- prompt rendering ------------------------------------------------------------------------
    def _protect_think_blocks(self, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        out = []
        for msg in messages:
            content = msg.get("content")
            if msg.get("role") == "assistant" and isinstance(content, str) and "<think>" in content:
                content = content.replace("<think>", self._THINK_OPEN).replace("</think>", self._THINK_CLOSE)
                out.append({**msg, "content": content})
            else:
                out.append(msg)
        return out

    def _convert_messages_to_prompt(
        self, messages: list[dict[str, Any]], tools: Optional[list[dict]] = None
    ) -> str:
        """Render ``messages`` with the chat template (generation prompt unless the last turn is the
        assistant's); ``"role: content"`` lines without a tokenizer/template."""
        messages = _message_dicts(messages)
        if tools and self._get_translator():
            messages = self._get_translator().convert_messages_for_template(messages)
        if self.tokenizer is None or not hasattr(self.tokenizer, "apply_chat_template"):
            return "\n".join(f"{m['role']}: {m.get('content', '')}" for m in messages)
        add_generation_prompt = not messages or messages[-1].get("role") != "assistant"
        if not self._preserve_think_blocks:
            messages = self._protect_think_blocks(messages)
        template_kwargs: dict[str, Any] = {"tokenize": False, "add_generation_prompt": add_generation_prompt}
        if tools:
            template_kwargs["tools"] = tools
        prompt = self.tokenizer.apply_chat_template(messages, **template_kwargs)
        return prompt.replace(self._THINK_OPEN, "<think>").replace(self._THINK_CLOSE, "</think>")

    # -- node bookkeeping --------------------------------------------------------------------------
    def _encode(self, text: str, add_special_tokens: bool) -> list[int]:
        ids = self.tokenizer.encode(text, add_special_tokens=add_special_tokens)
        return list(ids["input_ids"] if isinstance(ids, dict) else ids)

    def _find_extending_node(self, input_text: str) -> Optional[SequenceNode]:
        """The node with the longest ``full_text`` that is a prefix of ``input_text`` (default mode)."""
        best = None
        for node in self.current_nodes:
            if input_text.startswith(node.full_text) and (
                best is None or len(node.full_text) > len(best.full_text)
            ):
                best = node
        return best

    def _find_parent_node(self, input_text: str) -> Optional[SequenceNode]:
        """Tree mode: the node whose text is the longest prefix of ``input_text``."""
        best = None
        for text, node in self.sequences.items():
            if input_text.startswith(text) and (best is None or len(text) > len(best.full_text)):
                best = node
        return best

    def _compute_input_ids(self, input_text: str, extending_node: Optional[SequenceNode]) -> list[int]:
        """Prompt ids: the base node's own tokens plus the tokenised new text, or a fresh encoding."""
        if extending_node is None:
            return self._encode(input_text, add_special_tokens=True)
        suffix = input_text[len(extending_node.full_text) :]
        tail = extending_node._tail_text
        if tail and suffix.startswith(tail):
            # The end-of-turn token the model generated is already in the node's tokens.
            suffix = suffix[len(tail) :]
        new_tokens = self._encode(suffix, add_special_tokens=False) if suffix else []
        return list(extending_node.tokens) + new_tokens

    def _decode(self, tokens: list[int], skip_special_tokens: bool) -> tuple[str, str]:
        """``(text, tail_text)``: the decoded completion without its trailing special tokens (the
        end-of-turn token), and the text of those trailing tokens."""
        if self.tokenizer is None:
            return "".join(chr(t) for t in tokens if t > 31), ""
        if skip_special_tokens:
            special = set(getattr(self.tokenizer, "all_special_ids", None) or [])
        else:
            # Special tokens stay in the text (tool-call tags may be special); only end-of-text goes.
            special = {
                getattr(self.tokenizer, "eos_token_id", None),
                getattr(self.tokenizer, "pad_token_id", None),
            }
            special.discard(None)
        end = len(tokens)
        while end > 0 and tokens[end - 1] in special:
            end -= 1
        text = self.tokenizer.decode(tokens[:end], skip_special_tokens=skip_special_tokens)
        tail = self.tokenizer.decode(tokens[end:], skip_special_tokens=False) if end < len(tokens) else ""
        return text, tail

    def _create_sequence_node(
        self,
        input_text: str,
        parent_node: Optional[SequenceNode],
        prompt_tokens: list[int],
        output_tokens: list[int],
        output_logprobs: list[float],
        completion_text: str,
        finish_reason: str = "stop",
        extending_node: Optional[SequenceNode] = None,
    ) -> SequenceNode:
        """Build a node: prompt masked (or the extended node's mask carried forward), output trainable."""
        output_tokens = list(output_tokens)
        output_logprobs = list(output_logprobs)
        if len(output_logprobs) < len(output_tokens):
            output_logprobs += [1.0] * (len(output_tokens) - len(output_logprobs))
        del output_logprobs[len(output_tokens) :]
        prompt_tokens = list(prompt_tokens)
        base = extending_node or parent_node
        if base is not None and prompt_tokens[: len(base.tokens)] != list(base.tokens):
            logger.debug("backend changed the prompt tokens; tracking this completion as a fresh context")
            base = None
            extending_node = None
        if extending_node is not None:
            suffix_len = len(prompt_tokens) - len(extending_node.tokens)
            masked = list(extending_node.masked_tokens) + [-100] * suffix_len + output_tokens
            logprobs = list(extending_node.logprobs) + [1.0] * suffix_len + output_logprobs
        else:
            masked = [-100] * len(prompt_tokens) + output_tokens
            logprobs = [1.0] * len(prompt_tokens) + output_logprobs
        return SequenceNode(
            full_text=input_text + completion_text,
            tokens=prompt_tokens + output_tokens,
            masked_tokens=masked,
            logprobs=logprobs,
            metadata={"finish_reason": finish_reason},
        )

    def _store(
        self, nodes: list[SequenceNode], extending_node: Optional[SequenceNode], order: tuple[int, ...]
    ) -> None:
        if self.track_tree:
            for node in nodes:
                self.sequences[node.full_text] = node
            return
        if extending_node is not None:
            base_order = extending_node._order
            index = next((i for i, n in enumerate(self.current_nodes) if n is extending_node), None)
            for i, node in enumerate(nodes):
                node._order = base_order if i == 0 else base_order + (i,)
            if index is not None and nodes:
                self.current_nodes[index] = nodes[0]
                nodes = nodes[1:]
        else:
            for i, node in enumerate(nodes):
                node._order = order + (i,)
        self.current_nodes.extend(nodes)
        self.current_nodes.sort(key=lambda n: n._order)

    async def _generate(
        self, prompt: str, request: dict[str, Any], skip_special_tokens: bool
    ) -> list[tuple[str, str, SequenceNode]]:
        """Call the backend for ``prompt`` and record the nodes; returns ``(text, finish, node)`` per choice."""
        order = (next(self._call_counter),)
        if self.track_tree:
            base = self._find_parent_node(prompt)
            extending_node, parent_node = None, base
        else:
            base = self._find_extending_node(prompt)
            extending_node, parent_node = base, None
        request = dict(request)
        request["prompt"] = prompt
        request.setdefault("model", self.server.config.model_name)
        if self.tokenizer is not None:
            request["input_ids"] = self._compute_input_ids(prompt, base)
        prompt_tokens, outputs, logprobs, finishes = await self.server.tokens_and_logprobs_completion(
            **request
        )
        results = []
        nodes = []
        for i, output in enumerate(outputs):
            finish = normalize_finish_reason(finishes[i] if i < len(finishes) else "stop")
            text, tail = self._decode(list(output), skip_special_tokens)
            node = self._create_sequence_node(
                input_text=prompt,
                parent_node=parent_node,
                prompt_tokens=prompt_tokens,
                output_tokens=output,
                output_logprobs=logprobs[i] if i < len(logprobs) else [],
                completion_text=text,
                finish_reason=finish,
                extending_node=extending_node,
            )
            node._tail_text = tail
            nodes.append(node)
            results.append((text, finish, node))
        self._store(nodes, extending_node, order)
        return results

    # -- public API --------------------------------------------------------------------------------
    async def chat_completion(self, **kwargs) -> ChatCompletion:
        """Chat completion through the token-level backend; returns an OpenAI ``ChatCompletion``.

        With a ``tool_parser`` and ``tools=...`` the template receives the tools, assistant tool-call
        messages are rendered back to raw text, and tool calls in the output are parsed into
        ``message.tool_calls`` (finish "tool_calls", but a backend "length" is kept). Nodes always
        hold the raw text.
        """
        kwargs = dict(kwargs)
        tools = kwargs.pop("tools", None)
        tool_choice = kwargs.pop("tool_choice", None)
        has_tools = bool(tools) and self._get_translator() is not None
        if has_tools and tool_choice is None:
            tool_choice = "auto"
        messages = kwargs.pop("messages", None) or []
        prompt = self._convert_messages_to_prompt(messages, tools=tools if has_tools else None)
        if os.getenv("ATROPOS_DEBUG_REQUESTS", "0") == "1":
            logger.debug("managed chat prompt: %r", prompt[:600])
        results = await self._generate(prompt, kwargs, skip_special_tokens=not has_tools)
        contents: list[Optional[str]] = []
        finishes: list[str] = []
        calls_per_choice: list[Optional[list[dict[str, Any]]]] = []
        for text, finish, _node in results:
            content: Optional[str] = text
            tool_calls = None
            if has_tools and tool_choice != "none":
                content, parsed, parsed_finish = self._get_translator().parse_model_output(
                    raw_text=text,
                    tool_choice=tool_choice if isinstance(tool_choice, str) else "auto",
                    tools=tools,
                )
                if parsed:
                    tool_calls = [
                        {
                            "id": call.id,
                            "type": "function",
                            "function": {"name": call.function.name, "arguments": call.function.arguments},
                        }
                        for call in parsed
                    ]
                if finish != "length":
                    finish = parsed_finish if parsed else finish
            contents.append(content)
            finishes.append(finish)
            calls_per_choice.append(tool_calls)
        response = chat_completion_of(contents, finishes, self.server.config.model_name)
        for choice, tool_calls in zip(response.choices, calls_per_choice, strict=True):
            if tool_calls:
                # Plain dicts, as atroposlib 0.4.0 attached them (env code indexes them as dicts).
                choice.message.tool_calls = tool_calls
        return response

    async def completion(self, **kwargs) -> Completion:
        """Text completion through the token-level backend; returns an OpenAI ``Completion``."""
        kwargs = dict(kwargs)
        prompt = kwargs.pop("prompt", "") or ""
        results = await self._generate(str(prompt), kwargs, skip_special_tokens=True)
        texts = [text for text, _finish, _node in results]
        finishes = [finish for _text, finish, _node in results]
        return completion_of(texts, finishes, self.server.config.model_name)

    def get_state(self) -> dict[str, Any]:
        """``{"nodes": [...]}`` (a copy), or in tree mode ``{"sequences", "tree"}`` (copies) plus ``"nodes"``."""
        state = super().get_state()
        if self.track_tree:
            state["nodes"] = list(self.sequences.values())
        return state

    async def get_logprobs(self, **kwargs) -> dict[str, Any]:
        """Prompt logprobs for ``messages`` (rendered), ``prompt`` or ``input_ids``; see
        :meth:`APIServer.get_logprobs`."""
        request = dict(kwargs)
        messages = request.pop("messages", None)
        if messages is not None:
            request["prompt"] = self._convert_messages_to_prompt(messages)
        if not hasattr(self.server, "get_logprobs"):
            raise NotImplementedError(f"{type(self.server).__name__} does not implement get_logprobs")
        return await self.server.get_logprobs(**request)


class DummyManagedServer(_NodeTracking):
    """Placeholder tracking for OpenAI endpoints that return no token ids or logprobs.

    Calls go to the real server; nodes get fixed placeholder tokens (``0..127``), masks and logprobs
    (``-0.5``) and ``metadata["dummy_tokens"] = True``. Not suitable for training.
    """

    DUMMY_TOKENS = list(range(128))
    DUMMY_MASKED_TOKENS = [-100] + DUMMY_TOKENS[1:]
    DUMMY_LOGPROBS = [-0.5] * 128

    def __init__(self, server: APIServer, tokenizer: Optional[Any] = None, track_tree: bool = False):
        super().__init__(track_tree)
        self.server = server

    @staticmethod
    def _messages_to_text(messages: list[dict[str, Any]]) -> str:
        return "\n\n".join(f"{m['role']}:{m.get('content', '')}" for m in messages)

    def _create_dummy_node(self, full_text: str, finish_reason: str = "stop") -> SequenceNode:
        return SequenceNode(
            full_text=full_text,
            tokens=list(self.DUMMY_TOKENS),
            masked_tokens=list(self.DUMMY_MASKED_TOKENS),
            logprobs=list(self.DUMMY_LOGPROBS),
            metadata={"finish_reason": finish_reason, "dummy_tokens": True},
        )

    def _record(self, node: SequenceNode) -> None:
        if self.track_tree:
            self.sequences[node.full_text] = node
        else:
            self.current_nodes.append(node)

    async def chat_completion(self, **kwargs) -> ChatCompletion:
        messages = _message_dicts(kwargs.get("messages"))
        response = await self.server.chat_completion(**kwargs)
        for choice in response.choices:
            text = self._messages_to_text(
                messages + [{"role": "assistant", "content": choice.message.content or ""}]
            )
            self._record(self._create_dummy_node(text, choice.finish_reason or "stop"))
        return response

    async def completion(self, **kwargs) -> Completion:
        prompt = kwargs.get("prompt", "")
        response = await self.server.completion(**kwargs)
        for choice in response.choices:
            self._record(
                self._create_dummy_node(f"{prompt}{choice.text or ''}", choice.finish_reason or "stop")
            )
        return response

    async def get_logprobs(self, **kwargs) -> dict[str, Any]:
        raise NotImplementedError(
            "DummyManagedServer has no real prompt logprobs; use a vllm or sglang server for get_logprobs."
        )


class _CreateEndpoint:
    """One endpoint of an OpenAI-style client: ``await create(**kwargs)`` calls ``method(**kwargs)``."""

    def __init__(self, method: Callable[..., Awaitable[Any]]):
        self._method = method

    async def create(self, **kwargs: Any) -> Any:
        return await self._method(**kwargs)


class ManagedServerAdapter:
    """Make a ``ManagedServer`` look like ``openai.AsyncOpenAI`` (``chat.completions.create``,
    ``completions.create``, ``base_url``) for libraries that expect a client."""

    def __init__(self, managed_server: ManagedServer, base_url: str):
        self._managed = managed_server
        self.base_url = base_url
        self.chat = SimpleNamespace(completions=_CreateEndpoint(managed_server.chat_completion))
        self.completions = _CreateEndpoint(managed_server.completion)

    async def post(self, path: str, body: dict, cast_to: type):
        raise NotImplementedError(
            f"ManagedServerAdapter does not support post() (path {path!r}); use chat completions."
        )

    def copy(self, **kwargs):
        raise NotImplementedError("ManagedServerAdapter does not support copy().")
