"""Refresh a running vLLM engine's weights from a checkpoint directory, without a restart.

Server side (used by ``example_trainer.inference.vllm_api_server``'s ``POST /bridge/update_weights``):
pause the scheduler, have every worker reload its weights in place from the checkpoint
(:mod:`example_trainer.inference.weight_refresh_worker`, called through ``collective_rpc``), drop the
prefix cache that was computed with the old weights, resume. The engine, its KV cache, compiled graphs and the HTTP
server stay up, so this takes a fraction of a second on a small model instead of a full restart.

Client side: :func:`request_weight_update` posts to that route and returns the seconds it took.

A checkpoint directory is a Hugging Face model directory of the same architecture as the
served model: ``*.safetensors`` shards (or ``pytorch_model*.bin``), optionally with an index.
Only model weights may sit at its top level: vLLM loads every ``*.safetensors`` file there
unless a ``model.safetensors.index.json`` lists the shards.
"""

from __future__ import annotations

import json
import struct
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import requests

#: The vLLM worker extension that provides the in-place reload (see weight_refresh_worker).
WORKER_EXTENSION = "example_trainer.inference.weight_refresh_worker.WeightRefreshExtension"
#: How in-flight requests are handled while weights change (vLLM's pause modes):
#: ``wait`` lets them finish on the old weights first, ``keep`` freezes them and continues them
#: on the new weights, ``abort`` cancels them.
PAUSE_MODES = ("wait", "keep", "abort")

_INDEX_FILES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")
#: Config fields that fix the parameter shapes; a checkpoint must agree on them to be reloaded.
ARCHITECTURE_KEYS = (
    "architectures",
    "model_type",
    "vocab_size",
    "hidden_size",
    "intermediate_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "tie_word_embeddings",
)
#: Tensor names a checkpoint may carry that vLLM skips on load (derived or tied weights).
_IGNORABLE_EXTRA = ("rotary_emb.inv_freq", "lm_head.weight")


class CheckpointError(ValueError):
    """The checkpoint directory cannot be loaded into the served model."""


class WeightUpdateError(RuntimeError):
    """The server did not apply a weight update (message says why)."""


class WeightUpdateUnsupported(WeightUpdateError):
    """The server cannot update in place (no such route, e.g. plain vLLM; or answers 501)."""


def weight_files(checkpoint_dir: Path) -> list[Path]:
    """The weight files vLLM would load from ``checkpoint_dir`` (safetensors preferred)."""
    files = sorted(checkpoint_dir.glob("*.safetensors"))
    if files:
        return files
    return sorted(checkpoint_dir.glob("pytorch_model*.bin")) + sorted(checkpoint_dir.glob("*.pt"))


def validate_checkpoint_dir(checkpoint_dir: str | Path) -> Path:
    """Check that ``checkpoint_dir`` holds loadable model weights and return its absolute path.

    Raises:
        FileNotFoundError: the directory does not exist.
        CheckpointError: it has no weight files, or extra top-level safetensors files that vLLM
            would try to load as weights (no index file tells it which are the shards).
    """
    path = Path(checkpoint_dir).expanduser().resolve()
    if not path.is_dir():
        raise FileNotFoundError(f"checkpoint directory not found: {checkpoint_dir}")
    files = weight_files(path)
    if not files:
        raise CheckpointError(f"no *.safetensors or pytorch_model*.bin weight files in {path}")
    has_index = any((path / name).exists() for name in _INDEX_FILES)
    strays = [f.name for f in files if f.suffix == ".safetensors" and not f.name.startswith("model")]
    if strays and not has_index:
        raise CheckpointError(
            f"{path} holds safetensors files that are not model shards ({', '.join(strays)}); "
            "move them to a subdirectory or add model.safetensors.index.json"
        )
    return path


def safetensors_shapes(directory: Path) -> dict[str, tuple[int, ...]]:
    """Tensor name -> shape for every top-level ``*.safetensors`` file, read from the headers only."""
    shapes: dict[str, tuple[int, ...]] = {}
    for file in sorted(directory.glob("*.safetensors")):
        with open(file, "rb") as fh:
            (header_len,) = struct.unpack("<Q", fh.read(8))
            header = json.loads(fh.read(header_len))
        for name, meta in header.items():
            if name != "__metadata__":
                shapes[name] = tuple(meta["shape"])
    return shapes


