"""``PokerBetSizingReward``: how precisely a reply sizes its bet against the winning player's."""

from __future__ import annotations

from typing import Optional

from atroposlib.envs.reward_fns import registry

try:
    from environments.community.poker_holdem import actions
    from environments.community.poker_holdem.reward_fns.base import PokerReward
except ModuleNotFoundError:  # run as a script: the environment's folder is on the path
    import actions
    from reward_fns.base import PokerReward


@registry.register
class PokerBetSizingReward(PokerReward):
    """The sizing part of the reward. For a winning action with an amount: a reply that bets or raises an
    amount scores ``perfect_match_score`` (1.0) minus the relative deviation ``(max - min) / min`` scaled to
    ``min_score`` at ``max_deviation_pct`` (50 %), and ``min_score`` beyond it or without an amount. For a
    winning action without an amount there is nothing to size: the winner's action type scores
    ``perfect_match_score``, anything else ``min_score``. A reply without one decision scores ``min_score``.
    """

    score_settings = {"perfect_match_score": 1.0, "min_score": 0.0, "max_deviation_pct": 0.5}
    perfect_match_score: float
    min_score: float
    max_deviation_pct: float

    @property
    def unparsed_score(self) -> float:  # type: ignore[override]
        """A completion scores ``min_score`` when the winning action cannot be read."""
        return self.min_score

    def score(self, decision: Optional[actions.PokerAction], winner: actions.PokerAction) -> float:
        if decision is None:
            return self.min_score
        if winner.amount is None:
            return self.perfect_match_score if decision.kind == winner.kind else self.min_score
        if decision.kind not in actions.AGGRESSIVE or decision.amount is None or decision.amount <= 0:
            return self.min_score
        low, high = sorted((decision.amount, winner.amount))
        deviation = (high - low) / low if low > 0 else float("inf")
        if deviation > self.max_deviation_pct:
            return self.min_score
        span = self.perfect_match_score - self.min_score
        return self.perfect_match_score - deviation / self.max_deviation_pct * span
