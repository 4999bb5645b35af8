"""The active LoRA adapter: ``POST /lora/load`` ``{"adapter_path", "adapter_name"?}`` and ``POST /lora/unload``.

``/lora/load`` answers 404 when the directory does not exist, 400 when it is not an adapter the server can
serve, and ``{"status": "ok", "adapter_path", "adapter_name", ...}`` (the backend's fields) when it serves
it; ``/lora/unload`` answers ``{"status": "ok", "previous_adapter", ...}``.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from fastapi import APIRouter, Request

from example_trainer.inference.routes.backend import Route, backend_of, router_of
from example_trainer.inference.routes.bodies import LoraLoadBody
from example_trainer.inference.routes.errors import ApiError, BadRequest, parsed_body


def adapter_dir_to_load(adapter_path: str) -> Path:
    """``adapter_path`` as a directory; ``ApiError(404, "Adapter not found: ...")`` when there is none."""
    path = Path(adapter_path)
    if not path.is_dir():
        raise ApiError(404, f"Adapter not found: {adapter_path}")
    return path


def read_adapter_config(adapter_dir: str | Path) -> dict[str, Any]:
    """The summary ``{r, lora_alpha, target_modules, base_model}`` of a PEFT adapter directory.

    Raises:
        FileNotFoundError: the directory does not exist.
        BadRequest: it has no readable ``adapter_config.json``.
    """
    path = Path(adapter_dir)
    if not path.is_dir():
        raise FileNotFoundError(f"adapter directory not found: {adapter_dir}")
    cfg_path = path / "adapter_config.json"
    try:
        cfg = json.loads(cfg_path.read_text())
    except FileNotFoundError as exc:
        raise BadRequest(f"not a LoRA adapter directory (no adapter_config.json): {adapter_dir}") from exc
    except (OSError, ValueError) as exc:
        raise BadRequest(f"unreadable adapter_config.json in {adapter_dir}: {exc}") from exc
    if not isinstance(cfg, dict):
        raise BadRequest(f"adapter_config.json in {adapter_dir} is not a JSON object")
    return {
        "r": cfg.get("r"),
        "lora_alpha": cfg.get("lora_alpha"),
        "target_modules": cfg.get("target_modules"),
        "base_model": cfg.get("base_model_name_or_path"),
    }


def list_adapter_dirs(log_dir: str | Path) -> list[str]:
    """Names of the subdirectories of ``log_dir`` that contain an ``adapter_config.json``."""
    root = Path(log_dir)
    if not root.is_dir():
        return []
    return sorted(p.name for p in root.iterdir() if p.is_dir() and (p / "adapter_config.json").exists())


async def lora_load(request: Request) -> dict[str, Any]:
    """``POST /lora/load``."""
    parsed = await parsed_body(request, LoraLoadBody)
    adapter_dir_to_load(parsed.adapter_path)
    fields = await backend_of(request).load_adapter(parsed.adapter_path, parsed.adapter_name)
    return {"status": "ok", "adapter_path": parsed.adapter_path, **fields}


async def lora_unload(request: Request) -> dict[str, Any]:
    """``POST /lora/unload``."""
    return {"status": "ok", **await backend_of(request).unload_adapter()}


ROUTES: tuple[Route, ...] = (("POST", "/lora/load", lora_load), ("POST", "/lora/unload", lora_unload))


def lora_router(dependencies: Sequence[Any] = ()) -> APIRouter:
    """The ``/lora/load`` and ``/lora/unload`` routes, guarded by ``dependencies``."""
    return router_of(ROUTES, dependencies)
