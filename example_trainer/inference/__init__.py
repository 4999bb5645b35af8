"""Inference servers for training and the weights they serve: the vLLM server with the trajectory routes
(:mod:`.vllm_api_server` over :mod:`.vllm_backend`), the light Hugging Face server (:mod:`.hf_generation` over
:mod:`.hf_engine`), the HTTP routes both mount (:mod:`.routes`), the teacher server, their supervisor
(:mod:`.vllm_manager`), and how new weights reach them (refresh, broadcast, shared tensors)."""
