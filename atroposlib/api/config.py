"""Configuration of the trajectory API (``run-api``): one typed model, same names everywhere.

Every field is a ``run-api`` flag (``max_body_bytes`` is ``--max-body-bytes``), a key of the
``--config`` YAML file, and a keyword of :class:`ApiConfig` in code. The API key may also come
from the ``ATROPOS_API_KEY`` environment variable and the data directory from
``ATROPOS_DATA_DIR``.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

API_KEY_ENV = "ATROPOS_API_KEY"
DATA_DIR_ENV = "ATROPOS_DATA_DIR"
#: Environment variable through which ``run-api --reload`` hands its configuration to the worker.
CONFIG_ENV = "ATROPOS_API_CONFIG"

MIB = 1024 * 1024


def default_data_dir() -> Path:
    """``$ATROPOS_DATA_DIR`` if set, else ``./atropos_data`` (relative to the working directory)."""
    return Path(os.environ.get(DATA_DIR_ENV) or "atropos_data")


class ApiConfig(BaseModel):
    """Settings of one trajectory API server. All sizes are in bytes, all times in seconds."""

    model_config = ConfigDict(extra="forbid", validate_assignment=True)

    host: str = Field(
        "127.0.0.1",
        description="Address to bind. Binding a non-loopback address needs api_key or allow_unauthenticated.",
    )
    port: int = Field(8000, ge=0, le=65535, description="TCP port to listen on.")
    reload: bool = Field(False, description="Restart the server when its code changes (development).")
    data_dir: Path = Field(
        default_factory=default_data_dir,
        description="Directory of the durable store (SQLite file and lock). Created if missing.",
    )
    store: Literal["sqlite", "memory"] = Field(
        "sqlite", description="'sqlite': durable (default). 'memory': everything is lost on exit."
    )
    sqlite_synchronous: Literal["normal", "full"] = Field(
        "normal",
        description="'normal' survives a crash of the process; 'full' also survives power loss (slower).",
    )
    api_key: str | None = Field(
        None,
        repr=False,
        description="Shared secret; when set every request needs 'Authorization: Bearer <key>'.",
    )
    allow_unauthenticated: bool = Field(
        False, description="Allow binding a non-loopback address without an api_key."
    )
    max_body_bytes: int = Field(32 * MIB, ge=1, description="Largest request body accepted on the wire.")
    max_inflated_bytes: int = Field(
        128 * MIB, ge=1, description="Largest size a gzip request body may inflate to."
    )
    max_queue_sequences: int = Field(
        100_000,
        ge=0,
        description="Sequences waiting to be served (queue, buffers, formed batches) before ingest answers 503. 0: no limit.",
    )
    max_queue_bytes: int = Field(
        0, ge=0, description="Stored bytes waiting to be served before ingest answers 503. 0: no limit."
    )
    retry_after_seconds: int = Field(1, ge=1, description="Retry-After sent with a 503.")
    max_unacked_batches: int = Field(
        64, ge=0, description="Served but unacknowledged batches kept for /batch/replay (oldest dropped)."
    )
    inspect_history: int = Field(
        256, ge=0, description="Recently received groups kept for GET /inspect/recent."
    )
    env_heartbeat_seconds: float = Field(
        60.0,
        ge=0,
        description=(
            "An environment not heard from (status poll, registration or groups) for this many seconds loses its"
            " weight and min_batch_allocation until it is heard from again. 0: never."
        ),
    )
    log_level: Literal["debug", "info", "warning", "error"] = Field("info", description="Log level.")
    log_format: Literal["text", "json"] = Field(
        "text", description="'text': key=value lines; 'json': one JSON object per line."
    )
    access_log: bool = Field(False, description="Log every HTTP request (uvicorn access log).")

    @field_validator("api_key")
    @classmethod
    def _empty_key_is_none(cls, value: str | None) -> str | None:
        return value or None

    @field_validator("data_dir", mode="before")
    @classmethod
    def _expand_user(cls, value: object) -> object:
        return str(Path(value).expanduser()) if isinstance(value, str | Path) else value

    def bind_problem(self) -> str | None:
        """Why this configuration must not start, or ``None``.

        Binding anything but a loopback address without an API key exposes the unauthenticated
        API (including the state-wiping ``GET /reset_data``) to the network.
        """
        if self.api_key or self.allow_unauthenticated or is_loopback(self.host):
            return None
        return (
            f"refusing to listen on non-loopback address {self.host!r} without an API key: "
            f"set --api-key or {API_KEY_ENV}, or pass --allow-unauthenticated"
        )

    def to_env_json(self) -> str:
        """Serialise (including the key) for :data:`CONFIG_ENV`."""
        data = self.model_dump(mode="json")
        return json.dumps(data)

    @classmethod
    def from_env(cls) -> ApiConfig:
        """The configuration for an app imported by uvicorn (``atroposlib.api:app``).

        Reads :data:`CONFIG_ENV` (set by ``run-api``) when present; otherwise defaults, with the
        key from ``ATROPOS_API_KEY``.
        """
        raw = os.environ.get(CONFIG_ENV)
        if raw:
            return cls.model_validate_json(raw)
        return cls(api_key=os.environ.get(API_KEY_ENV) or None)


def is_loopback(host: str) -> bool:
    """True when every address ``host`` resolves to is a loopback address."""
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        pass
    try:
        infos = socket.getaddrinfo(host, None)
    except OSError:
        return False
    addresses = {info[4][0] for info in infos}
    return bool(addresses) and all(ipaddress.ip_address(a.split("%")[0]).is_loopback for a in addresses)
