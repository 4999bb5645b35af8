"""Records and errors of the trajectory API's state: env records, run metadata, counters."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from typing import Any

#: Smallest inference weight ``/status-env`` reports, so no env is starved completely.
MIN_ENV_WEIGHT = 0.01
NOT_REGISTERED_MESSAGE = "Trainer not registered. Call /register first."
#: ``/latest_example`` before any group entered the queue.
EMPTY_LATEST_EXAMPLE = {
    "tokens": [],
    "masks": [],
    "scores": [],
    "advantages": [],
    "ref_logprobs": [],
    "generation_params": [],
    "inference_logprobs": [],
    "messages": [],
    "images": [],
}


class NotRegistered(Exception):
    """The trainer has not registered (or the state was reset since)."""


class UnknownEnv(Exception):
    """No environment with this id is registered."""


class UnknownBatch(Exception):
    """No served, unacknowledged batch has this id."""


class QueueFull(Exception):
    """Accepting the groups would exceed the queue limit; the client should retry later."""


@dataclass
class EnvRecord:
    """A registered environment (compat: the field names of atroposlib 0.4.0's env records)."""

    registered_id: int
    max_context_len: int
    weight: float
    desired_name: str
    real_name: str
    last_update: float
    connected: bool
    min_batch_allocation: float | None
    group_size: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class RunMeta:
    """Scalar state: the trainer's registration, the step counter and the started flag."""

    registered: bool = False
    wandb_group: str | None = None
    wandb_project: str | None = None
    batch_size: int = -1
    max_token_len: int = -1
    checkpoint_dir: str | None = None
    save_checkpoint_interval: int | None = None
    num_steps: int = -1
    step: int = 0
    started: bool = False
    max_staleness: int | None = None

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RunMeta:
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


@dataclass
class EnvStats:
    """Per-env ingest counters since the process started (for ``/metrics``)."""

    groups: int = 0
    sequences: int = 0
    score_sum: float = 0.0
    score_count: int = 0


@dataclass
class Counters:
    """Process-lifetime counters for ``/metrics``."""

    groups_received: int = 0
    sequences_received: int = 0
    batches_formed: int = 0
    batches_served: int = 0
    sequences_served: int = 0
    per_env: dict[int | None, EnvStats] = field(default_factory=dict)


@dataclass
class ServedBatch:
    """A batch handed to the trainer: the full ``/batch`` response body and its size."""

    batch_id: int
    body: bytes
    groups: int
    sequences: int
