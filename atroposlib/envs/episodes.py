"""Multi-turn chat episodes through ``ManagedServer``: the model's own tokens are trained, nothing else.

:func:`run_episode` plays one episode: the model answers the chat, a *session* (the game, the tool
runner, ...) reacts to the reply with new messages (observations, tool responses) and an optional
per-turn reward, and the loop goes on until the session says the episode is over, a turn limit or the
context budget is reached, or a reply is cut off at its token budget.

Every turn goes through one ``self.server.managed_server(tokenizer=...)`` context. ManagedServer
extends the episode's single tracked sequence turn by turn, so the result holds the token ids and
logprobs the inference server produced: the model's replies unmasked (their token ids in ``masks``,
their sampled logprobs in ``logprobs``), the prompt, observations and tool responses masked (``-100``
and logprob ``1.0``).

Two views of each reply are kept. The chat history sent back to the model holds the reply as
ManagedServer decoded it (special tokens skipped), which is what lets ManagedServer recognise the next
prompt as an extension of the tracked sequence; sessions and the recorded ``messages`` get the reply
decoded *with* special tokens (only the end-of-text token removed), because some tokenizers make tags
such as ``<think>`` or ``<tool_call>`` special tokens. When a chat template rewrites earlier assistant
turns so that the extension cannot be recognised, :class:`EpisodeTrackingError` is raised rather than
training on a misaligned sequence.

:func:`turn_level_advantages` and :func:`token_advantages` give MT-GRPO-style per-token advantages (each
assistant turn's tokens get that turn's advantage); :func:`episodes_to_group` builds the scored group.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional, Protocol

from atroposlib.envs.groups import ScoredDataGroup

logger = logging.getLogger(__name__)

#: How an episode ended (``Episode.end_reason``).
END_DONE = "done"  # the session ended it (game over, final answer, invalid action)
END_TURN_LIMIT = "turn_limit"  # max_turns model turns were played
END_LENGTH = "length"  # the last reply was cut off at its token budget
END_CONTEXT = "context"  # no room left in the sequence budget for another reply


class EpisodeTrackingError(RuntimeError):
    """ManagedServer could not extend the episode's sequence (the chat template changed an earlier turn,
    or the backend returns placeholder tokens): the episode cannot be trained token-exactly."""


@dataclass
class Feedback:
    """A session's answer to one model reply.

    Attributes:
        messages: chat messages appended after the reply (observations, tool responses), each a
            ``{"role": ..., "content": ...}`` dict; ignored when ``done``.
        done: the episode is over.
        reward: this turn's reward (a game step's reward, a per-turn tool reward).
        info: anything the environment wants to keep about the turn (logged, not trained).
    """

    messages: list[dict[str, Any]] = field(default_factory=list)
    done: bool = False
    reward: float = 0.0
    info: dict[str, Any] = field(default_factory=dict)


class EpisodeSession(Protocol):
    """One episode's environment side. ``step`` is awaited once per model reply, in order."""

    async def step(self, reply: str, turn: int) -> Feedback:
        """React to the model's ``reply`` of turn ``turn`` (0-based); ``reply`` keeps special-token text."""
        ...


@dataclass
class EpisodeTurn:
    """One model turn: its reply, how generation finished, its reward and where its tokens are."""

    reply: str
    finish_reason: str
    reward: float
    start: int  #: index of the turn's first generated token in ``Episode.tokens``
    end: int  #: index one past its last generated token
    info: dict[str, Any] = field(default_factory=dict)


@dataclass
class Episode:
    """A played episode: the tracked sequence and the turns.

    ``tokens`` / ``masks`` / ``logprobs`` are aligned: ``masks`` is ``-100`` except on the model's own
    generated tokens (where it is the token id); ``logprobs`` is ``1.0`` on masked positions.
    ``messages`` is the conversation (replies with their special-token text).
    """

    messages: list[dict[str, Any]]
    tokens: list[int]
    masks: list[int]
    logprobs: list[float]
    turns: list[EpisodeTurn]
    end_reason: str

    @property
    def replies(self) -> list[str]:
        """The model's replies in order."""
        return [turn.reply for turn in self.turns]

    @property
    def turn_rewards(self) -> list[float]:
        """Each turn's reward in order."""
        return [turn.reward for turn in self.turns]

    def discounted_return(self, gamma: float = 1.0) -> float:
        """``sum_t gamma**t * reward_t`` over the turns (``gamma = 1``: the plain sum)."""
        return sum((gamma**t) * turn.reward for t, turn in enumerate(self.turns))


def _render_length(tokenizer: Any, messages: list[dict[str, Any]]) -> int:
    text = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)
    ids = tokenizer.encode(text, add_special_tokens=False)
    return len(ids["input_ids"] if isinstance(ids, dict) else ids)


