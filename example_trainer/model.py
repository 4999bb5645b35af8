"""compat: ``example_trainer.model`` is :mod:`example_trainer.grpo.model`."""

from example_trainer._compat import alias

alias(__name__, "example_trainer.grpo.model")
