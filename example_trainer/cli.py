"""compat: ``example_trainer.cli`` is :mod:`example_trainer.grpo.cli`."""

from example_trainer._compat import alias

alias(__name__, "example_trainer.grpo.cli")
