"""atroposlib: async microservice framework for reinforcement learning of LLMs.

Environments generate and score rollouts and push them to the trajectory API
(:mod:`atroposlib.api`); trainers pull batches from it. This package is a drop-in
successor of atroposlib 0.4.0: module paths and public names are kept.
"""

__version__ = "0.5.0"
