"""The base of the poker rewards: one score per reply from its decision and the winning action."""

from __future__ import annotations

from abc import abstractmethod
from typing import Any, ClassVar, Optional

from atroposlib.envs.reward_fns import RewardFunction

try:
    from environments.community.poker_holdem import actions
except ModuleNotFoundError:  # run as a script: the environment's folder is on the path
    import actions


class PokerReward(RewardFunction):
    """``compute(completions, winner_action=...)``: :meth:`score` of each completion's decision
    (``actions.reply_action``) against the parsed winning action; ``unparsed_score`` for every completion
    when the winning action is missing or not an action.

    The scores a subclass reads are declared in :attr:`score_settings` (name: default) and taken as
    arguments, by keyword or in the declared order followed by ``weight``; each becomes an attribute.
    """

    unparsed_score: float = 0.0
    #: the score parameters of this reward, in positional order, with their defaults
    score_settings: ClassVar[dict[str, float]] = {}

    def __init__(self, *args: Any, **kwargs: Any):
        names = [*self.score_settings, "weight"]
        if len(args) > len(names):
            raise TypeError(f"{type(self).__name__} takes at most {len(names)} positional arguments")
        for name, value in zip(names, args, strict=False):  # fewer arguments than names
            if name in kwargs:
                raise TypeError(f"{type(self).__name__} got multiple values for argument {name!r}")
            kwargs[name] = value
        scores = {name: kwargs.pop(name, default) for name, default in self.score_settings.items()}
        super().__init__(weight=kwargs.pop("weight", 1.0), **kwargs)
        for name, value in scores.items():
            setattr(self, name, value)

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
