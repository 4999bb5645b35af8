"""Data-parallel training across processes (``torchrun``): ranks, the model wrapper, the batch channel,
shards, metrics.

Roles of the ranks:

* **rank 0** alone talks to the trajectory API and the inference servers, writes checkpoints, metrics and
  logs. Each step it prepares the API batch and broadcasts it (``BatchChannel``); while it waits for a
  batch it broadcasts a heartbeat every :data:`HEARTBEAT_S` seconds, and a stop message ends the run on
  every rank.
* **every rank** trains on its contiguous shard of the global batch (:func:`shard_bounds`), cut into
  micro-batches of ``micro_batch_size``; every rank runs the same number of micro-batches (a rank with fewer
  sequences runs a zero-weight one), so gradient synchronisation lines up. Each sequence's loss is
  weighted ``1 / N`` of the global batch, so the averaged gradient (and the reported loss) equal those
  of one process training on the whole batch.

The model is replicated (``--distributed-strategy ddp``: ``DistributedDataParallel``) or sharded
(``fsdp``: FSDP2's ``fully_shard`` per decoder layer, parameters, gradients and optimizer state split over
the ranks). With FSDP every forward pass and every checkpoint is a collective, so every rank runs the same
forwards (the zero-weight micro-batches above) and joins every checkpoint
(:func:`example_trainer.grpo.checkpointing.gather_full_state`).

Ranks and world size come from the launcher (``RANK``, ``WORLD_SIZE``, ``LOCAL_RANK`` as set by
``torchrun``) or, without one, from ``--trainer-rank`` / ``--world-size``; the process group is joined
through ``--init-method`` (``env://`` reads ``MASTER_ADDR`` / ``MASTER_PORT``). The backend is NCCL on
CUDA and gloo on CPU unless ``--distributed-backend`` says otherwise. On CUDA each rank uses
``cuda:<LOCAL_RANK>``.
"""

from __future__ import annotations

import datetime
import logging
import math
import os
import time
from collections.abc import Mapping
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, fields
from typing import Any

import torch

from example_trainer.grpo.data import MicroBatch, PreparedBatch
from example_trainer.grpo.packing import batch_rows, micro_batches, plan_micro_batches, row_lengths

logger = logging.getLogger(__name__)

#: Seconds between "still waiting for a batch" messages from rank 0 (keeps collectives far from timeouts).
HEARTBEAT_S = 10.0


class DistributedConfigError(ValueError):
    """Launcher variables and trainer flags describe an impossible process layout."""


@dataclass(frozen=True)
class DistContext:
    """Where this process sits in the data-parallel group (world size 1: not distributed)."""

    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: str = "cpu"
    backend: str | None = None  #: ``nccl`` / ``gloo``; None when not distributed

    @property
    def enabled(self) -> bool:
        return self.world_size > 1

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def _env_int(environ: Mapping[str, str], name: str) -> int | None:
    raw = environ.get(name)
    if raw is None or raw == "":
        return None
    try:
        return int(raw)
    except ValueError:
        raise DistributedConfigError(f"${name} must be an integer, got {raw!r}") from None


def resolve_ranks(
    trainer_rank: int, world_size: int, environ: Mapping[str, str] | None = None
) -> tuple[int, int, int]:
    """``(rank, world_size, local_rank)`` from the launcher's variables, else from the flags.

    ``$WORLD_SIZE`` / ``$RANK`` / ``$LOCAL_RANK`` (set by ``torchrun``) win over ``--world-size`` /
    ``--trainer-rank`` left at their defaults (1 / 0); flags set to other values must agree with them.
    Without ``$LOCAL_RANK`` the local rank is the rank (one node).

    Raises:
        DistributedConfigError: a flag contradicts a launcher variable, or the rank is outside the world.
    """
    env = os.environ if environ is None else environ
    env_world, env_rank, env_local = (_env_int(env, n) for n in ("WORLD_SIZE", "RANK", "LOCAL_RANK"))
    world, rank = world_size, trainer_rank
    if env_world is not None:
        if world_size not in (1, env_world):
            raise DistributedConfigError(
                f"--world-size {world_size} disagrees with $WORLD_SIZE={env_world} set by the launcher"
            )
        world = env_world
    if env_rank is not None:
        if trainer_rank not in (0, env_rank):
            raise DistributedConfigError(
                f"--trainer-rank {trainer_rank} disagrees with $RANK={env_rank} set by the launcher"
            )
        rank = env_rank
    if world < 1 or not 0 <= rank < world:
        raise DistributedConfigError(f"rank {rank} is outside a world of {world} process(es)")
    return rank, world, env_local if env_local is not None else rank