def _end_of_text_ids(tokenizer: Any) -> set[int]:
    ids = {getattr(tokenizer, "eos_token_id", None), getattr(tokenizer, "pad_token_id", None)}
    ids.discard(None)
    return ids


def decode_reply(tokenizer: Any, token_ids: Sequence[int]) -> str:
    """The text of generated ``token_ids`` with special tokens kept, trailing end-of-text tokens removed."""
    ids = list(token_ids)
    stop = _end_of_text_ids(tokenizer)
    while ids and ids[-1] in stop:
        ids.pop()
    return tokenizer.decode(ids, skip_special_tokens=False)


async def _tracked_node(managed: Any) -> Any:
    fetch = getattr(managed, "fetch_state", None)
    if fetch is not None:  # a proxy session keeps its nodes remotely
        await fetch()
    nodes = managed.get_state().get("nodes", [])
    if len(nodes) != 1:
        raise EpisodeTrackingError(
            f"expected one tracked sequence for the episode, found {len(nodes)}: the chat template does not "
            "reproduce the model's earlier replies verbatim, so the episode cannot be trained token-exactly"
        )
    node = nodes[0]
    if (node.metadata or {}).get("dummy_tokens"):
        raise EpisodeTrackingError(
            "the inference server returns no token ids (OpenAI endpoint): use server_type vllm or sglang"
        )
    return node


def _reply_start(node: Any) -> int:
    """Index of the first token of the latest reply: the trailing run of trained (unmasked) tokens."""
    generated = 0
    for mask in reversed(node.masked_tokens):
        if mask == -100:
            break
        generated += 1
    return len(node.tokens) - generated


def _reply_text(tokenizer: Any, node: Any, choice: Any, start: int) -> str:
    """The latest reply as the model wrote it (special-token text kept)."""
    if (node.metadata or {}).get("tokens_from_messages"):
        # A text-only endpoint: the tokens are the template's rendering; the reply is its text.
        return choice.message.content or ""
    return decode_reply(tokenizer, node.tokens[start:])


def _finite_reward(feedback: Feedback, turn: int) -> float:
    reward = float(feedback.reward)
    if not math.isfinite(reward):
        raise ValueError(f"turn {turn}: the session returned a non-finite reward {feedback.reward!r}")
    return reward


async def run_episode(
    server: Any,
    tokenizer: Any,
    messages: Sequence[dict[str, Any]],
    step: Callable[[str, int], Awaitable[Feedback]],
    *,
    max_turns: int,
    max_tokens_per_turn: int,
    max_total_tokens: int,
    **sampling: Any,
) -> Episode:
    """Play one episode and return it (see the module docstring).

    Args:
        server: the environment's ``ServerManager`` (``self.server``); the episode runs in one
            ``server.managed_server(tokenizer=tokenizer)`` context.
        tokenizer: the environment's tokenizer (renders and measures the chat, decodes replies).
        messages: the opening chat (system and user turns).
        step: ``await step(reply, turn) -> Feedback``, usually a session's ``step``.
        max_turns: at most this many model replies (>= 1).
        max_tokens_per_turn: generation budget of one reply, tokens.
        max_total_tokens: budget of the whole sequence, tokens: a reply gets at most what is left after
            the prompt; with nothing left the episode ends (``end_reason == "context"``).
        sampling: passed to every chat completion (``temperature``, ``top_p``, ``split`` ...).

    Raises:
        EpisodeTrackingError: the sequence could not be extended token-exactly.
        ValueError: ``max_turns`` < 1.
    Errors of the inference server and of ``step`` propagate.
    """
    if max_turns < 1:
        raise ValueError(f"max_turns must be at least 1, got {max_turns}")
    history = [dict(m) for m in messages]  # what the model is sent
    record = [dict(m) for m in messages]  # what was said, special-token text kept
    turns: list[EpisodeTurn] = []
    end_reason = END_TURN_LIMIT
    node = None
    async with server.managed_server(tokenizer=tokenizer) as managed:
        for turn in range(max_turns):
            budget = min(max_tokens_per_turn, max_total_tokens - _render_length(tokenizer, history))
            if budget < 1:
                end_reason = END_CONTEXT
                break
            completion = await managed.chat_completion(messages=history, n=1, max_tokens=budget, **sampling)
            choice = completion.choices[0]
            node = await _tracked_node(managed)
            start = _reply_start(node)
            reply = _reply_text(tokenizer, node, choice, start)
            history.append({"role": "assistant", "content": choice.message.content or ""})
            record.append({"role": "assistant", "content": reply})
            finish = choice.finish_reason or "stop"
            if finish == "length":
                turns.append(EpisodeTurn(reply, finish, 0.0, start, len(node.tokens)))
                end_reason = END_LENGTH
                break
            feedback = await step(reply, turn)
            reward = _finite_reward(feedback, turn)
            turns.append(EpisodeTurn(reply, finish, reward, start, len(node.tokens), dict(feedback.info)))
            if feedback.done:
                end_reason = END_DONE
                break
            history.extend(dict(m) for m in feedback.messages)
            record.extend(dict(m) for m in feedback.messages)
    if node is None:
        return Episode(record, [], [], [], [], end_reason)
    return Episode(
        messages=record,
        tokens=list(node.tokens),
        masks=list(node.masked_tokens),
        logprobs=list(node.logprobs),
        turns=turns,
        end_reason=end_reason,
    )


