"""Weight hand-off without the disk: the trainer broadcasts its weights into the inference servers' workers.

The trainer (rank 0) and every inference server (ranks 1..N; one rank per server) form a
``torch.distributed`` process group of their own, separate from any group the trainer trains in: gloo
(CPU memory, any machines that reach each other over TCP) or NCCL (GPU memory, each rank on its own GPU).
A refresh tells every server which tensors come (``POST /bridge/receive_weights``: names, shapes, dtypes)
and broadcasts them one by one, straight from the trainer's own tensors (staged through CPU memory only
where gloo sends a GPU tensor); each server receives them into one flat bucket per dtype and loads them in
place (vLLM: ``reload_weights`` with the received tensors; the hf server: into its spare copy),
exactly as if they had been read from a checkpoint, but without writing or reading one.

Server routes (``example_trainer.inference.vllm_api_server`` and ``example_trainer.inference.hf_generation``):

* ``POST /bridge/init_weight_group`` ``{"host", "port", "world_size", "rank", "backend", "timeout"}``:
  join the group (returns once every rank has joined);
* ``POST /bridge/receive_weights`` ``{"tensors": [{"name", "shape", "dtype"}, ...]}``: receive one
  broadcast and load it (returns once the new weights serve).
"""

from __future__ import annotations

import datetime
import logging
import socket
import threading
import time
from collections.abc import Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Literal

import torch

logger = logging.getLogger(__name__)

Backend = Literal["gloo", "nccl"]
_DTYPES = {
    "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16, "float64": torch.float64,
    "int64": torch.int64, "int32": torch.int32, "uint8": torch.uint8, "bool": torch.bool,
}  # fmt: skip


class WeightBroadcastError(RuntimeError):
    """A server could not join the group or receive the weights (the message names it and says why)."""


def dtype_name(dtype: torch.dtype) -> str:
    return str(dtype).removeprefix("torch.")


def tensor_specs(named: Sequence[tuple[str, torch.Tensor]]) -> list[dict[str, Any]]:
    return [{"name": n, "shape": list(t.shape), "dtype": dtype_name(t.dtype)} for n, t in named]


def unique_named_tensors(model: Any) -> list[tuple[str, torch.Tensor]]:
    """``model``'s state (parameters and persistent buffers), each storage once (tied weights under their
    first name)."""
    out, seen = [], set()
    for name, tensor in model.state_dict().items():
        key = (tensor.device, tensor.data_ptr(), tuple(tensor.shape))
        if key in seen:
            continue
        seen.add(key)
        out.append((name, tensor))
    return out


def unpack(
    specs: Sequence[dict[str, Any]], buckets: Sequence[torch.Tensor]
) -> list[tuple[str, torch.Tensor]]:
    """The tensors of ``specs`` as views into ``buckets`` (laid out by :func:`bucket_layout`: each dtype's
    tensors one after another, in the order of ``specs``)."""
    by_dtype = {b.dtype: b for b in buckets}
    offsets: dict[torch.dtype, int] = {}
    out = []
    for spec in specs:
        dtype = _DTYPES[spec["dtype"]]
        shape = tuple(spec["shape"])
        n = 1
        for d in shape:
            n *= d
        start = offsets.get(dtype, 0)
        out.append((spec["name"], by_dtype[dtype][start : start + n].view(shape)))
        offsets[dtype] = start + n
    return out


def bucket_layout(specs: Sequence[dict[str, Any]]) -> list[tuple[torch.dtype, int]]:
    """(dtype, elements) of each bucket: one per dtype, in order of first appearance in ``specs``."""
    sizes: dict[torch.dtype, int] = {}
    for spec in specs:
        n = 1
        for d in spec["shape"]:
            n *= d
        dtype = _DTYPES[spec["dtype"]]
        sizes[dtype] = sizes.get(dtype, 0) + n
    return list(sizes.items())


def new_group(host: str, port: int, rank: int, world_size: int, backend: Backend, timeout: float) -> Any:
    """A process group of its own (no default group is touched); rank 0 hosts the rendezvous store."""
    import torch.distributed as dist

    delta = datetime.timedelta(seconds=timeout)
    store = dist.TCPStore(host, port, world_size, rank == 0, timeout=delta)
    if backend == "gloo":
        return dist.ProcessGroupGloo(store, rank, world_size, delta)
    if backend == "nccl":
        opts = dist.ProcessGroupNCCL.Options()
        opts._timeout = delta
        return dist.ProcessGroupNCCL(store, rank, world_size, opts)
    raise ValueError(f"unknown backend {backend!r} (gloo or nccl)")


def broadcast(group: Any, tensor: torch.Tensor, root: int = 0) -> None:
    import torch.distributed as dist

    opts = dist.BroadcastOptions()
    opts.rootRank = root
    opts.rootTensor = 0
    group.broadcast([tensor], opts).wait()
    if tensor.is_cuda:
        torch.cuda.current_stream(tensor.device).synchronize()


class WeightReceiver:
    """The server's end: joins the trainer's group, then receives broadcasts of weights."""

    def __init__(self) -> None:
        self.group: Any = None
        self.backend: Backend = "gloo"
        self.received = 0

    def join(
        self, host: str, port: int, world_size: int, rank: int, backend: Backend, timeout: float
    ) -> None:
        self.group = new_group(host, port, rank, world_size, backend, timeout)
        self.backend = backend

    def receive(
        self, specs: Sequence[dict[str, Any]], device: torch.device | str
    ) -> list[tuple[str, torch.Tensor]]:
        """Receive one broadcast; returns the tensors (on ``device``) named by ``specs``."""
        if self.group is None:
            raise WeightBroadcastError("no weight group: POST /bridge/init_weight_group first")
        transfer = torch.device(device) if self.backend == "nccl" else torch.device("cpu")
        buckets = [torch.empty(n, dtype=dtype, device=transfer) for dtype, n in bucket_layout(specs)]
        for _, view in unpack(specs, buckets):  # one collective per tensor, in the sender's order
            broadcast(self.group, view)
        if transfer != torch.device(device):
            buckets = [b.to(device) for b in buckets]
        self.received += 1
        return unpack(specs, buckets)


