"""compat: ``example_trainer.api`` is :mod:`example_trainer.grpo.api_client`."""

from example_trainer._compat import alias

alias(__name__, "example_trainer.grpo.api_client")