def rank_device(device: str, local_rank: int, world_size: int) -> str:
    """The device of this rank: ``cuda`` becomes ``cuda:<local_rank>`` when distributed."""
    if world_size > 1 and device.startswith("cuda"):
        return f"cuda:{local_rank}"
    return device


def init_distributed(config: Any, environ: Mapping[str, str] | None = None) -> DistContext:
    """Join the process group described by ``config`` and the launcher (no-op for one process).

    ``config`` needs ``trainer_rank``, ``world_size``, ``init_method``, ``device``,
    ``distributed_backend`` and ``distributed_timeout`` (seconds a collective may wait).

    Raises:
        DistributedConfigError: inconsistent layout, or NCCL asked for without CUDA.
    """
    rank, world, local = resolve_ranks(config.trainer_rank, config.world_size, environ)
    device = rank_device(config.device, local, world)
    if world == 1:
        return DistContext(device=device)
    import torch.distributed as dist

    backend = config.distributed_backend
    if backend == "auto":
        backend = "nccl" if device.startswith("cuda") else "gloo"
    if backend == "nccl" and not device.startswith("cuda"):
        raise DistributedConfigError("--distributed-backend nccl needs a CUDA device (use gloo on CPU)")
    if device.startswith("cuda"):
        torch.cuda.set_device(torch.device(device))
    if not dist.is_initialized():
        dist.init_process_group(
            backend,
            init_method=config.init_method,
            rank=rank,
            world_size=world,
            timeout=datetime.timedelta(seconds=config.distributed_timeout),
        )
    logger.info("rank %d of %d (local rank %d) on %s, backend %s", rank, world, local, device, backend)
    return DistContext(rank=rank, world_size=world, local_rank=local, device=device, backend=backend)


def shutdown_distributed(ctx: DistContext) -> None:
    """Leave the process group (if this process joined one)."""
    if not ctx.enabled:
        return
    import torch.distributed as dist

    if dist.is_initialized():
        dist.destroy_process_group()


def barrier(ctx: DistContext) -> None:
    if ctx.enabled:
        import torch.distributed as dist

        dist.barrier()


def broadcast_object(ctx: DistContext, value: Any = None) -> Any:
    """Rank 0's ``value`` on every rank (small picklable objects only)."""
    if not ctx.enabled:
        return value
    import torch.distributed as dist

    box = [value if ctx.is_main else None]
    dist.broadcast_object_list(box, src=0)
    return box[0]


# --- the model --------------------------------------------------------------------------------------


