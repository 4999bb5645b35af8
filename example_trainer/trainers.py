"""compat: ``example_trainer.trainers`` is :mod:`example_trainer.grpo.loop`."""

from example_trainer._compat import alias

alias(__name__, "example_trainer.grpo.loop")
