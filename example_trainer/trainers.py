"""compat: ``example_trainer.trainers`` is :mod:`example_trainer.grpo.modes`."""

from example_trainer._compat import alias

alias(__name__, "example_trainer.grpo.modes")
