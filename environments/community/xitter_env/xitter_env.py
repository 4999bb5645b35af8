"""Xitter: a social-media agent picks one action on a mocked feed with trending topics.

Each prompt is one agent's turn: the trending topics, the newest posts of its feed (with their ids, authors and
likes), its notifications and its followers' interests. The reply is one action (``actions.py``): ``POST
<text>`` (at most ``max_post_chars``), ``LIKE <post_id>``, ``COMMENT <post_id> <text>`` or ``DO_NOTHING``.

Reward (``feed.py``), with the original's weights: a post earns ``trending_topic_bonus`` (0.2) when it names a
trending topic, ``like_reward_weight`` (0.1) per follower whose interest it names (they like it) and
``comment_reward_weight`` (0.5) per such follower it ``@``-mentions (they comment); liking another agent's post
``perform_like_reward`` (0.05), a comment on one ``perform_comment_reward`` (0.1), ``DO_NOTHING``
``do_nothing_reward`` (0); ``invalid_action_penalty`` (-0.5) for no action, several actions, an action only
inside ``<think>``, an unknown or own post, an over-long text, a post or comment repeating a feed post or only
listing the trends, and topic stuffing (more than ``max_hashtags`` hashtags or ``max_topics_per_post``
topics).

Data: the scenarios of ``xitter_scenarios.jsonl`` (written for this port; the original's feed and trends were
three topics and two posts in code), seeded 80/20 split; ``--env.dataset_path`` / ``--env.eval_dataset_path``
read rows in the same schema (``feed.py``).

``python environments/community/xitter_env/xitter_env.py {serve,process,evaluate}``
"""

from __future__ import annotations

import random
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any, ClassVar, Optional

from pydantic import Field

# Run as a script, the repository root is not on the path yet.
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from atroposlib.envs.data_loading import read_local_rows  # noqa: E402
from atroposlib.envs.declared_defaults import DeclaredDefaults  # noqa: E402
from atroposlib.envs.reply_fields import ReplyFields  # noqa: E402
from atroposlib.envs.single_turn import SingleTurnEnv, SingleTurnEnvConfig  # noqa: E402
from environments.community._judging.train_shares import TrainShares  # noqa: E402
from environments.community.xitter_env.actions import parse_action  # noqa: E402
from environments.community.xitter_env.feed import Scenario, Weights, action_reward, scenarios_from_rows  # noqa: E402

SCENARIOS = Path(__file__).resolve().parent / "xitter_scenarios.jsonl"
SYSTEM_PROMPT = """You are '{agent_id}', an agent on Xitter, a simulated social media platform.
Your goal is to maximize engagement by posting interesting content (Xits), liking relevant Xits,
and making insightful comments. You can also choose to DO_NOTHING.
Current trending topics: {trending_topics}

Recent Xits in your feed (newest first):
{feed_preview}

Your recent notifications:
{notifications_preview}

Your followers and their interests:
{followers}

Choose one action:
1. POST <your_xits_content_here> (max {max_chars} chars)
2. LIKE <post_id_to_like> (e.g., LIKE post_3)
3. COMMENT <post_id_to_comment_on> <your_comment_content_here> (e.g., COMMENT post_2 Great point!)
4. DO_NOTHING

You may think first inside <think> </think> tags. After that, your response should be ONLY the action string
(e.g., "POST This is my new Xit! #awesome")."""


class XitterEnvConfig(SingleTurnEnvConfig):
    """SingleTurnEnvConfig plus the original's reward weights and feed settings."""

    ignored_original_keys: ClassVar[dict[str, str]] = {
        "num_agents": "the agents are those of each scenario",
        "action_cost": "declared by the original but never applied to a reward",
        "track_individual_agent_scores": "per-agent scores are in the evaluation samples (agent_id)",
    }
    dataset_path: Optional[str] = Field(None, description="scenario rows (default: xitter_scenarios.jsonl)")
    eval_dataset_path: Optional[str] = Field(
        None, description="evaluation scenarios (default: 20 % held out)"
    )
    split_seed: int = Field(42, description="seed of the held-out split")
    like_reward_weight: float = Field(0.1, description="reward per follower liking a post")
    comment_reward_weight: float = Field(0.5, description="reward per follower commenting on a post")
    trending_topic_bonus: float = Field(0.2, description="reward for a post naming a trending topic")
    perform_like_reward: float = Field(0.05, description="reward for liking another agent's post")
    perform_comment_reward: float = Field(0.1, description="reward for commenting on another agent's post")
    do_nothing_reward: float = Field(0.0, description="reward for DO_NOTHING")
    invalid_action_penalty: float = Field(-0.5, description="reward of an invalid or missing action")
    max_feed_size: int = Field(20, ge=1, description="newest feed posts shown")
    max_notifications_display: int = Field(5, ge=0, description="newest notifications shown")
    initial_trending_topics: list[str] = Field(
        ["AI in Art", "Climate Solutions", "Space Exploration"],
        description="trending topics of scenarios that list none",
    )
    max_post_chars: int = Field(140, ge=1, description="longest post or comment")
    max_hashtags: int = Field(3, ge=0, description="more hashtags than this make a post spam")
    max_topics_per_post: int = Field(2, ge=1, description="naming more topics than this makes a post spam")


