"""Interleaved thinking: tool calls inside the reasoning, their results fed back mid-thought.

The task of ``tool_use_python_math_server.py`` (GSM8K by default; ``python`` in the sandbox and
``calculator``; the same data options), played in one assistant turn: the model reasons in
``<think>``, and whenever it writes a Hermes ``<tool_call>{...}</tool_call>`` inside that reasoning,
generation stops at ``</tool_call>``, the environment runs the call and writes
``<tool_response>...</tool_response>`` into the same turn, and generation resumes in the thought. After
``</think>`` the model answers with ``\\boxed{}``.

How: the chat is rendered once and continued as text through ManagedServer's completion route with the
stop string ``</tool_call>``; each continuation extends the episode's one tracked sequence, so the
sequence holds the server's own token ids and logprobs, with the model's pieces trained and the inserted
closing tags and tool responses masked (``-100``). A call made after ``</think>`` is not run and the
reply scores 0; after ``max_tool_calls`` calls, a further call ends the episode. Malformed calls,
unknown tools, bad arguments, failing or slow tools get an error response and the thought goes on.

Reward: 1 when the one ``\\boxed{}`` after the reasoning equals the gold answer (``math_verify``), else 0
(also when the budget ``max_tokens_per_turn`` for the whole turn runs out). Training (``serve``) needs a
token-level server (``--openai.server_type vllm`` or ``sglang``); ``process`` and ``evaluate`` also run
against an OpenAI-type endpoint with a completions route, the turn's tokens then computed from its text.

``python environments/tool_use_interleaved_thinking.py {serve,process,evaluate} --openai.base_url ...``
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass, field
from typing import Any, Optional

from pydantic import Field

from atroposlib.envs.episodes import (
    END_CONTEXT,
    END_DONE,
    END_LENGTH,
    END_TURN_LIMIT,
    Episode,
    EpisodeTrackingError,
    EpisodeTurn,
    decode_reply,
)
from atroposlib.envs.tools import Tool, run_tool_calls, tool_schema
from atroposlib.utils.replies import THINK_CLOSE, THINK_OPEN

try:
    from environments.tool_use_python_math_server import (
        PythonMathToolUseConfig,
        PythonMathToolUseEnv,
        ToolUseItem,
        answer_is_correct,
    )
except (
    ModuleNotFoundError
):  # run as a script: this file's folder is on the path, the repository root may not be
    from tool_use_python_math_server import (
        PythonMathToolUseConfig,
        PythonMathToolUseEnv,
        ToolUseItem,
        answer_is_correct,
    )

logger = logging.getLogger(__name__)

CALL_OPEN, CALL_CLOSE = "<tool_call>", "</tool_call>"

SYSTEM_PROMPT = (
    "You are a deep thinking AI that solves problems with the help of tools while you think. Reason inside "
    "<think> </think> tags. While thinking you can call these tools:\n<tools>\n{tools}\n</tools>\n\n"
    'To call a tool inside your reasoning, write <tool_call>{{"name": "tool_name", "arguments": {{...}}}}'
    "</tool_call>; its result appears right after it in a <tool_response> block and you continue thinking. "
    "Never write <tool_response> yourself. After </think>, give the final answer as \\boxed{{answer}}."
)


class InterleavedThinkingConfig(PythonMathToolUseConfig):
    """The math-with-tools settings; the turn budget covers the whole reasoning with its tool calls."""

    max_tokens_per_turn: int = Field(
        4096, ge=1, description="tokens the model may generate in the whole turn"
    )
    max_tool_calls: int = Field(8, ge=1, description="tool calls run per episode; one more ends the episode")


@dataclass
class InterleavedSession:
    """One episode: the question, the tools, and what happened in the turn."""

    item: ToolUseItem
    tools: dict[str, Tool]
    config: InterleavedThinkingConfig
    messages: list[dict[str, Any]] = field(default_factory=list)
    reply: str = ""  #: the assistant turn as generated, tool responses included
    calls: int = 0
    errors: int = 0
    call_after_thinking: bool = False

    def __post_init__(self) -> None:
        declarations = "\n".join(json.dumps(tool_schema(tool)) for tool in self.tools.values())
        self.messages = [
            {"role": "system", "content": SYSTEM_PROMPT.format(tools=declarations)},
            {"role": "user", "content": self.item.question},
        ]

    def thinking(self) -> bool:
        """Whether the reply so far has an open ``<think>`` block."""
        return THINK_OPEN in self.reply and THINK_CLOSE not in self.reply.split(THINK_OPEN, 1)[1]

    async def respond_to_call(self, closing: str = "") -> str:
        """Run the call the reply ends in (``closing`` completes its tag) and return the response text."""
        block = (self.reply + closing).rsplit(CALL_OPEN, 1)[1].split(CALL_CLOSE, 1)[0]
        result = await run_tool_calls(
            f"{CALL_OPEN}{block}{CALL_CLOSE}", self.tools, self.config.tool_timeout_s
        )
        self.calls += 1
        self.errors += result.errors
        return f"\n{result.response_text()}\n"

    @property
    def final_reply(self) -> Optional[str]:
        """The answer part, when the turn ended properly and no call followed the reasoning."""
        return None if self.call_after_thinking else self.reply


def _open_call(text: str) -> bool:
    return text.count(CALL_OPEN) > text.count(CALL_CLOSE)


@dataclass
class _Continuation:
    """One assistant turn being continued around its tool calls."""

    text: str  #: the prompt and everything generated or inserted so far
    turns: list[EpisodeTurn] = field(default_factory=list)
    #: (text, the model's, finish) of every piece, for text-only endpoints
    segments: list[tuple[str, bool, str]] = field(default_factory=list)
    node: Any = None  #: the tracked sequence (token-tracking endpoints)
    generated: int = 0  #: tokens the model generated in this turn
    text_only: bool = False
    end_reason: Optional[str] = None


def _stop_reason(session: InterleavedSession, finish: str, ended: bool, max_tool_calls: int) -> Optional[str]:
    """Why the turn ends after the latest piece, or None when a tool call is to be answered."""
    if finish == "length":
        return END_LENGTH
    if ended or not (_open_call(session.reply) or session.reply.endswith(CALL_CLOSE)):
        return END_DONE  # the model ended its turn (an unclosed call is not run)
    if not session.thinking():
        session.call_after_thinking = True
        return END_DONE
    if session.calls >= max_tool_calls:
        return END_TURN_LIMIT
    return None


class InterleavedThinkingEnv(PythonMathToolUseEnv):
    """Math problems solved with tool calls inside the reasoning (see the module docstring)."""

    name = "tool_use_interleaved_thinking"
    env_config_cls = InterleavedThinkingConfig
    config: InterleavedThinkingConfig

    @classmethod
    def default_env_config(cls) -> InterleavedThinkingConfig:
        base = PythonMathToolUseEnv.default_env_config()
        return InterleavedThinkingConfig(**base.model_dump(exclude_unset=True))

    async def new_session(self, item: ToolUseItem, *, evaluation: bool = False) -> InterleavedSession:
        return InterleavedSession(item, self.tools, self.config)

    async def _nodes(self, managed: Any) -> list[Any]:
        fetch = getattr(managed, "fetch_state", None)
        if fetch is not None:
            await fetch()
        return list(managed.get_state().get("nodes", []))

    def _encode(self, text: str, special: bool = False) -> list[int]:
        ids = self.tokenizer.encode(text, add_special_tokens=special)
        return list(ids["input_ids"] if isinstance(ids, dict) else ids)

    def _episode_from_text(
        self, prompt: str, segments: list[tuple[str, bool, str]], messages: list, end_reason: str
    ) -> Episode:
        """A text-only endpoint's episode: the prompt and inserted text masked, the model's pieces trained,
        all encoded with the environment's tokenizer (no sampling logprobs)."""
        tokens = self._encode(prompt, special=True)
        masks = [-100] * len(tokens)
        turns = []
        for text, trained, finish in segments:
            ids = self._encode(text)
            if trained:
                turns.append(EpisodeTurn(text, finish, 0.0, len(tokens), len(tokens) + len(ids)))
            tokens += ids
            masks += ids if trained else [-100] * len(ids)
        eos = self.tokenizer.eos_token_id
        if end_reason == END_DONE and turns and eos is not None:  # the model closed its turn
            tokens.append(eos)
            masks.append(eos)
            turns[-1].end += 1
        return Episode(messages, tokens, masks, [], turns, end_reason)

    def _sampling(self, evaluation: bool) -> dict[str, Any]:
        cfg = self.config
        if evaluation:
            return {"temperature": cfg.eval_temperature, "split": "eval"}
        return {"temperature": cfg.temperature, "top_p": cfg.top_p}

    async def play(
        self, item: ToolUseItem, *, evaluation: bool = False
    ) -> Optional[tuple[InterleavedSession, Episode]]:
        """Play one episode: one assistant turn continued around its tool calls."""
        session = await self.new_session(item, evaluation=evaluation)
        cfg = self.config
        sampling = self._sampling(evaluation)
        prompt = self.tokenizer.apply_chat_template(
            session.messages, tokenize=False, add_generation_prompt=True
        )
        run = _Continuation(text=prompt)
        try:
            async with self.server.managed_server(tokenizer=self.tokenizer) as managed:
                while True:
                    budget = cfg.max_tokens_per_turn - run.generated
                    room = cfg.max_token_length - (
                        len(run.node.tokens) if run.node else len(self._encode(run.text, True))
                    )
                    if min(budget, room) < 1:
                        run.end_reason = END_LENGTH if budget < 1 else END_CONTEXT
                        break
                    completion = await managed.completion(
                        prompt=run.text, n=1, max_tokens=min(budget, room), stop=[CALL_CLOSE], **sampling
                    )
                    choice = completion.choices[0]
                    finish = choice.finish_reason or "stop"
                    piece, ended = self._take_piece(
                        run, await self._nodes(managed), choice.text or "", finish
                    )
                    session.reply += piece
                    run.text += choice.text or ""
                    run.end_reason = _stop_reason(session, finish, ended, cfg.max_tool_calls)
                    if run.end_reason is not None:
                        break
                    closing = CALL_CLOSE if _open_call(session.reply) else ""
                    inserted = closing + await session.respond_to_call(closing)
                    session.reply += inserted
                    run.text += inserted
                    run.segments.append((inserted, False, ""))
        except EpisodeTrackingError as exc:
            logger.warning("%s: episode left out: %s", self.name, exc)
            return None
        return self._finished(session, run, prompt)

    def _take_piece(
        self, run: _Continuation, nodes: list[Any], choice_text: str, finish: str
    ) -> tuple[str, bool]:
        """Record the piece the model just generated (``choice_text`` as the endpoint returned it);
        ``(its text, whether it ended the turn)``."""
        run.text_only = bool(nodes and (nodes[-1].metadata or {}).get("tokens_from_messages"))
        if run.text_only:  # no token ids from the endpoint: tokens are computed at the end
            piece = choice_text
            run.generated += len(self._encode(piece))
            run.segments.append((piece, True, finish))
            return piece, False
        if len(nodes) != 1:
            raise EpisodeTrackingError(f"expected one tracked sequence, found {len(nodes)}")
        before = len(run.node.tokens) if run.node else 0
        node = run.node = nodes[0]
        trained = sum(1 for m in node.masked_tokens[before:] if m != -100)
        start = max(before, len(node.tokens) - trained)
        piece = decode_reply(self.tokenizer, node.tokens[start:])
        run.generated += len(node.tokens) - start
        run.turns.append(EpisodeTurn(piece, finish, 0.0, start, len(node.tokens)))
        stop_ids = {self.tokenizer.eos_token_id, getattr(self.tokenizer, "pad_token_id", None)}
        return piece, node.tokens[-1] in stop_ids

    def _finished(
        self, session: InterleavedSession, run: _Continuation, prompt: str
    ) -> Optional[tuple[InterleavedSession, Episode]]:
        """The episode of a finished continuation; None when the server gave no token ids."""
        end_reason = run.end_reason or END_TURN_LIMIT
        messages = [*session.messages, {"role": "assistant", "content": session.reply}]
        if run.text_only:
            return session, self._episode_from_text(prompt, run.segments, messages, end_reason)
        node = run.node
        if node is None:
            return session, Episode(messages, [], [], [], [], end_reason)
        if (node.metadata or {}).get("dummy_tokens"):
            logger.warning("%s: episode left out: the server returns no token ids", self.name)
            return None
        episode = Episode(
            messages, list(node.tokens), list(node.masked_tokens), list(node.logprobs), run.turns, end_reason
        )
        return session, episode

    def outcome_reward(self, session: InterleavedSession, episode: Episode) -> float:
        reply = session.final_reply
        if episode.end_reason != END_DONE or reply is None:
            return 0.0
        return 1.0 if answer_is_correct(reply, session.item.answer) else 0.0

    def episode_correct(self, session: InterleavedSession, episode: Episode, score: float) -> bool:
        return self.outcome_reward(session, episode) == 1.0

    def episode_metrics(self, session: InterleavedSession, episode: Episode) -> dict[str, float]:
        return {
            "correct": self.outcome_reward(session, episode),
            "tool_calls": float(session.calls),
            "tool_errors": float(session.errors),
            "call_after_thinking": float(session.call_after_thinking),
        }


if __name__ == "__main__":
    InterleavedThinkingEnv.cli()
