"""compat: ``example_trainer.training`` is :mod:`example_trainer.grpo.step`."""

from example_trainer._compat import alias

alias(__name__, "example_trainer.grpo.step")
