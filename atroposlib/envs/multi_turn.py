"""Multi-turn environments: games and tool-using agents played turn by turn, trained token-exactly.

:class:`MultiTurnEnv` is a :class:`~atroposlib.envs.base.BaseEnv` whose items are played as episodes
(:func:`atroposlib.envs.episodes.run_episode`): ``group_size`` episodes per item, each in its own
ManagedServer context, so a group's sequences hold the server's own token ids and logprobs with only
the model's replies unmasked. A subclass supplies the task:

* :meth:`MultiTurnEnv.new_session` - a fresh :class:`Session` for an item (the opening chat and the
  ``step`` that reacts to each reply);
* :meth:`MultiTurnEnv.outcome_reward` - the end-of-episode reward (default 0: games earn theirs per turn);
* :meth:`MultiTurnEnv.eval_items` - the evaluation set;
* ``setup`` and ``get_next_item`` as for any environment.

Scores: an episode's score is ``outcome + sum_t gamma**t * reward_t`` (``--env.gamma``, default 1:
the undiscounted return). With ``--env.turn_level_advantages true`` the group also carries per-token
``advantages`` (MT-GRPO: each assistant turn's tokens get its turn-level advantage, see
:func:`~atroposlib.envs.episodes.turn_level_advantages`). Every scored group is returned; an episode whose
sequence could not be tracked token-exactly is left out with a warning.

``evaluate`` plays every evaluation item once at ``eval_temperature``, prints a summary line, logs
``eval/mean_score``, ``eval/percent_correct`` (share of episodes :meth:`MultiTurnEnv.episode_correct`
counts as correct: by default a score of at least :attr:`MultiTurnEnv.correct_threshold`) and the means of :meth:`MultiTurnEnv.episode_metrics`, and
writes samples when ``data_dir_to_save_evals`` is set.
"""

from __future__ import annotations

import asyncio
import logging
from abc import abstractmethod
from collections.abc import Sequence
from typing import Any, Optional, Protocol

from pydantic import Field

from atroposlib.envs.base import BaseEnv, BaseEnvConfig
from atroposlib.envs.episodes import (
    Episode,
    EpisodeTrackingError,
    Feedback,
    episodes_to_group,
    run_episode,
    token_advantages,
    turn_level_advantages,
)
from atroposlib.envs.groups import ScoredDataGroup
from atroposlib.envs.reporting import EvalReporting, IterCheckpoint, mean, summary_line

logger = logging.getLogger(__name__)


class Session(Protocol):
    """One episode's environment side: the opening chat and the reaction to each reply."""

    #: The chat the episode opens with (system and user turns).
    messages: list[dict[str, Any]]

    async def step(self, reply: str, turn: int) -> Feedback:
        """React to the model's reply of turn ``turn`` (0-based)."""
        ...


class MultiTurnEnvConfig(BaseEnvConfig):
    """BaseEnvConfig plus the episode settings shared by multi-turn environments."""

    max_turns: int = Field(10, ge=1, description="model turns per episode; the episode ends after the last")
    max_tokens_per_turn: Optional[int] = Field(
        None, ge=1, description="generation budget of one reply in tokens (default: max_token_length)"
    )
    temperature: float = Field(1.0, ge=0.0, description="sampling temperature of training episodes")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="nucleus-sampling mass of training episodes")
    eval_temperature: float = Field(0.0, ge=0.0, description="sampling temperature of evaluation episodes")
    eval_limit: Optional[int] = Field(None, ge=1, description="evaluate on at most this many items")
    gamma: float = Field(
        1.0, ge=0.0, le=1.0, description="discount of per-turn rewards in the score (1: undiscounted return)"
    )
    turn_level_advantages: bool = Field(
        False, description="send MT-GRPO per-token advantages (each turn's tokens get its turn advantage)"
    )
    turn_advantage_weight: float = Field(
        1.0, ge=0.0, description="weight of the per-turn rewards against the outcome in turn advantages"
    )