def check_compatible(
    checkpoint_dir: Path,
    served_config: Mapping[str, Any] | None = None,
    reference_dir: Path | None = None,
) -> None:
    """Refuse a checkpoint that does not fit the served model, before the engine touches it.

    A failed in-place load leaves a vLLM engine dead, so mismatches are caught here:
    ``served_config`` (the served model's Hugging Face config as a dict) must agree with the
    checkpoint's ``config.json`` on :data:`ARCHITECTURE_KEYS`, and when ``reference_dir`` (the
    served model's own directory) has safetensors files, the checkpoint must hold the same
    tensor names with the same shapes.

    Raises:
        CheckpointError: naming the first differing field or the offending tensors.
    """
    cfg_file = checkpoint_dir / "config.json"
    if served_config is not None and cfg_file.exists():
        try:
            new_cfg = json.loads(cfg_file.read_text())
        except (OSError, ValueError) as exc:
            raise CheckpointError(f"unreadable config.json in {checkpoint_dir}: {exc}") from exc
        for key in ARCHITECTURE_KEYS:
            if key in new_cfg and key in served_config and new_cfg[key] != served_config[key]:
                raise CheckpointError(
                    f"checkpoint {key}={new_cfg[key]!r} differs from the served model's {served_config[key]!r}"
                )
    if reference_dir is None or not reference_dir.is_dir():
        return
    try:
        ref = safetensors_shapes(reference_dir)
        new = safetensors_shapes(checkpoint_dir)
    except (OSError, ValueError, struct.error, KeyError) as exc:
        raise CheckpointError(f"unreadable safetensors header in {checkpoint_dir}: {exc}") from exc
    if not ref or not new:
        return
    missing = sorted(ref.keys() - new.keys())
    if missing:
        raise CheckpointError(
            f"checkpoint lacks {len(missing)} tensors of the served model, e.g. {missing[:3]}"
        )
    extra = sorted(k for k in new.keys() - ref.keys() if not k.endswith(_IGNORABLE_EXTRA))
    if extra:
        raise CheckpointError(f"checkpoint has {len(extra)} tensors the served model lacks, e.g. {extra[:3]}")
    wrong = [(k, new[k], ref[k]) for k in sorted(ref) if new[k] != ref[k]]
    if wrong:
        name, got, want = wrong[0]
        raise CheckpointError(
            f"{len(wrong)} tensors have other shapes, e.g. {name}: {list(got)} vs {list(want)}"
        )


async def reload_weights_in_place(engine: Any, checkpoint_dir: Path, *, pause_mode: str = "wait") -> float:
    """Reload ``engine``'s weights from ``checkpoint_dir`` while it keeps running.

    ``engine`` is a vLLM ``AsyncLLM`` whose workers carry :data:`WORKER_EXTENSION`. Generation is paused (``pause_mode``, see
    :data:`PAUSE_MODES`) for the duration and always resumed, also on failure.

    Returns:
        Seconds spent, pause to resume.

    Raises:
        CheckpointError: the workers rejected the checkpoint (e.g. other shapes or names).
    """
    if pause_mode not in PAUSE_MODES:
        raise ValueError(f"pause_mode must be one of {PAUSE_MODES}, got {pause_mode!r}")
    start = time.perf_counter()
    await engine.pause_generation(mode=pause_mode, clear_cache=pause_mode != "keep")
    try:
        try:
            await engine.collective_rpc(
                "atropos_reload_weights", kwargs={"weights_path": str(checkpoint_dir)}
            )
        except Exception as exc:  # noqa: BLE001 - worker errors arrive as generic exceptions
            raise CheckpointError(f"could not load weights from {checkpoint_dir}: {exc}") from exc
        # Prefix-cache blocks hold keys/values computed with the old weights.
        await engine.reset_prefix_cache()
    finally:
        await engine.resume_generation()
    return time.perf_counter() - start


def request_weight_update(
    root_url: str,
    checkpoint_dir: str | Path,
    *,
    pause_mode: str = "wait",
    timeout: float = 600.0,
    api_key: str | None = None,
) -> float:
    """Ask the server at ``root_url`` (no ``/v1``) to reload its weights from ``checkpoint_dir``.

    Returns:
        Wall-clock seconds of the HTTP call.

    Raises:
        WeightUpdateError: the route is missing (not our server) or answered with an error;
            the message carries the server's explanation.
        requests.RequestException: the server could not be reached.
    """
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    start = time.perf_counter()
    resp = requests.post(
        f"{root_url.rstrip('/')}/bridge/update_weights",
        json={"checkpoint_dir": str(Path(checkpoint_dir).resolve()), "pause_mode": pause_mode},
        headers=headers,
        timeout=timeout,
    )
    elapsed = time.perf_counter() - start
    if resp.status_code in (404, 405) and _is_missing_route(resp):
        raise WeightUpdateUnsupported(f"{root_url} has no /bridge/update_weights route")
    if resp.status_code == 501:
        raise WeightUpdateUnsupported(f"{root_url} cannot update weights in place: {_error_text(resp)}")
    if resp.status_code != 200:
        raise WeightUpdateError(f"weight update failed with HTTP {resp.status_code}: {_error_text(resp)}")
    return elapsed


def _is_missing_route(resp: requests.Response) -> bool:
    """FastAPI's own 404/405 body, as opposed to the route's error about the checkpoint."""
    try:
        return resp.json() in ({"detail": "Not Found"}, {"detail": "Method Not Allowed"})
    except ValueError:
        return False


def _error_text(resp: requests.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        return resp.text[:500]
    if isinstance(body, dict):
        err = body.get("error")
        if isinstance(err, dict) and "message" in err:
            return str(err["message"])
        if "detail" in body:
            return str(body["detail"])
    return str(body)[:500]
