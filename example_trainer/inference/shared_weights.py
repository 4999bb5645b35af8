"""Single-copy weights (``--weight-bridge-mode shared_vllm``): the trainer trains the inference server's own tensors.

Server side (:func:`export_parameters`, called in the process that holds the weights: a vLLM worker through
:mod:`example_trainer.inference.weight_refresh_worker`, or :mod:`example_trainer.inference.hf_generation`): every parameter is
described by a handle to its memory and its place in it, as a JSON-friendly *manifest*:

* CUDA: the parameters stay where they are; each storage is exported as a CUDA IPC handle (what
  ``torch.multiprocessing`` pickles for a CUDA tensor).
* CPU: :func:`share_cpu_parameters` first moves the parameters into one shared-memory buffer per dtype
  (``torch.multiprocessing``'s ``file_system`` strategy: a named segment under ``/dev/shm``), the
  parameters becoming views into it; the buffer's handle is the segment's path, which the trainer maps
  (``MAP_SHARED``) directly, so its mapping stays valid whatever the server's process does later.

Trainer side (:func:`attach_manifest`, :func:`build_shared_model`): the handles are opened, which maps the
same memory (no copy), and a Hugging Face model is built on the meta device whose parameters are then
views of those tensors, including the fused layouts vLLM uses: ``q_proj``/``k_proj``/``v_proj`` are row
slices of ``qkv_proj`` and ``gate_proj``/``up_proj`` of ``gate_up_proj``. ``optimizer.step()`` then
writes the served weights in place: the next forward pass of the server uses them, with no reload.

Both processes must run on the same machine (and, for CUDA, see the same GPU). A generation that is
running while the optimizer writes sees a mixture of the two steps' weights for its remaining tokens; the
server's prefix cache must be off (keys and values computed with older weights would
be reused), which the trainer's launcher does.
"""

from __future__ import annotations

import base64
import io
import logging
import os
import pickle
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
import torch.multiprocessing  # registers the tensor reductions (CUDA IPC handles) with pickle

logger = logging.getLogger(__name__)

#: Set to 1 in the inference server's environment to serve from shareable weights (vLLM: plain
#: ``F.linear`` over the parameters instead of CPU kernels that pre-pack a private copy of them).
SHARED_WEIGHTS_ENV = "ATROPOS_SHARED_WEIGHTS"
#: compat: Atropos's name for the same switch; honoured as well.
LEGACY_SHARED_WEIGHTS_ENV = "VLLM_ENABLE_SHARED_WEIGHTS"
MANIFEST_FORMAT = 1
#: vLLM's fused parameters and the Hugging Face parameters stacked (along dim 0) inside them, in order.
FUSED_LAYOUTS: dict[str, tuple[str, ...]] = {
    "qkv_proj": ("q_proj", "k_proj", "v_proj"),
    "gate_up_proj": ("gate_proj", "up_proj"),
}


class SharedWeightsError(RuntimeError):
    """The served weights cannot be shared with (or mapped onto) the trainer's model."""


def shared_weights_requested(environ: Mapping[str, str]) -> bool:
    return any(environ.get(name, "0") not in ("", "0", "false", "False") for name in (
        SHARED_WEIGHTS_ENV, LEGACY_SHARED_WEIGHTS_ENV
    ))  # fmt: skip


def use_file_system_sharing() -> None:
    """CPU tensors are shared through named segments, which another (unrelated) process can open by name."""
    import torch.multiprocessing as mp

    if mp.get_sharing_strategy() != "file_system":
        mp.set_sharing_strategy("file_system")


# ----------------------------------------------------------------------------------------------
# server side
# ----------------------------------------------------------------------------------------------


def share_cpu_parameters(module: torch.nn.Module) -> int:
    """Move ``module``'s CPU parameters into one shared-memory buffer per dtype (they become views of it).

    Tied parameters stay tied (they are one parameter object). Idempotent: parameters already in shared
    memory stay where they are. Returns the bytes moved.
    """
    use_file_system_sharing()
    groups: dict[torch.dtype, list[torch.nn.Parameter]] = {}
    for _, param in module.named_parameters():
        if param.device.type == "cpu" and not param.data.is_shared():
            groups.setdefault(param.dtype, []).append(param)
    moved = 0
    with torch.no_grad():
        for dtype, params in groups.items():
            total = sum(p.numel() for p in params)
            flat = torch.empty(total, dtype=dtype)
            flat.share_memory_()
            offset = 0
            for param in params:
                n = param.numel()
                view = flat[offset : offset + n].view(param.shape)
                view.copy_(param.data)
                param.data = view
                offset += n
            moved += total * flat.element_size()
    return moved


def _pickle_tensor(tensor: torch.Tensor) -> str:
    from multiprocessing.reduction import ForkingPickler

    buf = io.BytesIO()
    ForkingPickler(buf, pickle.HIGHEST_PROTOCOL).dump(tensor)
    return base64.b64encode(buf.getvalue()).decode()


