"""What a training run needs before its first step: seeded RNGs, the policy (fresh, resumed or attached to
the inference server's own weights) and the API's view of a resumed run."""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import torch

from example_trainer.grpo.api_client import AtroposApiError, AtroposClient
from example_trainer.grpo.config import TrainingConfig
from example_trainer.grpo.inference_sync import InferenceSync
from example_trainer.grpo.model import load_model_and_tokenizer

logger = logging.getLogger(__name__)


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def load_policy(config: TrainingConfig, resume_dir: Path | None, sharded: bool = False) -> tuple[Any, Any]:
    """The policy to train: from the checkpoint when resuming a full-model run, else ``model_name``.

    ``sharded``: left in CPU memory; FSDP moves each layer's shard to the device.
    """
    if sharded:
        return load_model_and_tokenizer(
            config, model_path=str(resume_dir) if resume_dir else None, to_device=False
        )
    if resume_dir is None or config.is_lora:
        model, tokenizer = load_model_and_tokenizer(config)
        if resume_dir is not None:
            from peft import set_peft_model_state_dict
            from safetensors.torch import load_file

            set_peft_model_state_dict(model, load_file(str(resume_dir / "adapter_model.safetensors")))
        return model, tokenizer
    return load_model_and_tokenizer(config, model_path=str(resume_dir))


def attach_shared_policy(
    config: TrainingConfig, inference: InferenceSync, resume_dir: Path | None
) -> tuple[Any, Any]:
    """``shared_vllm``: start the local server on the initial weights and build the policy over its tensors;
    when resuming, the checkpoint's weights are copied into them."""
    from transformers import AutoTokenizer

    inference.start(config.model_name)
    try:
        model = inference.shared_model()
        if resume_dir is not None:
            from safetensors.torch import load_file

            state: dict[str, Any] = {}
            for file in sorted(resume_dir.glob("*.safetensors")):
                state.update(load_file(str(file)))
            with torch.no_grad():
                model.load_state_dict(state, strict=False)
        from example_trainer.grpo.model import prepare_for_training

        prepare_for_training(model, config)
    except BaseException:
        inference.stop()
        raise
    return model, AutoTokenizer.from_pretrained(config.model_name)


def reconcile_with_api(
    client: AtroposClient, step: int, resumed: bool, trained: list[int] | None = None
) -> dict[str, Any]:
    """After (re)registration: acknowledge the batches the checkpoint already holds (``trained``: a crash
    between its save and their acks left them unacknowledged), then replay the unacknowledged batches when
    resuming and compare step counters."""
    for batch_id in trained or ():
        try:
            client.request("POST", "/batch/ack", {"batch_id": batch_id})
            logger.info("acknowledged batch %d, trained in the checkpoint (its ack was lost)", batch_id)
        except AtroposApiError:
            pass  # acknowledged before the crash, as usual
    replayed = client.replay() if resumed else 0
    status = client.status()
    api_step = int(status.get("current_step", 0)) if isinstance(status, dict) else 0
    if resumed:
        logger.info(
            "resuming at step %d; the API is at step %d with %d unacknowledged batch(es) re-queued",
            step, api_step, replayed,
        )  # fmt: skip
        if api_step < step:
            logger.warning(
                "the API's step (%d) is behind the checkpoint's (%d): it lost its state (in-memory store or a "
                "new data dir?); training continues at step %d", api_step, step, step,
            )  # fmt: skip
    return {"api_step_at_start": api_step, "replayed_batches_at_start": replayed}


class NoLogger:
    """Stands in for :class:`RunLogger` on ranks other than 0 (they write nothing)."""

    run_id = None

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        return None

    def finish(self) -> None:
        return None
