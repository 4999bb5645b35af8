"""Where the trajectory API keeps its state: the store interface, SQLite (durable) and memory."""

from atroposlib.api.store.base import (
    BATCH_PENDING,
    BATCH_SERVED,
    LOC_BATCH,
    LOC_BUFFER,
    LOC_QUEUE,
    LOC_RETIRED,
    BatchRow,
    GroupRow,
    Snapshot,
    Store,
    StoreError,
    Transaction,
)
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
    "BATCH_PENDING",
    "BATCH_SERVED",
    "DB_FILENAME",
    "LOC_BATCH",
    "LOC_BUFFER",
    "LOC_QUEUE",
    "LOC_RETIRED",
    "PAYLOAD_DIRNAME",
    "SCHEMA_VERSION",
    "STORAGE_ERRORS",
    "BatchRow",
    "GroupRow",
    "MemoryStore",
    "PayloadError",
    "Snapshot",
    "SqliteStore",
    "Store",
    "StoreError",
    "Transaction",
]
