"""Resumable checkpoints: weights in safetensors, plus optimizer state, step, RNG states and config.

Layout under ``save_path`` (``N`` = optimizer steps completed)::

    step_N/ | final_model/             full-model modes
        config.json, generation_config.json, model.safetensors   (transformers / vLLM loadable)
        tokenizer files
        trainer_state/state.json       step, config, optimizer hyper-parameters, python/numpy RNG, api info
        trainer_state/tensors.safetensors  optimizer tensors (optimizer.<param>.<name>), torch RNG (rng.*)
    adapter_step_N/ | final_adapter/   LoRA modes: PEFT adapter_config.json + adapter_model.safetensors,
                                       tokenizer files, trainer_state/
    tokenizer/                         LoRA modes (the tokenizer of the base model)

Every checkpoint is written to a temporary directory and renamed into place, so a crash while saving
never leaves a half-written checkpoint that ``--resume`` would pick up. Nothing is pickled: loading a
checkpoint never executes code. The training state sits in a subdirectory because vLLM loads every
``*.safetensors`` file at the top level of a model directory as weights.
"""

from __future__ import annotations

import json
import os
import random
import re
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors.torch import load_file, save_file

STATE_DIR = "trainer_state"
STATE_JSON = f"{STATE_DIR}/state.json"
STATE_TENSORS = f"{STATE_DIR}/tensors.safetensors"
FORMAT_VERSION = 1
_CKPT_RE = re.compile(r"^(?:adapter_)?step_(\d+)$")


@dataclass
class TrainerState:
    """What a checkpoint records besides the weights."""

    step: int  #: optimizer steps completed
    config: dict[str, Any] = field(default_factory=dict)
    extra: dict[str, Any] = field(default_factory=dict)  #: e.g. the API's step when the run (re)started
    path: Path | None = None


def checkpoint_name(step: int, lora: bool, final: bool = False) -> str:
    """``step_N`` / ``final_model``, or ``adapter_step_N`` / ``final_adapter`` for LoRA."""
    if final:
        return "final_adapter" if lora else "final_model"
    return f"adapter_step_{step}" if lora else f"step_{step}"


# --- RNG -------------------------------------------------------------------------------------------


def capture_rng_state() -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """(JSON-able python/numpy state, tensors of the torch CPU/CUDA generators)."""
    py_version, py_state, py_gauss = random.getstate()
    np_name, np_keys, np_pos, np_has_gauss, np_gauss = np.random.get_state()
    json_state = {
        "python": [py_version, list(py_state), py_gauss],
        "numpy": [np_name, np_keys.tolist(), int(np_pos), int(np_has_gauss), float(np_gauss)],
    }
    tensors = {"rng.torch_cpu": torch.get_rng_state()}
    if torch.cuda.is_available():
        for i, state in enumerate(torch.cuda.get_rng_state_all()):
            tensors[f"rng.cuda.{i}"] = state
    return json_state, tensors


def restore_rng_state(json_state: dict[str, Any], tensors: dict[str, torch.Tensor]) -> None:
    if "python" in json_state:
        version, state, gauss = json_state["python"]
        random.setstate((version, tuple(state), gauss))
    if "numpy" in json_state:
        name, keys, pos, has_gauss, gauss = json_state["numpy"]
        np.random.set_state((name, np.asarray(keys, dtype=np.uint32), pos, has_gauss, gauss))
    if "rng.torch_cpu" in tensors:
        torch.set_rng_state(tensors["rng.torch_cpu"])
    cuda = sorted((k for k in tensors if k.startswith("rng.cuda.")), key=lambda k: int(k.rsplit(".", 1)[1]))
    if cuda and torch.cuda.is_available():
        torch.cuda.set_rng_state_all([tensors[k] for k in cuda][: torch.cuda.device_count()])


# --- optimizer -------------------------------------------------------------------------------------


def _optimizer_to_flat(sd: dict[str, Any]) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    """An optimizer state dict keyed by parameter index -> (JSON-able meta, tensors)."""
    tensors: dict[str, torch.Tensor] = {}
    scalars: dict[str, dict[str, Any]] = {}
    for pid, state in sd["state"].items():
        for name, value in state.items():
            if torch.is_tensor(value):
                tensors[f"optimizer.{pid}.{name}"] = value.detach().cpu().contiguous()
            else:
                scalars.setdefault(str(pid), {})[name] = value
    return {"param_groups": sd["param_groups"], "scalar_state": scalars}, tensors


