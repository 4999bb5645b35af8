"""Environment library: ``from atroposlib.envs import BaseEnv, BaseEnvConfig, ScoredDataGroup``.

Names are resolved lazily from :mod:`atroposlib.envs.base` so that importing a submodule (for example
``atroposlib.envs.serve.scheduling``) stays cheap.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

_EXPORTS = {
    "BaseEnv": "atroposlib.envs.base",
    "BaseEnvConfig": "atroposlib.envs.env_config",
    "ScoredDataGroup": "atroposlib.envs.groups",
    "ScoredDataItem": "atroposlib.envs.groups",
    "EvalHandlingEnum": "atroposlib.envs.groups",
    "APIServer": "atroposlib.envs.base",
    "APIServerConfig": "atroposlib.envs.base",
    "ServerBaseline": "atroposlib.envs.base",
    "ServerManager": "atroposlib.envs.base",
    "ServerManagerConfig": "atroposlib.envs.base",
    "ReasoningConfig": "atroposlib.envs.base",
}

__all__ = [
    "APIServer",
    "APIServerConfig",
    "BaseEnv",
    "BaseEnvConfig",
    "EvalHandlingEnum",
    "ReasoningConfig",
    "ScoredDataGroup",
    "ScoredDataItem",
    "ServerBaseline",
    "ServerManager",
    "ServerManagerConfig",
]

if TYPE_CHECKING:  # pragma: no cover
    from atroposlib.envs.base import (
        APIServer,
        APIServerConfig,
        BaseEnv,
        ReasoningConfig,
        ServerBaseline,
        ServerManager,
        ServerManagerConfig,
    )
    from atroposlib.envs.env_config import BaseEnvConfig
    from atroposlib.envs.groups import EvalHandlingEnum, ScoredDataGroup, ScoredDataItem


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'atroposlib.envs' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))
