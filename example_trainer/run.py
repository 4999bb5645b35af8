"""compat: ``example_trainer.run`` is :mod:`example_trainer.grpo.launcher`."""

from example_trainer._compat import alias

alias(__name__, "example_trainer.grpo.launcher")
