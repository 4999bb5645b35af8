"""Serving a PEFT LoRA adapter by merging it into a copy of the base weights (the hf inference server's LoRA).

An adapter directory (``adapter_config.json`` + ``adapter_model.safetensors``, as PEFT writes it) holds, per
adapted linear layer, ``lora_A`` (r x in) and ``lora_B`` (out x r); the served weight is
``W + scale * B @ A`` with ``scale = lora_alpha / r`` (``lora_alpha / sqrt(r)`` with ``use_rslora``), which is
what PEFT computes for an unmerged adapter in eval mode (dropout off). DoRA adapters are refused.
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

import torch

_PREFIX = "base_model.model."
_KEY = re.compile(r"^(?P<module>.+)\.lora_(?P<part>[AB])(?:\.(?P<adapter>[^.]+))?\.weight$")


class AdapterError(ValueError):
    """The directory is not a LoRA adapter this server can merge into its model."""


def adapter_deltas(adapter_dir: str | Path) -> dict[str, torch.Tensor]:
    """Base weight name -> ``scale * B @ A`` (float32, CPU) for every adapted layer of ``adapter_dir``."""
    from safetensors.torch import load_file

    path = Path(adapter_dir)
    try:
        cfg = json.loads((path / "adapter_config.json").read_text())
    except (OSError, ValueError) as exc:
        raise AdapterError(f"not a LoRA adapter directory ({path}): {exc}") from exc
    if cfg.get("use_dora"):
        raise AdapterError(f"{path}: DoRA adapters are not supported by the hf backend")
    rank = int(cfg.get("r", 8))
    alpha = float(cfg.get("lora_alpha", rank))
    scale = alpha / math.sqrt(rank) if cfg.get("use_rslora") else alpha / rank
    files = sorted(path.glob("adapter_model*.safetensors"))
    if not files:
        raise AdapterError(f"{path} has no adapter_model.safetensors")
    pairs: dict[str, dict[str, torch.Tensor]] = {}
    for file in files:
        for key, tensor in load_file(str(file)).items():
            match = _KEY.match(key.removeprefix(_PREFIX))
            if match is None:
                raise AdapterError(f"{path}: unexpected tensor {key} (only lora_A/lora_B weights are merged)")
            pairs.setdefault(match["module"], {})[match["part"]] = tensor.float()
    deltas = {}
    for module, parts in pairs.items():
        if set(parts) != {"A", "B"}:
            raise AdapterError(f"{path}: {module} lacks lora_A or lora_B")
        deltas[f"{module}.weight"] = scale * (parts["B"] @ parts["A"])
    return deltas


def merge_into(model: Any, base: dict[str, torch.Tensor], deltas: dict[str, torch.Tensor]) -> None:
    """Set ``model``'s weights to ``base`` plus ``deltas`` (in place).

    Raises:
        AdapterError: a delta names no weight of the model or has another shape.
    """
    params = dict(model.named_parameters())
    for name, delta in deltas.items():
        if name not in params or tuple(params[name].shape) != tuple(delta.shape):
            raise AdapterError(
                f"the adapter's {name} ({list(delta.shape)}) matches no weight of the served model"
            )
    with torch.no_grad():
        for name, param in params.items():
            source = base[name]
            if name in deltas:
                param.copy_((source.float() + deltas[name].to(source.device)).to(param.dtype))
            else:
                param.copy_(source)
