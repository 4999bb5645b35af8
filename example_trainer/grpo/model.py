"""Loading the policy (and the optional frozen reference) for training.

* dtype: ``--train-dtype auto`` gives float32 on CPU and bfloat16 on CUDA.
* attention: flash-attention-2 on CUDA when ``flash_attn`` is installed, otherwise SDPA (always on CPU).
* ``--train-layer-indices``: only the listed transformer layers train; embeddings, norms and the LM head
  are frozen.
* LoRA modes wrap the model with PEFT adapters (``q_proj``/``v_proj`` by default).
"""

from __future__ import annotations

import logging
import re
from typing import Any

import torch

from example_trainer.grpo.config import TrainingConfig

logger = logging.getLogger(__name__)

_DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}


def training_dtype(config: TrainingConfig) -> torch.dtype:
    """The dtype the trainer's weights are loaded in."""
    if config.train_dtype != "auto":
        return _DTYPES[config.train_dtype]
    return torch.bfloat16 if config.device.startswith("cuda") else torch.float32


def _attn_implementation(device: str) -> str:
    if device.startswith("cuda"):
        try:
            import flash_attn  # noqa: F401

            return "flash_attention_2"
        except ImportError:
            pass
    return "sdpa"


def _from_pretrained(path: str, dtype: torch.dtype, attn: str) -> Any:
    """``AutoModelForCausalLM.from_pretrained`` across transformers 4.x (``torch_dtype``) and 5.x (``dtype``)."""
    import transformers
    from transformers import AutoModelForCausalLM

    major = int(transformers.__version__.split(".")[0])
    dtype_kw = {"dtype": dtype} if major >= 5 else {"torch_dtype": dtype}
    try:
        return AutoModelForCausalLM.from_pretrained(path, attn_implementation=attn, **dtype_kw)
    except (ImportError, ValueError) as exc:
        if attn == "sdpa":
            raise
        logger.warning("attention %s unavailable (%s); using sdpa", attn, exc)
        return AutoModelForCausalLM.from_pretrained(path, attn_implementation="sdpa", **dtype_kw)


def num_layers(model: Any) -> int:
    cfg = model.config
    for name in ("num_hidden_layers", "n_layer"):
        if getattr(cfg, name, None) is not None:
            return int(getattr(cfg, name))
    raise ValueError("cannot tell the number of layers of this model (no num_hidden_layers / n_layer)")


def _check_layer_indices(indices: list[int], total: int, flag: str) -> None:
    bad = [i for i in indices if i >= total]
    if bad:
        raise ValueError(f"{flag}: layers {bad} do not exist (the model has {total} layers, 0-{total - 1})")


def freeze_except_layers(model: Any, indices: list[int]) -> int:
    """Freeze every parameter except those of transformer layers in ``indices``; returns #trainable."""
    _check_layer_indices(indices, num_layers(model), "--train-layer-indices")
    wanted = set(indices)
    pattern = re.compile(r"\.layers\.(\d+)\.")
    trainable = 0
    for name, param in model.named_parameters():
        match = pattern.search(name)
        keep = bool(match) and int(match[1]) in wanted
        param.requires_grad_(keep)
        trainable += param.numel() if keep else 0
    if trainable == 0:
        raise ValueError(f"--train-layer-indices {indices}: no parameter matched, nothing would train")
    return trainable


def apply_lora(model: Any, config: TrainingConfig) -> Any:
    """Wrap ``model`` with PEFT LoRA adapters configured by the ``lora_*`` fields."""
    try:
        from peft import LoraConfig, get_peft_model
    except ImportError:
        raise RuntimeError("LoRA modes need the peft package: pip install 'atroposlib[trainer]'") from None
    if config.lora_layer_indices:
        _check_layer_indices(config.lora_layer_indices, num_layers(model), "--lora-layer-indices")
    lora_config = LoraConfig(
        task_type="CAUSAL_LM",
        r=config.lora_r,
        lora_alpha=config.lora_alpha,
        lora_dropout=config.lora_dropout,
        target_modules=config.lora_target_modules or ["q_proj", "v_proj"],
        bias="none",
        layers_to_transform=config.lora_layer_indices or None,
    )
    return get_peft_model(model, lora_config)


def load_model_and_tokenizer(
    config: TrainingConfig, model_path: str | None = None, to_device: bool = True
) -> tuple[Any, Any]:
    """Load the policy to train (LoRA-wrapped in LoRA modes) and its tokenizer, on ``config.device``.

    ``model_path`` overrides ``config.model_name`` (e.g. a checkpoint directory when resuming a full-model
    run). ``to_device=False`` leaves the weights in CPU memory (dtype, attention and gradient checkpointing
    still chosen for ``config.device``), for FSDP to move shard by shard. Raises ``OSError`` when the model
    cannot be found.
    """
    from transformers import AutoTokenizer

    path = model_path or config.model_name
    dtype = training_dtype(config)
    model = _from_pretrained(path, dtype, _attn_implementation(config.device))
    tokenizer = AutoTokenizer.from_pretrained(path)
    prepare_for_training(model, config)
    if config.is_lora:
        model = apply_lora(model, config)
    if to_device:
        model.to(config.device)
    model.train()
    return model, tokenizer


def prepare_for_training(model: Any, config: TrainingConfig) -> None:
    """No KV cache, ``--train-layer-indices`` (full-model modes), gradient checkpointing, train mode."""
    model.config.use_cache = False
    use_checkpointing = (
        config.gradient_checkpointing
        if config.gradient_checkpointing is not None
        else config.device.startswith("cuda")
    )
    if config.train_layer_indices and not config.is_lora:
        n = freeze_except_layers(model, config.train_layer_indices)
        logger.info("training layers %s only (%d parameters)", config.train_layer_indices, n)
    if use_checkpointing:
        if hasattr(model, "enable_input_require_grads"):
            model.enable_input_require_grads()
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    model.train()


def load_reference_model(config: TrainingConfig) -> Any:
    """The frozen initial policy for the KL penalty (``config.model_name``, eval mode, no grads)."""
    dtype = training_dtype(config)
    ref = _from_pretrained(config.model_name, dtype, _attn_implementation(config.device))
    ref.config.use_cache = False
    ref.requires_grad_(False)
    ref.eval()
    return ref.to(config.device)


def trainable_parameters(model: Any) -> list[torch.nn.Parameter]:
    return [p for p in model.parameters() if p.requires_grad]
