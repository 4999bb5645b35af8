"""compat: ``example_trainer.data`` is :mod:`example_trainer.grpo.data`."""

from example_trainer._compat import alias

alias(__name__, "example_trainer.grpo.data")