def _transformer_blocks(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The repeated decoder layers of a causal LM (the units FSDP gathers one at a time)."""
    for module in model.modules():
        layers = getattr(module, "layers", None)
        if isinstance(layers, torch.nn.ModuleList) and len(layers) > 0:
            return list(layers)
    raise DistributedConfigError(
        f"--distributed-strategy fsdp: no decoder layers (a .layers ModuleList) found in {type(model).__name__}"
    )


def wrap_model(model: torch.nn.Module, ctx: DistContext, strategy: str = "ddp") -> torch.nn.Module:
    """Prepare ``model`` for data-parallel training; one process gets ``model`` back unchanged.

    ``ddp``: a ``DistributedDataParallel`` wrapper (rank 0's weights win). ``fsdp``: FSDP2's ``fully_shard``
    on each decoder layer and then on the whole model, in place; the parameters become DTensors sharded
    over the ranks (dim 0), so the optimizer must be built over the parameters *after* this call. Every
    rank must hold the same initial weights (they are loaded from the same directory with the same seed).
    """
    if not ctx.enabled:
        return model
    if strategy == "fsdp":
        from torch.distributed.device_mesh import init_device_mesh
        from torch.distributed.fsdp import fully_shard

        mesh = init_device_mesh(torch.device(ctx.device).type, (ctx.world_size,))
        for block in _transformer_blocks(model):
            fully_shard(block, mesh=mesh)
        fully_shard(model, mesh=mesh)
        return model
    if strategy != "ddp":
        raise DistributedConfigError(f"unknown distributed strategy {strategy!r} (expected ddp or fsdp)")
    from torch.nn.parallel import DistributedDataParallel

    device_ids = [torch.device(ctx.device).index] if ctx.device.startswith("cuda") else None
    return DistributedDataParallel(model, device_ids=device_ids)


def is_sharded(model: Any) -> bool:
    """Whether ``model`` was sharded by :func:`wrap_model` with ``fsdp`` (saving it is then collective)."""
    from torch.distributed.fsdp import FSDPModule

    return isinstance(model, FSDPModule)


def unwrap_model(model: Any) -> Any:
    """The module inside a ``DistributedDataParallel`` wrapper (the model itself otherwise, FSDP included:
    ``fully_shard`` works in place)."""
    from torch.nn.parallel import DistributedDataParallel

    return model.module if isinstance(model, DistributedDataParallel) else model


def no_sync(model: Any, last: bool) -> AbstractContextManager[Any]:
    """Skip gradient synchronisation for every micro-batch but the ``last`` one (DDP).

    An FSDP model reduce-scatters after every micro-batch instead: skipping it would keep whole unsharded
    gradients on every rank between micro-batches, the memory FSDP is chosen to save.
    """
    if last or is_sharded(model) or not hasattr(model, "no_sync"):
        return nullcontext()
    return model.no_sync()


# --- shards -----------------------------------------------------------------------------------------


def shard_bounds(num_sequences: int, rank: int, world_size: int) -> tuple[int, int]:
    """``[start, end)`` rows of the global batch that ``rank`` trains (sizes differ by at most one)."""
    return (num_sequences * rank) // world_size, (num_sequences * (rank + 1)) // world_size


def micro_batches_per_rank(num_sequences: int, world_size: int, micro_batch_size: int) -> int:
    """How many micro-batches every rank runs: enough for the largest shard."""
    return max(1, math.ceil(math.ceil(num_sequences / world_size) / micro_batch_size))


def _full(batch: PreparedBatch) -> dict[str, torch.Tensor]:
    """The whole batch as row-aligned tensors by field name (see :func:`example_trainer.grpo.packing.batch_rows`;
    fields no micro-batch has are left out)."""
    rows = batch_rows(batch.micro_batches)
    return {f.name: getattr(rows, f.name) for f in fields(rows) if getattr(rows, f.name) is not None}


def local_micro_batches(
    batch: PreparedBatch,
    ctx: DistContext,
    micro_batch_size: int,
    token_budget: int | None = None,
    packed: bool = False,
) -> list[MicroBatch | None]:
    """This rank's micro-batches of the global ``batch``; ``None`` entries are zero-weight placeholders.

    The rank's rows (:func:`shard_bounds`) are grouped by :func:`example_trainer.grpo.packing.plan_micro_batches`;
    every rank gets as many entries as the rank with the most micro-batches (:func:`micro_batches_per_rank`
    when grouping by ``micro_batch_size``).
    """
    bounds = [shard_bounds(batch.num_sequences, r, ctx.world_size) for r in range(ctx.world_size)]
    if token_budget is None:
        count = micro_batches_per_rank(batch.num_sequences, ctx.world_size, micro_batch_size)
    else:
        lengths = row_lengths(batch_rows(batch.micro_batches).labels)
        count = max(
            len(plan_micro_batches(lengths[lo:hi], micro_batch_size, token_budget, packed))
            for lo, hi in bounds
        )
    return micro_batches(batch, micro_batch_size, token_budget, packed, shard=bounds[ctx.rank], count=count)


# --- rank 0 -> all: the batch channel ---------------------------------------------------------------

#: Everything of a :class:`PreparedBatch` but its tensors (sent as one header).
_META_FIELDS = tuple(f.name for f in fields(PreparedBatch) if f.name != "micro_batches")


class BatchChannel:
    """Carries rank 0's decisions to the other ranks: a prepared batch, a heartbeat, or stop.

    Rank 0 calls :meth:`send_batch` / :meth:`heartbeat` / :meth:`send_stop`; the other ranks call
    :meth:`receive`, which returns the batch (identical tensors on every rank) or None for stop. With
    one process every method is a no-op and :meth:`send_batch` returns its argument.
    """

    def __init__(self, ctx: DistContext) -> None:
        self.ctx = ctx
        self._last_sent = time.monotonic()
        self._transport = ctx.device if ctx.backend == "nccl" else "cpu"

    def _send_header(self, header: dict[str, Any]) -> None:
        broadcast_object(self.ctx, header)
        self._last_sent = time.monotonic()

    def heartbeat(self, waited_s: float = 0.0) -> None:
        """Rank 0, while waiting for a batch: tell the others it is alive (at most every HEARTBEAT_S)."""
        if self.ctx.enabled and time.monotonic() - self._last_sent >= HEARTBEAT_S:
            self._send_header({"kind": "wait", "waited_s": waited_s})

    def send_stop(self) -> None:
        if self.ctx.enabled:
            self._send_header({"kind": "stop"})

    def send_batch(self, batch: PreparedBatch) -> PreparedBatch:
        """Rank 0: broadcast ``batch``; returns the batch every rank now holds (one micro-batch of all rows)."""
        if not self.ctx.enabled:
            return batch
        import torch.distributed as dist

        tensors = _full(batch)
        self._send_header(
            {
                "kind": "batch",
                "meta": {name: getattr(batch, name) for name in _META_FIELDS},
                "tensors": [
                    (name, tuple(t.shape), str(t.dtype).removeprefix("torch.")) for name, t in tensors.items()
                ],
            }
        )
        moved = {}
        for name, tensor in tensors.items():
            tensor = tensor.to(self._transport).contiguous()
            dist.broadcast(tensor, src=0)
            moved[name] = tensor
        return self._assemble(batch_meta={n: getattr(batch, n) for n in _META_FIELDS}, tensors=moved)

    def receive(self) -> PreparedBatch | None:
        """Other ranks: wait for rank 0's next batch (None: stop training)."""
        import torch.distributed as dist

        while True:
            header = broadcast_object(self.ctx)
            if header["kind"] == "stop":
                return None
            if header["kind"] == "batch":
                break
        tensors = {}
        for name, shape, dtype in header["tensors"]:
            tensor = torch.empty(shape, dtype=getattr(torch, dtype), device=self._transport)
            dist.broadcast(tensor, src=0)
            tensors[name] = tensor
        return self._assemble(batch_meta=header["meta"], tensors=tensors)

    @staticmethod
    def _assemble(batch_meta: Mapping[str, Any], tensors: Mapping[str, torch.Tensor]) -> PreparedBatch:
        micro = MicroBatch(**{f.name: tensors.get(f.name) for f in fields(MicroBatch)})
        return PreparedBatch(micro_batches=[micro], **batch_meta)


# --- metrics ----------------------------------------------------------------------------------------


def gather_step_sums(
    ctx: DistContext, sums: dict[str, float], computed: int, total_loss: float
) -> tuple[dict[str, float], int, float]:
    """Add up every rank's metric sums, computed micro-batch counts and losses.

    ``total_loss`` of each rank is its share of the weighted loss; the result is the global mean loss.
    """
    if not ctx.enabled:
        return sums, computed, total_loss
    import torch.distributed as dist

    gathered: list[Any] = [None] * ctx.world_size
    dist.all_gather_object(gathered, (sums, computed, total_loss))
    merged: dict[str, float] = {}
    for part, _, _ in gathered:
        for key, value in part.items():
            merged[key] = merged.get(key, 0.0) + value
    return (
        merged,
        sum(c for _, c, _ in gathered),
        sum(loss for _, _, loss in gathered) / ctx.world_size,
    )


__all__ = [
    "HEARTBEAT_S",
    "BatchChannel",
    "DistContext",
    "DistributedConfigError",
    "barrier",
    "broadcast_object",
    "gather_step_sums",
    "init_distributed",
    "is_sharded",
    "local_micro_batches",
    "micro_batches_per_rank",
    "no_sync",
    "rank_device",
    "resolve_ranks",
    "shard_bounds",
    "shutdown_distributed",
    "unwrap_model",
    "wrap_model",
]
