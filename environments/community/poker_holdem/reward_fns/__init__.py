"""The poker reward: action match (60 %) and bet sizing (40 %), a weighted mean of the two."""

from __future__ import annotations

from typing import Any

from atroposlib.envs.reward_fns import CombinedReward

try:
    from environments.community.poker_holdem.reward_fns.action_match import PokerActionMatchReward
    from environments.community.poker_holdem.reward_fns.bet_sizing import PokerBetSizingReward
except ModuleNotFoundError:  # run as a script: the environment's folder is on the path
    from reward_fns.action_match import PokerActionMatchReward
    from reward_fns.bet_sizing import PokerBetSizingReward


class PokerCombinedReward(CombinedReward):
    """``action_match_weight`` x :class:`PokerActionMatchReward` + ``bet_sizing_weight`` x
    :class:`PokerBetSizingReward`, divided by the weights' sum (``normalization="sum"``): 0.0 to 1.0."""

    def __init__(
        self,
        action_match_weight: float = 0.6,
        bet_sizing_weight: float = 0.4,
        normalization: str = "sum",
        weight: float = 1.0,
        **kwargs: Any,
    ):
        parts = [
            {"type": "pokeractionmatch", "weight": action_match_weight},
            {"type": "pokerbetsizing", "weight": bet_sizing_weight},
        ]
        super().__init__(parts, normalization=normalization, weight=weight, **kwargs)


__all__ = ["PokerActionMatchReward", "PokerBetSizingReward", "PokerCombinedReward"]
