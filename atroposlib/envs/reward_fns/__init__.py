"""Reward functions: a base class, a name registry with lazy loading, and composable built-ins.

Define a reward by subclassing :class:`RewardFunction` and decorating it with ``@registry.register``; build
one by name with ``registry.create("accuracy")`` or from a config dict
``registry.create({"type": "format", "weight": 0.5, "params": {"preferred_tags": ["answer"]}})``. Built-in
names: ``accuracy``, ``accuracyx``, ``formatreasoning``, ``r1``, ``format``, ``reasoningsteps``,
``repetitionpenalty``, ``cosinescaled``, ``crosswordformat``, ``chandasmeter``, ``combined``,
``cascading_r1_math``. Only ``combined`` is registered at import time; the others load on first use.
"""

from .combined_reward import CombinedReward
from .registry import registry
from .reward_function import RewardFunction

__all__ = ["RewardFunction", "registry", "CombinedReward"]