def _post(url: str, body: dict[str, Any], api_key: str | None, timeout: float) -> dict[str, Any]:
    import requests

    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    resp = requests.post(url, json=body, headers=headers, timeout=timeout)
    if resp.status_code != 200:
        raise WeightBroadcastError(f"{url}: HTTP {resp.status_code} {resp.text[:400]}")
    return resp.json()


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


class WeightBroadcaster:
    """The trainer's end: one group with the servers at ``root_urls``; :meth:`send` hands them new weights.

    ``host`` is the address the servers reach the trainer at (127.0.0.1 for servers on this machine).
    ``device``: where the tensors travel from (the trainer's device for NCCL; CPU memory for gloo, a GPU
    tensor being copied there one at a time).
    """

    def __init__(
        self,
        root_urls: Iterable[str],
        *,
        backend: Backend = "gloo",
        host: str = "127.0.0.1",
        device: str = "cpu",
        api_key: str | None = None,
        timeout: float = 600.0,
    ) -> None:
        self.root_urls = [u.rstrip("/") for u in root_urls]
        self.backend = backend
        self.host = host
        self.device = torch.device(device if backend == "nccl" else "cpu")
        self.api_key = api_key
        self.timeout = timeout
        self.group: Any = None
        self._pool = ThreadPoolExecutor(max_workers=max(1, min(32, len(self.root_urls))))
        self._transfer_pool = ThreadPoolExecutor(max_workers=1)
        self._pending: Any = None
        self._sent: threading.Event | None = None

    def connect(self) -> None:
        """Form the group: every server joins (over HTTP) while this process hosts the rendezvous."""
        port = free_port("0.0.0.0" if self.host not in ("127.0.0.1", "localhost") else "127.0.0.1")
        world = 1 + len(self.root_urls)
        futures = [
            self._pool.submit(
                _post, f"{url}/bridge/init_weight_group",
                {"host": self.host, "port": port, "world_size": world, "rank": i + 1, "backend": self.backend,
                 "timeout": self.timeout},
                self.api_key, self.timeout,
            )
            for i, url in enumerate(self.root_urls)
        ]  # fmt: skip
        try:
            self.group = new_group(self.host, port, 0, world, self.backend, self.timeout)
        finally:
            errors = [str(f.exception()) for f in futures if f.exception() is not None]
        if errors:
            raise WeightBroadcastError("could not form the weight group: " + "; ".join(errors))
        logger.info("weight group formed with %d server(s) over %s", len(self.root_urls), self.backend)

    def send(self, named: Sequence[tuple[str, torch.Tensor]], wait: bool = True) -> float:
        """Hand ``named`` tensors to every server; returns the seconds the caller was held.

        The tensors are sent as they are, without a copy. ``wait=False``: returns at once; the broadcast
        reads the tensors in the background, so they must not change until :meth:`wait_sent` returns (the
        trainer's optimizer step waits for it), and the servers' loading goes on after that. The next
        :meth:`send` or :meth:`wait` waits for both (and raises their error, if any).
        """
        start = time.perf_counter()
        self.wait()
        if self.group is None:
            self.connect()
        tensors = [tensor.detach() for _, tensor in named]
        self._sent = sent = threading.Event()
        self._pending = self._transfer_pool.submit(self._transfer, tensor_specs(named), tensors, sent)
        if wait:
            self.wait()
        return time.perf_counter() - start

    def wait_sent(self) -> None:
        """Block until the last hand-off no longer reads the sent tensors (sent, or failed); its error, if
        any, is raised by the next :meth:`send` or :meth:`wait`."""
        sent = self._sent
        if sent is not None:
            sent.wait()

    def wait(self) -> None:
        """Block until the last hand-off is served everywhere; raises its error."""
        pending, self._pending = self._pending, None
        if pending is not None:
            pending.result()

    def _transfer(
        self, specs: list[dict[str, Any]], tensors: list[torch.Tensor], sent: threading.Event
    ) -> None:
        futures = [
            self._pool.submit(
                _post, f"{url}/bridge/receive_weights", {"tensors": specs}, self.api_key, self.timeout
            )
            for url in self.root_urls
        ]
        errors = []
        try:
            with torch.no_grad():
                for tensor in tensors:  # no copy, unless gloo stages a GPU tensor through CPU memory
                    broadcast(self.group, tensor.to(self.device).contiguous())
        except RuntimeError as exc:  # the collective failed: a member went away (gloo: "Connection reset")
            errors.append(f"broadcast: {exc}")
        finally:
            sent.set()
        errors += [f"{url}: {f.exception()}" for url, f in zip(self.root_urls, futures, strict=True)
                   if f.exception() is not None]  # fmt: skip
        if errors:
            raise WeightBroadcastError("weight hand-off failed: " + "; ".join(errors))

    def abandon(self) -> None:
        """Drop the group without waiting for a hand-off in flight (a member died: it would never end);
        an unfinished transfer ends with the group's timeout at the latest."""
        self.group, self._pending, self._sent = None, None, None
        self._transfer_pool.shutdown(wait=False, cancel_futures=True)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def close(self) -> None:
        try:
            self.wait()
        except Exception as exc:  # noqa: BLE001 - closing; the error was the last hand-off's
            logger.warning("the last weight hand-off failed: %s", exc)
        self.abandon()  # nothing is in flight any more