class MultiTurnEnv(IterCheckpoint, EvalReporting, BaseEnv):
    """Items played as multi-turn episodes (see the module docstring)."""

    env_config_cls = MultiTurnEnvConfig
    #: ``serve`` trains on the inference server's own token ids (OpenAI-type servers are refused).
    trains_token_ids: bool = True
    config: MultiTurnEnvConfig
    #: An evaluation episode counts as correct when its score is at least this.
    correct_threshold: float = 1.0

    def __init__(self, config: MultiTurnEnvConfig, server_configs, slurm=False, testing=False):
        super().__init__(config, server_configs, slurm, testing)
        self.train_scores: list[float] = []
        self.train_metrics: dict[str, list[float]] = {}

    # -- the task (subclass hooks) ----------------------------------------------------------------------
    @abstractmethod
    async def new_session(self, item: Any, *, evaluation: bool = False) -> Session:
        """A fresh session for one episode of ``item``."""

    def outcome_reward(self, session: Session, episode: Episode) -> float:
        """The end-of-episode reward, added to the (discounted) per-turn rewards (default 0)."""
        return 0.0

    @abstractmethod
    def eval_items(self) -> Sequence[Any]:
        """The evaluation set (before ``eval_limit`` is applied)."""

    def episode_metrics(self, session: Session, episode: Episode) -> dict[str, float]:
        """Numbers describing one episode (e.g. ``won``); averaged into ``train/...`` and ``eval/...``."""
        return {}

    def episode_correct(self, session: Session, episode: Episode, score: float) -> bool:
        """Whether an evaluation episode counts as correct (default: ``score >= correct_threshold``)."""
        return score >= self.correct_threshold

    def eval_sample_fields(self, item: Any, session: Session, episode: Episode) -> dict[str, Any]:
        """Extra fields written with each evaluation sample."""
        return {}

    # -- playing ----------------------------------------------------------------------------------------
    @property
    def generation_budget(self) -> int:
        """Tokens one reply may use: ``max_tokens_per_turn`` or, when unset, ``max_token_length``."""
        return self.config.max_tokens_per_turn or self.config.max_token_length

    async def play(self, item: Any, *, evaluation: bool = False) -> Optional[tuple[Session, Episode]]:
        """Play one episode of ``item``; ``None`` (with a warning) when it cannot be tracked token-exactly."""
        session = await self.new_session(item, evaluation=evaluation)
        sampling: dict[str, Any] = {"temperature": self.config.temperature, "top_p": self.config.top_p}
        if evaluation:
            sampling = {"temperature": self.config.eval_temperature, "split": "eval"}
        try:
            episode = await run_episode(
                self.server,
                self.tokenizer,
                session.messages,
                session.step,
                max_turns=self.config.max_turns,
                max_tokens_per_turn=self.generation_budget,
                max_total_tokens=self.config.max_token_length,
                **sampling,
            )
        except EpisodeTrackingError as exc:
            logger.warning("%s: episode left out: %s", self.name, exc)
            return None
        finally:
            close = getattr(session, "close", None)
            if close is not None:
                result = close()
                if asyncio.iscoroutine(result):
                    await result
        return session, episode

    def score(self, session: Session, episode: Episode) -> float:
        """``outcome_reward + sum_t gamma**t * reward_t``."""
        return float(self.outcome_reward(session, episode)) + episode.discounted_return(self.config.gamma)

    async def collect_trajectories(self, item: Any) -> tuple[Optional[ScoredDataGroup], list]:
        played = await asyncio.gather(*(self.play(item) for _ in range(self.config.group_size)))
        played = [p for p in played if p is not None]
        if len(played) < 2:
            return None, []
        episodes = [e for _, e in played]
        outcomes = [float(self.outcome_reward(s, e)) for s, e in played]
        scores = [o + e.discounted_return(self.config.gamma) for o, e in zip(outcomes, episodes, strict=True)]
        self.train_scores.extend(scores)
        for session, episode in played:
            for key, value in self.episode_metrics(session, episode).items():
                self.train_metrics.setdefault(key, []).append(float(value))
        advantages = None
        if self.config.turn_level_advantages:
            per_turn = self.turn_advantages(item, episodes, outcomes)
            advantages = [token_advantages(e, row) for e, row in zip(episodes, per_turn, strict=True)]
        return episodes_to_group(episodes, scores, advantages), []

    def turn_advantages(
        self, item: Any, episodes: Sequence[Episode], outcomes: Sequence[float]
    ) -> list[list[float]]:
        """One advantage per played turn of each episode of the group playing ``item`` (with
        ``turn_level_advantages``): :func:`~atroposlib.envs.episodes.turn_level_advantages` of the turn
        rewards and outcomes, weighted by ``turn_advantage_weight``. Override for another credit rule."""
        return turn_level_advantages(
            [e.turn_rewards for e in episodes], list(outcomes), self.config.turn_advantage_weight
        )

    # -- evaluation -------------------------------------------------------------------------------------
    async def _eval_one(self, item: Any, sem: asyncio.Semaphore) -> Optional[dict[str, Any]]:
        async with sem:
            played = await self.play(item, evaluation=True)
        if played is None:
            return None
        session, episode = played
        score = self.score(session, episode)
        return {
            "messages": episode.messages,
            **self.eval_sample_fields(item, session, episode),
            "score": score,
            "correct": bool(self.episode_correct(session, episode, score)),
            "turns": len(episode.turns),
            "end_reason": episode.end_reason,
            "metrics": self.episode_metrics(session, episode),
        }

    async def evaluate(self, *args: Any, **kwargs: Any) -> None:
        items = self.limited_eval_items()
        if not items:
            logger.warning("%s: no evaluation items; nothing evaluated", self.name)
            return
        results, start, end = await self.run_evaluation(self._eval_one, items)
        samples = [r for r in results if r is not None]
        if not samples:
            logger.warning("%s: no evaluation episode could be played", self.name)
            return
        metrics = {
            "eval/mean_score": mean([s["score"] for s in samples]),
            "eval/percent_correct": mean([1.0 if s["correct"] else 0.0 for s in samples]),
            "eval/mean_turns": mean([s["turns"] for s in samples]),
        }
        keys = sorted({k for s in samples for k in s["metrics"]})
        for key in keys:
            metrics[f"eval/{key}"] = mean([s["metrics"][key] for s in samples if key in s["metrics"]])
        await self.report_evaluation(
            metrics,
            samples,
            start,
            end,
            {
                "temperature": self.config.eval_temperature,
                "max_tokens": self.generation_budget,
                "max_turns": self.config.max_turns,
            },
            summary_line(self.name, len(samples), "episodes", metrics),
        )

    # -- logging and checkpoints ------------------------------------------------------------------------
    async def wandb_log(self, wandb_metrics: Optional[dict] = None) -> None:
        wandb_metrics = dict(wandb_metrics or {})
        if self.train_scores:
            wandb_metrics["train/mean_score"] = mean(self.train_scores)
        for key, values in self.train_metrics.items():
            if values:
                wandb_metrics[f"train/{key}"] = mean(values)
        self.train_scores = []
        self.train_metrics = {}
        await super().wandb_log(wandb_metrics)