# ---------------------------------------------------------------------------------------------------------
# Turn-level credit assignment
# ---------------------------------------------------------------------------------------------------------
def standardised(values: Sequence[float]) -> list[float]:
    """``values`` minus their mean, over their population standard deviation (all 0.0 when they are equal)."""
    mean = sum(values) / len(values)
    var = sum((v - mean) ** 2 for v in values) / len(values)
    std = math.sqrt(var)
    if std < 1e-8:
        return [0.0 for _ in values]
    return [(v - mean) / std for v in values]


def turn_level_advantages(
    turn_rewards: Sequence[Sequence[float]], outcomes: Sequence[float], turn_weight: float = 1.0
) -> list[list[float]]:
    """MT-GRPO-style advantages, one per turn of each episode of a group.

    ``turn_rewards[i][t]`` is episode ``i``'s reward at turn ``t``; ``outcomes[i]`` its final reward.
    Each turn's rewards are normalised across the episodes that reached that turn (mean 0, population
    std 1; all equal -> 0), the outcomes across the group. Turn ``t`` of episode ``i`` gets
    ``turn_weight * sum_{t' >= t} norm_turn[i][t'] + norm_outcome[i]``: a turn is credited with the
    turn rewards that follow it and with the outcome.

    Raises ValueError when the two sequences differ in length or the group is empty.
    """
    if len(turn_rewards) != len(outcomes):
        raise ValueError(f"{len(turn_rewards)} episodes of turn rewards but {len(outcomes)} outcomes")
    if not outcomes:
        raise ValueError("an empty group has no advantages")
    outcome_adv = standardised([float(o) for o in outcomes])
    longest = max((len(r) for r in turn_rewards), default=0)
    norm = [[0.0] * len(r) for r in turn_rewards]
    for t in range(longest):
        reached = [i for i, r in enumerate(turn_rewards) if len(r) > t]
        for i, value in zip(reached, standardised([float(turn_rewards[i][t]) for i in reached]), strict=True):
            norm[i][t] = value
    result = []
    for i, row in enumerate(norm):
        suffix, advs = 0.0, [0.0] * len(row)
        for t in range(len(row) - 1, -1, -1):
            suffix += row[t]
            advs[t] = turn_weight * suffix + outcome_adv[i]
        result.append(advs)
    return result


def token_advantages(episode: Episode, per_turn: Sequence[float]) -> list[float]:
    """Per-token advantages of ``episode``: each turn's generated tokens get ``per_turn[turn]``, every
    other position 0.0. Raises ValueError when ``per_turn`` does not have one value per turn."""
    if len(per_turn) != len(episode.turns):
        raise ValueError(f"{len(per_turn)} turn advantages for {len(episode.turns)} turns")
    values = [0.0] * len(episode.tokens)
    for turn, advantage in zip(episode.turns, per_turn, strict=True):
        for pos in range(turn.start, turn.end):
            values[pos] = float(advantage)
    return values


def episodes_to_group(
    episodes: Sequence[Episode],
    scores: Sequence[float],
    advantages: Optional[Sequence[Sequence[float]]] = None,
) -> ScoredDataGroup:
    """A scored group of ``episodes``: tokens, masks, inference logprobs, messages, ``scores`` and, when
    given, per-token ``advantages`` (one list per episode, aligned with its tokens)."""
    if len(episodes) != len(scores):
        raise ValueError(f"{len(episodes)} episodes but {len(scores)} scores")
    group = ScoredDataGroup(
        tokens=[list(e.tokens) for e in episodes],
        masks=[list(e.masks) for e in episodes],
        scores=[float(s) for s in scores],
        inference_logprobs=[list(e.logprobs) for e in episodes],
        messages=[[dict(m) for m in e.messages] for e in episodes],
    )
    if advantages is not None:
        if len(advantages) != len(episodes):
            raise ValueError(f"{len(advantages)} advantage rows for {len(episodes)} episodes")
        group["advantages"] = [list(row) for row in advantages]
    return group
