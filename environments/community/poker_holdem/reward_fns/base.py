"""The base of the poker rewards: one score per reply from its decision and the winning action."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, Optional

from atroposlib.envs.reward_fns import RewardFunction

try:
    from environments.community.poker_holdem import actions
except ModuleNotFoundError:  # run as a script: the environment's folder is on the path
    import actions


class PokerReward(RewardFunction):
    """``compute(completions, winner_action=...)``: :meth:`score` of each completion's decision
    (``actions.reply_action``) against the parsed winning action; ``unparsed_score`` for every completion
    when the winning action is missing or not an action."""

    unparsed_score: float = 0.0

    @abstractmethod
    def score(self, decision: Optional[actions.PokerAction], winner: actions.PokerAction) -> float:
        """The reward of one decision (None: the reply states none) against the winning action."""

    def compute(
        self, completions: list[Any], winner_action: Optional[str] = None, **kwargs: Any
    ) -> list[float]:
        winner = actions.parse_action(winner_action or "")
        if winner is None:
            return [self.unparsed_score] * len(completions)
        return [self.score(actions.reply_action(self.get_content(c)), winner) for c in completions]