class XitterEnv(TrainShares, ReplyFields, DeclaredDefaults, SingleTurnEnv):
    """Rewards one social-media action on a mocked feed; logs ``train/valid_rate`` and ``train/post_rate``."""

    name = "xitter"
    env_config_cls = XitterEnvConfig
    config: XitterEnvConfig
    default_env_values = dict(group_size=8, temperature=0.7, max_tokens=512, max_token_length=2048)
    #: an evaluation action counts as correct when it earns this much (a post that trends and is liked)
    correct_threshold = 0.3

    def _scenarios(self, path: str) -> list[Scenario]:
        return scenarios_from_rows(read_local_rows(path), path, self.config.initial_trending_topics)

    async def setup(self) -> None:
        cfg = self.config
        scenarios = self._scenarios(cfg.dataset_path or str(SCENARIOS))
        if cfg.eval_dataset_path:
            self.train, self.test = scenarios, self._scenarios(cfg.eval_dataset_path)
            return
        random.Random(cfg.split_seed).shuffle(scenarios)
        held_out = max(1, len(scenarios) // 5) if len(scenarios) > 1 else 0
        self.test, self.train = scenarios[:held_out] or scenarios, scenarios[held_out:]

    @property
    def weights(self) -> Weights:
        """The reward weights of the configuration."""
        return Weights(**{name: getattr(self.config, name) for name in Weights.__dataclass_fields__})

    def prompt_messages(self, item: Scenario) -> list[dict[str, str]]:
        cfg = self.config
        feed = "\n".join(
            f"[{p.id}] @{p.agent_id}: {p.content} ({p.likes} likes)" for p in item.feed[: cfg.max_feed_size]
        )
        notes = item.notifications[-cfg.max_notifications_display :] if cfg.max_notifications_display else ()
        followers = "\n".join(f"@{a}: {', '.join(i)}" for a, i in item.interests if a != item.agent_id)
        system = SYSTEM_PROMPT.format(
            agent_id=item.agent_id,
            trending_topics=", ".join(item.trending_topics),
            feed_preview=feed,
            notifications_preview="\n".join(notes) or "(none)",
            followers=followers or "(none)",
            max_chars=cfg.max_post_chars,
        )
        user = f"It's your turn, {item.agent_id}. What do you do?"
        return [{"role": "system", "content": system}, {"role": "user", "content": user}]

    def score_replies(self, replies: Sequence[str], item: Scenario) -> list[float]:
        actions = [parse_action(reply) for reply in replies]
        rewards = [action_reward(action, item, self.weights) for action in actions]
        penalty = self.config.invalid_action_penalty
        self.record_share("valid_rate", [r != penalty for r in rewards])
        self.record_share("post_rate", [a is not None and a.kind == "post" for a in actions])
        return rewards

    def eval_sample_fields(self, item: Scenario) -> dict[str, Any]:
        return {"scenario": item.id, "agent_id": item.agent_id}

    def reply_fields(self, reply: str, item: Scenario) -> dict[str, Any]:
        action = parse_action(reply)
        return {"action": action.kind if action else None}

    def extra_eval_metrics(self, samples: Sequence[dict[str, Any]]) -> dict[str, float]:
        """``eval/valid_rate`` (actions not penalised) and ``eval/post_rate`` (posts among all replies)."""
        penalty = self.config.invalid_action_penalty
        return {
            "eval/valid_rate": sum(s["score"] != penalty for s in samples) / len(samples),
            "eval/post_rate": sum(s["action"] == "post" for s in samples) / len(samples),
        }


if __name__ == "__main__":
    XitterEnv.cli()
