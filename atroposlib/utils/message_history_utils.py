"""Helpers that keep multi-turn message histories (and the groups built from them) within budget."""

from __future__ import annotations

import logging
from typing import Any

from atroposlib.group import PER_POSITION_FILL, ScoredDataGroup
from atroposlib.utils.tokenize_for_trainer import MASKED, tokenize_for_trainer

logger = logging.getLogger(__name__)

THINK_OPEN = "<think>"
THINK_CLOSE = "</think>"
AGENT_ROLES = ("agent", "assistant")
ENVIRONMENT_ROLE = "environment"


def _think_span(text: str) -> tuple[int, int] | None:
    """(start of ``<think>``, start of ``</think>``) when both exist in that order, else None."""
    start = text.find(THINK_OPEN)
    end = text.find(THINK_CLOSE)
    if start == -1 or end == -1 or end < start:
        return None
    return start, end


def strip_thinking(response_text: str) -> str:
    """Remove everything from the first ``<think>`` through the first ``</think>`` (tags included).

    Text without a well-ordered pair of tags is returned unchanged.
    """
    span = _think_span(response_text)
    if span is None:
        return response_text
    start, end = span
    return response_text[:start] + response_text[end + len(THINK_CLOSE) :]


def truncate_thinking(response_text: str, tokenizer: Any, max_think_tokens: int) -> str:
    """Shorten the ``<think>`` block of a response to at most ``max_think_tokens`` tokens.

    When the (stripped) thinking is too long, the last paragraph (blank-line separated) is kept if it fits
    and is not the whole thinking; otherwise its last ``max_think_tokens`` tokens are kept. Kept content is
    prefixed with ``"... "`` and re-emitted as ``<think>\\n{content}\\n</think>``; an empty or
    whitespace-only block becomes ``<think></think>``. Text outside the block is kept. Text without a
    well-ordered block, or any error while tokenising, returns the input unchanged.
    """
    try:
        span = _think_span(response_text)
        if span is None:
            return response_text
        start, end = span
        before = response_text[: start + len(THINK_OPEN)].rstrip()
        after = response_text[end:].lstrip()
        thinking = response_text[start + len(THINK_OPEN) : end].strip()
        if not thinking:
            return f"{before}{after}"

        think_ids = tokenizer.encode(thinking, add_special_tokens=False)
        truncated = len(think_ids) > max_think_tokens
        kept_ids = think_ids
        if truncated:
            kept_ids = None
            paragraphs = [p.strip() for p in thinking.split("\n\n") if p.strip()]
            if paragraphs and len(paragraphs[-1]) < len(thinking):
                last_ids = tokenizer.encode(paragraphs[-1], add_special_tokens=False)
                if len(last_ids) <= max_think_tokens:
                    kept_ids = last_ids
            if kept_ids is None:
                kept_ids = think_ids[max(0, len(think_ids) - max(max_think_tokens, 0)) :]

        content = tokenizer.decode(kept_ids, skip_special_tokens=True)
        if truncated and content.strip():
            content = "... " + content.lstrip()
        content = content.strip()
        if not content or content == "...":
            return f"{before}{after}"
        return f"{before}\n{content}\n{after}"
    except Exception as exc:
        logger.error("truncate_thinking failed for %r...: %s", response_text[:200], exc, exc_info=True)
        return response_text


def _pop_budget(messages: list[dict]) -> int:
    """How many messages may be popped from position 1 of one alternative this round (0, 1 or 2).

    The first message and the final exchange (the last agent reply, and the environment observation just
    before it) are always kept; an environment+agent pair is popped together when possible.
    """
    keep_at_end = 0
    if len(messages) > 1 and messages[-1].get("role") in AGENT_ROLES:
        keep_at_end = 1
        if len(messages) > 2 and messages[-2].get("role") == ENVIRONMENT_ROLE:
            keep_at_end = 2
    available = len(messages) - 1 - keep_at_end
    if available <= 0:
        return 0
    pair = (
        available >= 2
        and messages[1].get("role") == ENVIRONMENT_ROLE
        and messages[2].get("role") in AGENT_ROLES
    )
    return 2 if pair else 1


def _common_suffix_len(a: list, b: list) -> int:
    n = 0
    for x, y in zip(reversed(a), reversed(b), strict=False):
        if x != y:
            break
        n += 1
    return n


