"""Refresh a running vLLM engine's weights from a checkpoint directory, without a restart.

Server side (used by ``example_trainer.vllm_api_server``'s ``POST /bridge/update_weights``):
pause the scheduler, have every worker reload its weights in place from the checkpoint
(vLLM's ``reload_weights`` worker method via ``collective_rpc``), drop the prefix cache that was
computed with the old weights, resume. The engine, its KV cache, compiled graphs and the HTTP
server stay up, so this takes a fraction of a second on a small model instead of a full restart.

Client side: :func:`request_weight_update` posts to that route and returns the seconds it took.

A checkpoint directory is a Hugging Face model directory of the same architecture as the
served model: ``*.safetensors`` shards (or ``pytorch_model*.bin``), optionally with an index.
Only model weights may sit at its top level: vLLM loads every ``*.safetensors`` file there
unless a ``model.safetensors.index.json`` lists the shards.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import requests

#: How in-flight requests are handled while weights change (vLLM's pause modes):
#: ``wait`` lets them finish on the old weights first, ``keep`` freezes them and continues them
#: on the new weights, ``abort`` cancels them.
PAUSE_MODES = ("wait", "keep", "abort")

_INDEX_FILES = ("model.safetensors.index.json", "pytorch_model.bin.index.json")


class CheckpointError(ValueError):
    """The checkpoint directory cannot be loaded into the served model."""


class WeightUpdateError(RuntimeError):
    """The server did not apply a weight update (message says why)."""


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


async def reload_weights_in_place(engine: Any, checkpoint_dir: Path, *, pause_mode: str = "wait") -> float:
    """Reload ``engine``'s weights from ``checkpoint_dir`` while it keeps running.

    ``engine`` is a vLLM ``AsyncLLM``. Generation is paused (``pause_mode``, see
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
                "reload_weights", kwargs={"weights_path": str(checkpoint_dir), "is_checkpoint_format": True}
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
    if resp.status_code != 200:
        raise WeightUpdateError(f"weight update failed with HTTP {resp.status_code}: {_error_text(resp)}")
    return elapsed


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
