"""compat: ``example_trainer.vllm_manager`` is :mod:`example_trainer.inference.vllm_manager`."""

from example_trainer._compat import alias

alias(__name__, "example_trainer.inference.vllm_manager")