def _realign_per_token_fields(
    step: dict, new_step: dict, changed: list[int], old_tokens: list, new_tokens: list, new_masks: list
) -> None:
    """Carry per-token fields over to re-tokenised alternatives by aligning the unchanged token suffix.

    Positions in front of the common suffix get the field's fill value (they are masked prompt positions).
    A field is set to None, with a warning, when some trained position is not covered by the suffix.
    """
    for field, fill in PER_POSITION_FILL.items():
        values = step.get(field)
        if not isinstance(values, list) or len(values) != len(old_tokens):
            continue
        realigned = list(values)
        for alt in changed:
            old_value = values[alt]
            if not isinstance(old_value, list) or len(old_value) != len(old_tokens[alt]):
                continue  # not aligned with tokens (e.g. one value per sequence): nothing to shift
            suffix = _common_suffix_len(old_tokens[alt], new_tokens[alt])
            head = len(new_tokens[alt]) - suffix
            if any(m != MASKED for m in new_masks[alt][:head]):
                logger.warning(
                    "ensure_trajectory_token_limit: cannot realign %r of alternative %d after truncation "
                    "(trained tokens changed); setting %r to None for this step",
                    field,
                    alt,
                    field,
                )
                realigned = None
                break
            pad = [list(fill) if isinstance(fill, tuple) else fill for _ in range(head)]
            realigned[alt] = pad + old_value[len(old_value) - suffix :]
        new_step[field] = realigned


def ensure_trajectory_token_limit(
    trajectory: list[ScoredDataGroup], tokenizer: Any, max_trajectory_tokens: int
) -> list[ScoredDataGroup]:
    """Make every step (group) of a multi-turn trajectory fit in ``max_trajectory_tokens`` tokens.

    A step whose longest alternative already fits is returned as it is. Otherwise the oldest messages after
    the first one are removed from all alternatives uniformly (environment+agent pairs when possible,
    always keeping the first message and the final observation/reply) and the changed alternatives are
    re-tokenised with :func:`tokenize_for_trainer`, until the step fits. The rebuilt step keeps every other
    field of the input step (``scores``, ``seed``, ``parsed_actions``, ``overrides``, ...); per-token fields
    such as ``inference_logprobs`` are realigned to the new tokens.

    A step is dropped only when it cannot be made to fit (no tokens, no messages to truncate, nothing left
    to remove, or re-tokenisation failed); each drop is logged at WARNING level with its reason.
    """
    if not trajectory:
        return trajectory
    kept: list[ScoredDataGroup] = []
    for step_idx, step in enumerate(trajectory):
        reason = None
        result = None
        try:
            result, reason = _fit_step(step, tokenizer, max_trajectory_tokens)
        except Exception as exc:  # a bad step must not take the others with it
            reason = f"unexpected error while truncating: {exc!r}"
        if result is None:
            logger.warning(
                "ensure_trajectory_token_limit: dropping step %d of %d: %s", step_idx, len(trajectory), reason
            )
            continue
        kept.append(result)
    if len(kept) < len(trajectory):
        logger.warning(
            "ensure_trajectory_token_limit: kept %d of %d steps (limit %d tokens)",
            len(kept),
            len(trajectory),
            max_trajectory_tokens,
        )
    return kept


def _fit_step(step: ScoredDataGroup, tokenizer: Any, limit: int) -> tuple[ScoredDataGroup | None, str | None]:
    tokens = step.get("tokens")
    if not tokens or not all(isinstance(t, list) for t in tokens):
        return None, "it has no token sequences"
    longest = max(len(t) for t in tokens)
    if longest <= limit:
        return step, None

    messages = step.get("messages")
    masks = step.get("masks")
    if not messages or len(messages) != len(tokens) or not all(isinstance(m, list) for m in messages):
        return None, (
            f"its longest sequence has {longest} tokens (> {limit}) and it carries no per-alternative "
            "messages to truncate"
        )
    if not masks or len(masks) != len(tokens):
        return (
            None,
            f"its longest sequence has {longest} tokens (> {limit}) and its masks are missing or ragged",
        )

    work_messages = [list(m) for m in messages]
    work_tokens = [list(t) for t in tokens]
    work_masks = [list(m) for m in masks]
    changed: set[int] = set()
    current = longest
    while current > limit:
        budgets = [_pop_budget(m) for m in work_messages]
        positive = [b for b in budgets if b > 0]
        if not positive:
            return None, (
                f"still {current} tokens (> {limit}) after removing every removable message "
                "(only the first message and the final exchange are left)"
            )
        pops = min(positive)
        for alt, budget in enumerate(budgets):
            n = min(pops, budget)
            if n == 0:
                continue
            del work_messages[alt][1 : 1 + n]
            try:
                tokenized = tokenize_for_trainer(tokenizer, work_messages[alt])
            except Exception as exc:
                return None, f"re-tokenising alternative {alt} failed: {exc!r}"
            work_tokens[alt] = tokenized["tokens"]
            work_masks[alt] = tokenized["masks"]
            changed.add(alt)
        current = max(len(t) for t in work_tokens)

    new_step: dict = dict(step)
    new_step["messages"] = work_messages
    new_step["tokens"] = work_tokens
    new_step["masks"] = work_masks
    _realign_per_token_fields(step, new_step, sorted(changed), tokens, work_tokens, work_masks)
    logger.info(
        "ensure_trajectory_token_limit: truncated a step from %d to %d tokens (limit %d)",
        longest,
        current,
        limit,
    )
    return new_step, None
