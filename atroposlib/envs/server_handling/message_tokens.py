"""Tracking for chat endpoints that return text only: tokens computed from the messages.

A hosted model behind an OpenAI-compatible chat route (``server_type openai``) gives back the reply's
text, not its token ids. For ``process`` and ``evaluate`` that is enough: :class:`MessageTokenizedServer`
sends each request to the endpoint as it is and records a :class:`SequenceNode` whose tokens are the
conversation (prompt plus reply) rendered by the environment's tokenizer and chat template, as
:func:`~atroposlib.utils.tokenize_for_trainer.tokenize_for_trainer` renders it. Every assistant turn is
trained (its tokens in ``masked_tokens``), everything else is ``-100``. The endpoint's sampling
logprobs are not known, so ``logprobs`` is empty and groups built from these nodes carry no
``inference_logprobs``; ``metadata["tokens_from_messages"]`` is ``True``.

Multi-turn: a request whose messages begin with an earlier node's conversation (its prompt and reply)
continues that node: the node is replaced by the longer conversation, so an episode keeps one node, as
with :class:`~atroposlib.envs.server_handling.managed_server.ManagedServer`.

These tokens are the template's rendering, not what the remote model sampled; ``serve`` (training)
refuses such servers (see :func:`token_exact_problem`).
"""

from __future__ import annotations

import os
from typing import Any, Optional

from openai.types.chat.chat_completion import ChatCompletion
from openai.types.completion import Completion

from atroposlib.envs.server_handling.managed_server import SequenceNode, _message_dicts, _NodeTracking
from atroposlib.utils.tokenize_for_trainer import tokenize_for_trainer

#: Text that stands for a picture when a message's content is a list of parts.
IMAGE_TEXT = "<image>"


def text_content(message: dict[str, Any]) -> dict[str, Any]:
    """``message`` with ``content`` as text: parts joined by newlines, pictures as :data:`IMAGE_TEXT`,
    ``None`` as the empty string. Other keys (``tool_calls``, ``name``) are kept."""
    content = message.get("content")
    if isinstance(content, list):
        content = "\n".join(
            part.get("text", "") if part.get("type") == "text" else IMAGE_TEXT for part in content
        )
    return {**message, "content": content or ""}


def _encode(tokenizer: Any, text: str, add_special_tokens: bool) -> list[int]:
    ids = tokenizer.encode(text, add_special_tokens=add_special_tokens)
    return list(ids["input_ids"] if isinstance(ids, dict) else ids)


class MessageTokenizedServer(_NodeTracking):
    """Send requests to an OpenAI-type server; track nodes tokenised from the messages (module docstring).

    Args:
        server: the OpenAI-type :class:`~atroposlib.envs.server_handling.server_baseline.APIServer`.
        tokenizer: the environment's Hugging Face tokenizer (chat template required for chats).
        track_tree: keep every node keyed by its text instead of continuing nodes in place.
    """

    def __init__(self, server: Any, tokenizer: Any, track_tree: bool = False):
        super().__init__(track_tree)
        if tokenizer is None:
            raise ValueError("tokens from messages need the environment's tokenizer (--env.tokenizer_name)")
        self.server = server
        self.tokenizer = tokenizer
        self._chats: dict[int, list[dict[str, Any]]] = {}

    # -- nodes ------------------------------------------------------------------------------------------
    def _node(self, chat: list[dict[str, Any]], finish_reason: str) -> SequenceNode:
        rendered = tokenize_for_trainer(
            self.tokenizer, chat, train_on_all_assistant_turns=True, finish_reason=finish_reason
        )
        text = self.tokenizer.decode(rendered["tokens"], skip_special_tokens=False)
        node = SequenceNode(
            full_text=text,
            tokens=rendered["tokens"],
            masked_tokens=rendered["masks"],
            logprobs=[],
            metadata={"finish_reason": finish_reason, "tokens_from_messages": True},
        )
        self._chats[id(node)] = chat
        return node

    def _continued(self, messages: list[dict[str, Any]]) -> Optional[SequenceNode]:
        """The node whose conversation is the longest prefix of ``messages`` (default mode only)."""
        if self.track_tree:
            return None
        best, best_len = None, 0
        for node in self.current_nodes:
            chat = self._chats.get(id(node), [])
            if best_len < len(chat) <= len(messages) and messages[: len(chat)] == chat:
                best, best_len = node, len(chat)
        return best

    def _record(self, nodes: list[SequenceNode], continued: Optional[SequenceNode]) -> None:
        if self.track_tree:
            for node in nodes:
                self.sequences[node.full_text] = node
            return
        if continued is not None and nodes:
            index = next(i for i, n in enumerate(self.current_nodes) if n is continued)
            self._chats.pop(id(continued), None)
            self.current_nodes[index] = nodes[0]
            nodes = nodes[1:]
        self.current_nodes.extend(nodes)

    # -- requests ---------------------------------------------------------------------------------------
    async def chat_completion(self, **kwargs: Any) -> ChatCompletion:
        """The endpoint's chat completion; one node per choice (module docstring)."""
        messages = [text_content(m) for m in _message_dicts(kwargs.get("messages"))]
        response = await self.server.chat_completion(**kwargs)
        continued = self._continued(messages)
        nodes = [
            self._node(
                [*messages, {"role": "assistant", "content": choice.message.content or ""}],
                choice.finish_reason or "stop",
            )
            for choice in response.choices
        ]
        self._record(nodes, continued)
        return response

    async def completion(self, **kwargs: Any) -> Completion:
        """The endpoint's text completion; each node is the encoded prompt (masked) and reply (trained)."""
        prompt = str(kwargs.get("prompt") or "")
        response = await self.server.completion(**kwargs)
        prompt_ids = _encode(self.tokenizer, prompt, add_special_tokens=True)
        nodes = []
        for choice in response.choices:
            reply_ids = _encode(self.tokenizer, choice.text or "", add_special_tokens=False)
            nodes.append(
                SequenceNode(
                    full_text=prompt + (choice.text or ""),
                    tokens=prompt_ids + reply_ids,
                    masked_tokens=[-100] * len(prompt_ids) + reply_ids,
                    logprobs=[],
                    metadata={"finish_reason": choice.finish_reason or "stop", "tokens_from_messages": True},
                )
            )
        self._record(nodes, None)
        return response

    def reset(self) -> None:
        super().reset()
        self._chats.clear()

    async def get_logprobs(self, **kwargs: Any) -> dict[str, Any]:
        raise NotImplementedError(
            "an OpenAI-type server returns no prompt logprobs; use server_type vllm or sglang for get_logprobs"
        )


def token_exact_problem(servers: list[Any]) -> Optional[str]:
    """Why ``servers`` cannot train token-exactly (one line), or ``None`` when every one can.

    OpenAI-type servers return text only; ``$ATROPOS_ALLOW_DUMMY_MANAGED_SERVER=1`` accepts them anyway
    (placeholder tokens, not for training)."""
    from atroposlib.envs.server_handling.openai_server import OpenAIServer

    if os.environ.get("ATROPOS_ALLOW_DUMMY_MANAGED_SERVER", "").strip().lower() in {"1", "true", "yes", "on"}:
        return None
    urls = [getattr(s.config, "base_url", "?") for s in servers if isinstance(s, OpenAIServer)]
    if not urls:
        return None
    return (
        f"serve trains on the inference server's own token ids, which an OpenAI-type server ({', '.join(urls)}) "
        "does not return: start it with --openai.server_type vllm, sglang or trl (process and evaluate work "
        "with any chat endpoint)"
    )
