"""Xitter scenarios (a mocked feed, trending topics, notifications and an audience) and the reward of an action.

A scenario row has ``agent_id`` (the acting agent), ``feed`` (posts: ``id``, ``agent_id``, ``content``,
optional ``likes``), optional ``agents`` (the audience: ``agent_id`` and ``interests``, a list of topics),
``trending_topics`` (a list; default: the configuration's ``initial_trending_topics``), ``notifications`` (a
list of strings) and ``id``.

The audience reacts to a post at once: every other agent with an interest the post mentions likes it, and
those of them the post ``@``-mentions also comment. A topic is mentioned by its words (``climate solutions``)
or as a hashtag (``#ClimateSolutions``), ignoring case.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any, NamedTuple, Optional

from atroposlib.envs.data_loading import DatasetError, check_rows
from environments.community.xitter_env.actions import Action

_NON_WORD = re.compile(r"[^a-z0-9]+")
_HASHTAG = re.compile(r"#(\w+)")
_MENTION = re.compile(r"@(\w+)")


class Post(NamedTuple):
    """A post of the feed."""

    id: str
    agent_id: str
    content: str
    likes: int


@dataclass(frozen=True)
class Scenario:
    """One turn of one agent: what it sees and who reads it."""

    id: str
    agent_id: str
    feed: tuple[Post, ...]
    interests: tuple[tuple[str, tuple[str, ...]], ...]  # (agent_id, interests) of the audience
    trending_topics: tuple[str, ...]
    notifications: tuple[str, ...]


@dataclass(frozen=True)
class Weights:
    """The reward of each outcome (the configuration's values)."""

    like_reward_weight: float
    comment_reward_weight: float
    trending_topic_bonus: float
    perform_like_reward: float
    perform_comment_reward: float
    do_nothing_reward: float
    invalid_action_penalty: float
    max_post_chars: int
    max_hashtags: int
    max_topics_per_post: int


def _words(text: str) -> str:
    return f" {_NON_WORD.sub(' ', text.lower()).strip()} "


def mentions(text: str, topic: str) -> bool:
    """Whether ``text`` names ``topic`` by its words or as a hashtag (ignoring case and punctuation)."""
    words = _words(topic)
    if words.strip() and words in _words(text):
        return True
    compact = words.replace(" ", "")
    return any(_NON_WORD.sub("", tag.lower()) == compact for tag in _HASHTAG.findall(text))


def _rows_of(value: Any, source: str, index: int, field: str) -> list:
    if not isinstance(value, list):
        raise DatasetError(f"{source}: row {index}: field {field!r} must be a list")
    return value


def _post(value: Any, source: str, index: int) -> Post:
    if not isinstance(value, dict) or not all(
        isinstance(value.get(k), str) for k in ("id", "agent_id", "content")
    ):
        raise DatasetError(f"{source}: row {index}: field 'feed' needs posts with id, agent_id and content")
    return Post(value["id"], value["agent_id"], value["content"], int(value.get("likes") or 0))


def scenarios_from_rows(rows: list[dict[str, Any]], source: str, default_trends: list[str]) -> list[Scenario]:
    """Scenarios of ``rows``; :class:`DatasetError` naming the row and field for a missing or malformed one."""
    check_rows(rows, ["agent_id", "feed"], source)
    scenarios = []
    for index, row in enumerate(rows):
        feed = tuple(_post(p, source, index) for p in _rows_of(row["feed"], source, index, "feed"))
        if not feed:
            raise DatasetError(f"{source}: row {index}: field 'feed' has no post")
        audience = []
        for agent in _rows_of(row.get("agents") or [], source, index, "agents"):
            if not isinstance(agent, dict) or not isinstance(agent.get("agent_id"), str):
                raise DatasetError(f"{source}: row {index}: field 'agents' needs agent_id and interests")
            interests = _rows_of(agent.get("interests") or [], source, index, "agents.interests")
            audience.append((agent["agent_id"], tuple(str(i) for i in interests)))
        trends = _rows_of(row.get("trending_topics") or default_trends, source, index, "trending_topics")
        notes = _rows_of(row.get("notifications") or [], source, index, "notifications")
        scenarios.append(
            Scenario(
                str(row.get("id", index)),
                str(row["agent_id"]),
                feed,
                tuple(audience),
                tuple(str(t) for t in trends),
                tuple(str(n) for n in notes),
            )
        )
    return scenarios


def _is_echo(text: str, scenario: Scenario) -> bool:
    """A post or comment repeating a feed post, or only listing the trending topics."""
    if any(_words(post.content) in _words(text) for post in scenario.feed):
        return True
    leftover = _words(_HASHTAG.sub(" ", text))
    for topic in scenario.trending_topics:
        leftover = leftover.replace(_words(topic), " ")
    return not leftover.strip()


def _post_reward(text: str, scenario: Scenario, weights: Weights) -> Optional[float]:
    """The reward of a post, or None when it is invalid (too long, an echo, spam)."""
    if len(text) > weights.max_post_chars or _is_echo(text, scenario):
        return None
    topics = {t.lower() for t in scenario.trending_topics} | {
        i.lower() for _, ints in scenario.interests for i in ints
    }
    named = {t for t in topics if mentions(text, t)}
    if len(_HASHTAG.findall(text)) > weights.max_hashtags or len(named) > weights.max_topics_per_post:
        return None  # topic stuffing
    mentioned = {m.lower() for m in _MENTION.findall(text)}
    readers = [
        agent
        for agent, interests in scenario.interests
        if agent != scenario.agent_id and any(mentions(text, i) for i in interests)
    ]
    comments = sum(1 for agent in readers if agent.lower() in mentioned)
    trending = any(mentions(text, t) for t in scenario.trending_topics)
    return (
        weights.trending_topic_bonus * trending
        + weights.like_reward_weight * len(readers)
        + weights.comment_reward_weight * comments
    )


def action_reward(action: Optional[Action], scenario: Scenario, weights: Weights) -> float:
    """The reward of ``action`` in ``scenario`` (see the environment's docstring)."""
    if action is None:
        return weights.invalid_action_penalty
    if action.kind == "do_nothing":
        return weights.do_nothing_reward
    if action.kind == "post":
        reward = _post_reward(action.text, scenario, weights)
        return weights.invalid_action_penalty if reward is None else round(reward, 6)
    target = next((p for p in scenario.feed if p.id == action.post_id), None)
    if target is None or target.agent_id == scenario.agent_id:
        return weights.invalid_action_penalty  # no such post, or the agent's own
    if action.kind == "like":
        return weights.perform_like_reward
    if len(action.text) > weights.max_post_chars or _is_echo(action.text, scenario):
        return weights.invalid_action_penalty
    return weights.perform_comment_reward