def _optimizer_from_flat(meta: dict[str, Any], tensors: dict[str, torch.Tensor]) -> dict[str, Any]:
    state: dict[int, dict[str, Any]] = {}
    for key, value in tensors.items():
        if key.startswith("optimizer."):
            _, pid, name = key.split(".", 2)
            state.setdefault(int(pid), {})[name] = value
    for pid, values in meta.get("scalar_state", {}).items():
        state.setdefault(int(pid), {}).update(values)
    groups = []
    for group in meta["param_groups"]:
        # JSON turned tuples (betas, eps pairs) into lists; optimizers expect tuples.
        groups.append(
            {k: (tuple(v) if isinstance(v, list) and k != "params" else v) for k, v in group.items()}
        )
    return {"state": state, "param_groups": groups}


# --- sharded (FSDP) models -------------------------------------------------------------------------


@dataclass
class FullState:
    """The whole model and optimizer state of a sharded model, gathered on rank 0 (empty elsewhere)."""

    model: dict[str, torch.Tensor]
    optimizer: dict[str, Any] | None


def _full_options() -> Any:
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    return StateDictOptions(full_state_dict=True, cpu_offload=True)


def gather_full_state(model: Any, optimizer: torch.optim.Optimizer | None) -> FullState:
    """Gather the full (unsharded) weights and optimizer state of an FSDP ``model`` into rank 0's CPU memory.

    A collective: every rank must call it, in the same order as the other collectives. The optimizer state
    comes back keyed by parameter index in the optimizer's order, the same layout as
    ``optimizer.state_dict()`` of an unsharded run, so checkpoints of both kinds resume either way.
    """
    from torch.distributed.checkpoint.state_dict import get_model_state_dict, get_optimizer_state_dict

    weights = get_model_state_dict(model, options=_full_options())
    # Tied parameters (input embeddings shared with the LM head) come back once per name, as separate
    # tensors; keep the first name only, as save_pretrained does for an unsharded model.
    first: dict[int, str] = {}
    for name, param in model.named_parameters(remove_duplicate=False):
        if first.setdefault(id(param), name) != name:
            weights.pop(name, None)
    if optimizer is None:
        return FullState(weights, None)
    by_name = get_optimizer_state_dict(model, optimizer, options=_full_options())
    index: dict[str, int] = {}
    for group in by_name.get("param_groups", []):
        for name in group["params"]:
            index.setdefault(name, len(index))
    return FullState(
        weights,
        {
            "state": {index[name]: value for name, value in by_name.get("state", {}).items()},
            "param_groups": [
                {**group, "params": [index[name] for name in group["params"]]}
                for group in by_name.get("param_groups", [])
            ],
        },
    )


def _load_sharded_optimizer(model: Any, optimizer: torch.optim.Optimizer, sd: dict[str, Any]) -> None:
    """Load an index-keyed full optimizer state dict (read by every rank) into the shards of ``optimizer``."""
    from torch.distributed.checkpoint.state_dict import StateDictOptions, set_optimizer_state_dict

    names = {id(p): name for name, p in model.named_parameters()}
    order = [names[id(p)] for group in optimizer.param_groups for p in group["params"]]
    saved = [pid for group in sd["param_groups"] for pid in group["params"]]
    if len(saved) != len(order):
        raise ValueError(
            f"checkpoint optimizer state covers {len(saved)} parameters, the model trains {len(order)}"
        )
    by_name = {
        "state": {order[pid]: value for pid, value in sd["state"].items()},
        "param_groups": [{**g, "params": [order[pid] for pid in g["params"]]} for g in sd["param_groups"]],
    }
    set_optimizer_state_dict(
        model, optimizer, by_name, options=StateDictOptions(full_state_dict=True, strict=True)
    )


# --- save / load -----------------------------------------------------------------------------------


