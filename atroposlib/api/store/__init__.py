"""Where the trajectory API keeps its state: the store interface, SQLite (durable) and memory."""

from atroposlib.api.store import base
from atroposlib.api.store.base import *  # noqa: F403 - the interface is this package's interface
from atroposlib.api.store.memory import MemoryStore
from atroposlib.api.store.payload_log import PayloadError
from atroposlib.api.store.sqlite import (
    DB_FILENAME,
    PAYLOAD_DIRNAME,
    SCHEMA_VERSION,
    STORAGE_ERRORS,
    SqliteStore,
)

__all__ = [
    *base.__all__,
    "DB_FILENAME",
    "PAYLOAD_DIRNAME",
    "SCHEMA_VERSION",
    "STORAGE_ERRORS",
    "MemoryStore",
    "PayloadError",
    "SqliteStore",
]