def _storage_handle(data: torch.Tensor) -> dict[str, Any]:
    """How another process opens the storage of ``data``: a shared-memory path or a CUDA IPC handle."""
    storage = data.untyped_storage()
    dtype = str(data.dtype).removeprefix("torch.")
    if data.device.type == "cpu":
        _, name, nbytes = storage._share_filename_cpu_()
        name = name.decode() if isinstance(name, bytes) else str(name)
        path = f"/dev/shm/{name.lstrip('/')}"
        # The segment starts with torch's reference-count header; the data fills the rest of it.
        offset = os.path.getsize(path) - int(nbytes)
        return {"kind": "shm", "path": path, "offset": offset, "nbytes": int(nbytes), "dtype": dtype}
    whole = torch.empty(0, dtype=data.dtype, device=data.device)
    whole.set_(storage, 0, (storage.nbytes() // data.element_size(),))
    return {"kind": "cuda_ipc", "pickle": _pickle_tensor(whole), "dtype": dtype}


def _open_storage(handle: Mapping[str, Any]) -> torch.Tensor:
    dtype = getattr(torch, handle["dtype"])
    if handle["kind"] == "shm":
        offset, nbytes = int(handle["offset"]), int(handle["nbytes"])
        raw = torch.from_file(handle["path"], shared=True, size=offset + nbytes, dtype=torch.uint8)
        return raw[offset:].view(dtype)
    if handle["kind"] == "cuda_ipc":
        return pickle.loads(base64.b64decode(handle["pickle"]))  # noqa: S301 - our own server's handle
    raise SharedWeightsError(f"unknown storage handle kind {handle['kind']!r}")


def export_parameters(module: torch.nn.Module, model_dir: str | None = None) -> dict[str, Any]:
    """The manifest of ``module``'s parameters: ``{"format", "model", "buffers", "tensors"}``.

    ``buffers`` holds one handle per storage (:func:`_storage_handle`); ``tensors`` maps each parameter name to
    ``{"buffer", "offset", "shape", "stride", "dtype", "device"}`` (offset and stride in elements).
    CPU parameters are first moved to shared memory (:func:`share_cpu_parameters`).

    Raises:
        SharedWeightsError: a parameter is on a device that cannot be shared, or not a plain tensor
            (e.g. quantized or pre-packed weights).
    """
    use_file_system_sharing()
    share_cpu_parameters(module)
    buffers: list[dict[str, Any]] = []
    index: dict[tuple[str, int], int] = {}
    tensors: dict[str, dict[str, Any]] = {}
    for name, param in module.named_parameters():
        data = param.data
        if data.device.type not in ("cpu", "cuda"):
            raise SharedWeightsError(f"{name} is on {data.device}: only CPU and CUDA weights can be shared")
        if data.numel() == 0:
            raise SharedWeightsError(
                f"{name} is empty in the server (its weight was replaced by a pre-packed copy); start the "
                f"server with {SHARED_WEIGHTS_ENV}=1"
            )
        storage = data.untyped_storage()
        key = (str(data.device), storage.data_ptr())
        if key not in index:
            index[key] = len(buffers)
            buffers.append(_storage_handle(data))
        tensors[name] = {
            "buffer": index[key],
            "offset": data.storage_offset(),
            "shape": list(data.shape),
            "stride": list(data.stride()),
            "dtype": str(data.dtype).removeprefix("torch."),
            "device": data.device.type,
        }
    return {"format": MANIFEST_FORMAT, "model": model_dir, "buffers": buffers, "tensors": tensors}


# ----------------------------------------------------------------------------------------------
# trainer side
# ----------------------------------------------------------------------------------------------


def attach_manifest(manifest: Mapping[str, Any]) -> dict[str, torch.Tensor]:
    """Open the handles of a manifest: parameter name -> a tensor over the server's own memory.

    Raises:
        SharedWeightsError: the manifest is of another format or its handles cannot be opened (another
            machine, a server that has exited, a GPU this process does not see).
    """
    if manifest.get("format") != MANIFEST_FORMAT:
        raise SharedWeightsError(f"unknown shared-weights manifest format {manifest.get('format')!r}")
    try:
        bases = [_open_storage(handle) for handle in manifest["buffers"]]
    except SharedWeightsError:
        raise
    except Exception as exc:  # noqa: BLE001 - any failure to map the memory means the same thing
        raise SharedWeightsError(
            f"cannot open the inference server's weights ({type(exc).__name__}: {exc}); the trainer must "
            "run on the same machine (and GPU) as the server"
        ) from exc
    out: dict[str, torch.Tensor] = {}
    for name, entry in manifest["tensors"].items():
        base = bases[int(entry["buffer"])]
        offset = base.storage_offset() + int(entry["offset"])
        out[name] = torch.as_strided(base, entry["shape"], entry["stride"], offset)
    return out


def fused_name(name: str) -> tuple[str, str, int] | None:
    """``...q_proj.weight`` -> (``...qkv_proj.weight``, ``q_proj``, 0); None for names outside a fused layout."""
    for fused, parts in FUSED_LAYOUTS.items():
        for i, part in enumerate(parts):
            pattern = rf"(^|\.){part}\."
            if re.search(pattern, name):
                return re.sub(pattern, rf"\g<1>{fused}.", name, count=1), part, i
    return None


def map_to_model(
    shapes: Mapping[str, tuple[int, ...]], served: Mapping[str, torch.Tensor]
) -> dict[str, torch.Tensor]:
    """The server's tensor (or a row slice of a fused one) for each of the model's parameter ``shapes``.

    Raises:
        SharedWeightsError: a parameter has no counterpart in the server, or the shapes disagree.
    """
    out: dict[str, torch.Tensor] = {}
    missing: list[str] = []
    for name, shape in shapes.items():
        tensor = served.get(name)
        if tensor is None:
            fused = fused_name(name)
            if fused is not None and fused[0] in served:
                whole_name, part, i = fused
                parts = FUSED_LAYOUTS[whole_name.split(".")[-2]]
                sizes = []
                for other in parts:
                    sibling = re.sub(rf"(^|\.){part}\.", rf"\g<1>{other}.", name, count=1)
                    if sibling not in shapes:
                        raise SharedWeightsError(f"{name}: the model has no {sibling} to fill {whole_name}")
                    sizes.append(shapes[sibling][0])
                whole = served[whole_name]
                if whole.shape[0] != sum(sizes):
                    raise SharedWeightsError(
                        f"{whole_name} has {whole.shape[0]} rows, the model's {'/'.join(parts)} {sum(sizes)}"
                    )
                tensor = whole.narrow(0, sum(sizes[:i]), sizes[i])
        if tensor is None:
            missing.append(name)
            continue
        if tuple(tensor.shape) != tuple(shape):
            raise SharedWeightsError(
                f"{name}: the server's tensor is {list(tensor.shape)}, the model's {list(shape)}"
            )
        out[name] = tensor
    if missing:
        raise SharedWeightsError(
            f"{len(missing)} parameter(s) of the model are not in the server's weights, e.g. {missing[:3]}"
        )
    return out


def build_shared_model(model_dir: str | Path, served: Mapping[str, torch.Tensor], attn: str = "sdpa") -> Any:
    """A Hugging Face causal LM whose parameters are the tensors of ``served`` (no weights are copied).

    The model is built without allocating weights; its (non-persistent) buffers are computed as usual
    and moved to the weights' device.
    """
    from accelerate import init_empty_weights
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(str(model_dir))
    with init_empty_weights(include_buffers=False):
        model = AutoModelForCausalLM.from_config(config, attn_implementation=attn)
    tied = getattr(config, "tie_word_embeddings", False)
    output = model.get_output_embeddings() if tied else None
    skip = {f"{name}.weight" for name, module in model.named_modules() if module is output}
    shapes = {name: tuple(p.shape) for name, p in model.named_parameters() if name not in skip}
    for name, tensor in map_to_model(shapes, served).items():
        module_name, _, leaf = name.rpartition(".")
        module = model.get_submodule(module_name) if module_name else model
        module._parameters[leaf] = torch.nn.Parameter(tensor, requires_grad=True)
    if output is not None:
        output.weight = model.get_input_embeddings().weight
    left = [name for name, p in model.named_parameters() if p.is_meta]
    if left:
        raise SharedWeightsError(f"parameters left without weights: {left[:3]}")
    device = next(model.parameters()).device
    for module in model.modules():
        for key, buf in list(module._buffers.items()):
            if buf is not None and buf.device != device:
                module._buffers[key] = buf.to(device)
    return model


def fetch_manifest(root_url: str, api_key: str | None = None, timeout: float = 120.0) -> dict[str, Any]:
    """``GET /bridge/shared_weights`` of the inference server at ``root_url``.

    Raises:
        SharedWeightsError: the server does not share its weights (the message says why).
    """
    import requests

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    resp = requests.get(f"{root_url.rstrip('/')}/bridge/shared_weights", headers=headers, timeout=timeout)
    if resp.status_code != 200:
        try:
            body = resp.json()
            message = body.get("error", {}).get("message") or body.get("detail") or resp.text
        except ValueError:
            message = resp.text
        raise SharedWeightsError(
            f"{root_url} does not share its weights (HTTP {resp.status_code}): {message}"
        )
    return resp.json()


def segment_paths(manifest: Mapping[str, Any]) -> set[str]:
    """The shared-memory files holding a manifest's CPU weights."""
    return {h["path"] for h in manifest["buffers"] if h.get("kind") == "shm"}