def save_checkpoint(
    model: Any,
    tokenizer: Any,
    optimizer: torch.optim.Optimizer | None,
    config: Any,
    step: int,
    final: bool = False,
    extra: dict[str, Any] | None = None,
    full_state: FullState | None = None,
) -> Path:
    """Write a complete, resumable checkpoint for ``step`` under ``config.save_path``; returns its path.

    The model is written with ``save_pretrained`` (safetensors): a full model for transformers/vLLM, or
    the PEFT adapter in LoRA modes. An existing checkpoint of the same name is replaced atomically.
    For a sharded (FSDP) model, rank 0 passes the ``full_state`` gathered by :func:`gather_full_state`;
    its weights and optimizer state are written instead of the local shards.
    """
    lora = bool(getattr(config, "is_lora", False))
    root = Path(config.save_path)
    root.mkdir(parents=True, exist_ok=True)
    target = root / checkpoint_name(step, lora, final)
    tmp = root / f".{target.name}.tmp-{os.getpid()}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir()
    try:
        use_cache = getattr(getattr(model, "config", None), "use_cache", None)
        if use_cache is not None:
            model.config.use_cache = True  # what inference wants from the saved config
        try:
            if full_state is None:
                model.save_pretrained(tmp, safe_serialization=True)
            else:
                model.save_pretrained(tmp, state_dict=full_state.model, safe_serialization=True)
        finally:
            if use_cache is not None:
                model.config.use_cache = use_cache
        if tokenizer is not None:
            tokenizer.save_pretrained(tmp)
        (tmp / STATE_DIR).mkdir()
        rng_json, tensors = capture_rng_state()
        state_json: dict[str, Any] = {
            "format_version": FORMAT_VERSION,
            "step": step,
            "final": final,
            "saved_at": time.time(),
            "config": config.model_dump() if hasattr(config, "model_dump") else dict(config),
            "rng": rng_json,
            "extra": extra or {},
        }
        opt_sd = full_state.optimizer if full_state is not None else None
        if opt_sd is None and optimizer is not None:
            opt_sd = optimizer.state_dict()
        if opt_sd is not None:
            opt_meta, opt_tensors = _optimizer_to_flat(opt_sd)
            state_json["optimizer"] = opt_meta
            tensors.update(opt_tensors)
        save_file(tensors, str(tmp / STATE_TENSORS))
        (tmp / STATE_JSON).write_text(json.dumps(state_json, indent=1, default=str))
        if target.exists():
            old = root / f".{target.name}.old-{os.getpid()}"
            target.rename(old)
            tmp.rename(target)
            shutil.rmtree(old, ignore_errors=True)
        else:
            tmp.rename(target)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    if lora and tokenizer is not None:
        tokenizer.save_pretrained(root / "tokenizer")
    return target


def read_trainer_state(path: str | Path) -> TrainerState:
    """Read ``trainer_state.json`` of a checkpoint (no tensors); ``FileNotFoundError`` if it has none."""
    path = Path(path)
    meta = json.loads((path / STATE_JSON).read_text())
    return TrainerState(
        step=int(meta["step"]), config=meta.get("config", {}), extra=meta.get("extra", {}), path=path
    )


def load_training_state(
    path: str | Path, optimizer: torch.optim.Optimizer | None, model: Any = None
) -> TrainerState:
    """Restore the optimizer state and the RNG states saved in checkpoint ``path``; returns its state.

    The optimizer must have been built over the same parameters in the same order as when saving. With
    a sharded (FSDP) ``model``, every rank must call this (it is a collective), with no gradients held
    (``zero_grad(set_to_none=True)``): each reads the full state and keeps its shard.
    """
    path = Path(path)
    meta = json.loads((path / STATE_JSON).read_text())
    tensors = load_file(str(path / STATE_TENSORS), device="cpu")
    if optimizer is not None and "optimizer" in meta:
        full = _optimizer_from_flat(meta["optimizer"], tensors)
        from example_trainer.grpo.distributed import is_sharded

        if is_sharded(model):
            _load_sharded_optimizer(model, optimizer, full)
        else:
            optimizer.load_state_dict(full)
    restore_rng_state(meta.get("rng", {}), tensors)
    return TrainerState(
        step=int(meta["step"]), config=meta.get("config", {}), extra=meta.get("extra", {}), path=path
    )


def list_checkpoints(save_path: str | Path) -> list[tuple[int, Path]]:
    """Complete checkpoints under ``save_path`` as (step, path), oldest step first."""
    root = Path(save_path)
    if not root.is_dir():
        return []
    found = []
    for child in root.iterdir():
        if not child.is_dir() or not (child / STATE_JSON).is_file() or not (child / STATE_TENSORS).is_file():
            continue
        if _CKPT_RE.match(child.name) or child.name in ("final_model", "final_adapter"):
            try:
                found.append((read_trainer_state(child).step, child))
            except (OSError, ValueError, KeyError):
                continue
    # final_* sorts after step_N of the same step
    return sorted(found, key=lambda sp: (sp[0], sp[1].name.startswith("final")))


def find_latest_checkpoint(save_path: str | Path) -> Path | None:
    """The checkpoint with the most completed steps under ``save_path``, or None."""
    checkpoints = list_checkpoints(save_path)
    return checkpoints[-1][1] if checkpoints else None


def resolve_resume_path(resume: str | None, save_path: str | Path) -> Path | None:
    """``--resume`` → the checkpoint directory to load (None: start fresh).

    ``"latest"`` picks the newest checkpoint under ``save_path`` (None if there is none yet, so the same
    command line works for the first start and every restart). A path must be a checkpoint directory.
    """
    if resume is None:
        return None
    if resume in ("latest", "auto"):
        return find_latest_checkpoint(save_path)
    path = Path(resume)
    if not (path / STATE_JSON).is_file():
        raise FileNotFoundError(f"--resume {resume}: not a checkpoint directory (no {STATE_JSON})")
    return path
