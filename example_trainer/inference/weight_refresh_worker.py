"""Worker-side half of the in-place weight refresh, the weight broadcast and the shared weights (a vLLM
worker extension).

``example_trainer.inference.vllm_api_server`` starts vLLM with
``--worker-extension-cls example_trainer.inference.weight_refresh_worker.WeightRefreshExtension``; vLLM mixes
this class into every worker, and the server calls its methods by name through
``engine.collective_rpc("atropos_...", ...)``.

Why not vLLM's own ``reload_weights`` alone: on CPU, vLLM pre-packs every matrix that feeds a GEMM
(oneDNN or SGL kernels) in ``process_weights_after_loading``. The in-place reload re-packs the
layers whose weights it loads, but a language-model head tied to the input embeddings loads no
weights of its own, so it would keep computing logits with the packed copy of the *old* embedding
matrix. Re-running the embedding layers' post-load processing refreshes those copies; on GPU that
processing is a no-op.

Shared weights (``ATROPOS_SHARED_WEIGHTS=1``): the trainer must write the very tensors the forward pass
reads, so on CPU this module turns the oneDNN pre-packing off when vLLM imports it (in each worker, before
the model is loaded): every linear layer then runs ``F.linear`` over its own parameter.

This module imports vLLM; only vLLM worker processes load it.
"""

from __future__ import annotations

import os
from typing import Any

from example_trainer.inference.shared_weights import shared_weights_requested


def _plain_cpu_linear_layers() -> None:
    """Keep linear weights as plain parameters on CPU (no private pre-packed copy)."""
    try:
        import vllm._custom_ops as ops
    except ImportError:  # pragma: no cover - a vLLM without the CPU ops
        return
    ops._supports_onednn = False


if shared_weights_requested(os.environ):
    _plain_cpu_linear_layers()


def _reprocess_embeddings(model: Any) -> int:
    from vllm.model_executor.layers.vocab_parallel_embedding import VocabParallelEmbedding

    count = 0
    for module in model.modules():
        method = getattr(module, "quant_method", None)
        if isinstance(module, VocabParallelEmbedding) and method is not None:
            method.process_weights_after_loading(module)
            count += 1
    return count


class WeightRefreshExtension:
    """Methods added to vLLM's worker class (``self`` is the worker)."""

    def atropos_reload_weights(self, weights_path: str) -> dict[str, Any]:
        """Reload all weights from the Hugging Face checkpoint at ``weights_path``, in place.

        Returns:
            ``{"reprocessed_embeddings": n}``: embedding/LM-head layers whose packed kernels
            were rebuilt.
        """
        worker: Any = self
        worker.reload_weights(weights_path=weights_path, is_checkpoint_format=True)
        return {"reprocessed_embeddings": _reprocess_embeddings(worker.model_runner.get_model())}

    def atropos_share_weights(self) -> dict[str, Any]:
        """The manifest of this worker's parameters (:func:`example_trainer.inference.shared_weights.export_parameters`)."""
        from example_trainer.inference.shared_weights import export_parameters

        worker: Any = self
        cached = getattr(worker, "_atropos_manifest", None)
        if cached is None:
            model = worker.model_runner.get_model()
            cached = export_parameters(model, str(worker.model_config.model))
            worker._atropos_manifest = cached
        return cached

    def atropos_join_weight_group(
        self, host: str, port: int, world_size: int, rank: int, backend: str, timeout: float
    ) -> None:
        """Join the trainer's weight group (:class:`example_trainer.inference.weight_broadcast.WeightReceiver`)."""
        from example_trainer.inference.weight_broadcast import WeightReceiver

        worker: Any = self
        receiver = WeightReceiver()
        receiver.join(host, port, world_size, rank, backend, timeout)  # type: ignore[arg-type]
        worker._atropos_receiver = receiver

    def atropos_receive_weights(self, tensors: list[dict[str, Any]]) -> dict[str, Any]:
        """Receive one broadcast of the trainer's weights and load them in place (as from a checkpoint)."""
        worker: Any = self
        receiver = getattr(worker, "_atropos_receiver", None)
        if receiver is None:
            raise RuntimeError("no weight group: POST /bridge/init_weight_group first")
        model = worker.model_runner.get_model()
        device = next(model.parameters()).device
        items = receiver.receive(tensors, device)
        worker.reload_weights(weights_iterator=iter(items), is_checkpoint_format=True)
        return {"reprocessed_embeddings": _reprocess_embeddings(model)}
