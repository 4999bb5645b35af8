"""The HTTP routes of the trainer's inference servers, one module per group of endpoints.

Each route module holds pure functions (tested directly) and an ``APIRouter`` factory whose routes only
parse the request, call the server's :class:`~.backend.InferenceBackend` and shape the reply:

* :mod:`.errors`: the error reply ``{"error": {"message", "type", "param", "code"}}`` and body parsing;
* :mod:`.bodies`: the request bodies shared by both servers;
* :mod:`.generate`: ``POST /generate``;
* :mod:`.weights`: ``/bridge/update_weights``, ``/bridge/shared_weights``, ``/bridge/init_weight_group``,
  ``/bridge/receive_weights``;
* :mod:`.lora`: ``/lora/load``, ``/lora/unload`` and the adapter-directory helpers;
* :mod:`.engine`: the vLLM engine's own state (``/health_generate``, ``/bridge/info``, pause/resume,
  sleep/wake, debug, ``/lora/status``).

Both servers (:mod:`example_trainer.inference.vllm_api_server`, :mod:`example_trainer.inference.hf_generation`)
mount the same :mod:`.generate`, :mod:`.weights` and :mod:`.lora` routers over their own backend.
"""
