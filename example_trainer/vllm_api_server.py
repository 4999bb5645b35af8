"""compat: ``example_trainer.vllm_api_server`` is :mod:`example_trainer.inference.vllm_api_server`."""

from example_trainer._compat import alias

alias(__name__, "example_trainer.inference.vllm_api_server")
