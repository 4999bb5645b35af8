"""Inference servers for training and the weights they serve: the vLLM server with the trajectory routes
(:mod:`.vllm_api_server`), the light Hugging Face server (:mod:`.hf_generation`), the teacher server, their
supervisor (:mod:`.vllm_manager`), and how new weights reach them (refresh, broadcast, shared tensors)."""
