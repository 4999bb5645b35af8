"""compat: ``example_trainer.config`` is :mod:`example_trainer.grpo.config`."""

from example_trainer._compat import alias

alias(__name__, "example_trainer.grpo.config")
