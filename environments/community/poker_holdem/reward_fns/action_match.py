"""``PokerActionMatchReward``: how closely a reply's decision matches the winning player's action."""

from __future__ import annotations

from typing import Optional

from atroposlib.envs.reward_fns import registry

try:
    from environments.community.poker_holdem import actions
    from environments.community.poker_holdem.reward_fns.base import PokerReward
except ModuleNotFoundError:  # run as a script: the environment's folder is on the path
    import actions
    from reward_fns.base import PokerReward


def amount_ratio(got: Optional[float], want: Optional[float]) -> float:
    """``min / max`` of two amounts (1.0 for equal ones, 0.0 when either is missing or not positive)."""
    if got is None or want is None or got <= 0 or want <= 0:
        return 0.0
    return min(got, want) / max(got, want)


@registry.register
class PokerActionMatchReward(PokerReward):
    """The action part of the reward: ``exact_match_score`` (1.0) for the winner's action type (for a sized
    winning action, ``action_type_score`` (0.7) plus the rest scaled by the ratio of the amounts, 0.7 when the
    reply gives none), ``related_action_score`` (0.5) for another action of the same family (aggressive:
    bet, raise, re-raise, all-in; passive: check, call), 0.0 otherwise or for a reply without one decision.

    """

    score_settings = {"exact_match_score": 1.0, "action_type_score": 0.7, "related_action_score": 0.5}
    exact_match_score: float
    action_type_score: float
    related_action_score: float

    def score(self, decision: Optional[actions.PokerAction], winner: actions.PokerAction) -> float:
        """The reward of one decision against the winning action."""
        if decision is None:
            return 0.0
        if decision.kind == winner.kind:
            if winner.amount is None:
                return self.exact_match_score
            ratio = amount_ratio(decision.amount, winner.amount)
            return self.action_type_score + (self.exact_match_score - self.action_type_score) * ratio
        return self.related_action_score if decision.related(winner) else 0.0
