"""Worker-side half of the in-place weight refresh (a vLLM worker extension).

``example_trainer.vllm_api_server`` starts vLLM with
``--worker-extension-cls example_trainer.weight_refresh_worker.WeightRefreshExtension``; vLLM mixes
this class into every worker, and the server calls its method by name through
``engine.collective_rpc("atropos_reload_weights", ...)``.

Why not vLLM's own ``reload_weights`` alone: on CPU, vLLM pre-packs every matrix that feeds a GEMM
(oneDNN or SGL kernels) in ``process_weights_after_loading``. The in-place reload re-packs the
layers whose weights it loads, but a language-model head tied to the input embeddings loads no
weights of its own, so it would keep computing logits with the packed copy of the *old* embedding
matrix. Re-running the embedding layers' post-load processing refreshes those copies; on GPU that
processing is a no-op.

This module imports vLLM; only vLLM worker processes load it.
"""

from __future__ import annotations

from typing import Any


class WeightRefreshExtension:
    """Methods added to vLLM's worker class (``self`` is the worker)."""

    def atropos_reload_weights(self, weights_path: str) -> dict[str, Any]:
        """Reload all weights from the Hugging Face checkpoint at ``weights_path``, in place.

        Returns:
            ``{"reprocessed_embeddings": n}``: embedding/LM-head layers whose packed kernels
            were rebuilt.
        """
        from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding

        worker: Any = self
        worker.reload_weights(weights_path=weights_path, is_checkpoint_format=True)
        model = worker.model_runner.get_model()
        count = 0
        for module in model.modules():
            method = getattr(module, "quant_method", None)
            if isinstance(module, VocabParallelEmbedding) and method is not None:
                method.process_weights_after_loading(module)
                count += 1
        return {"reprocessed_embeddings": count}
