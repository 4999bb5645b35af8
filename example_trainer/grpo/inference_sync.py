"""Keeping the inference servers in step with training: the trainer's side of every weight-bridge mode.

:class:`InferenceSync` starts (or finds) the server(s) and, after a checkpoint, makes them serve it: a
restart or in-place reload of the local vLLM (``example_trainer.inference.vllm_manager``), a LoRA hot-swap,
``POST /bridge/update_weights`` on remote servers, or a broadcast of the weights straight into the servers'
workers (``--refresh-mode broadcast``).
"""

from __future__ import annotations

import logging
import time
from pathlib import Path
from typing import Any

from example_trainer.grpo.config import TrainingConfig

logger = logging.getLogger(__name__)


class InferenceSync:
    """Keeps the inference servers in step with training.

    * Local (default): one vLLM process owned by ``example_trainer.inference.vllm_manager`` (its log, health wait,
      one automatic restart after a crash). In ``lora_only`` mode an inference server that is already
      running on ``--vllm-port`` (started by the user with ``--enable-lora``) is
      used as it is: adapters are hot-swapped into it and it is left running at the end.
    * Remote (``--inference-server-urls``, or ``--num-inference-nodes`` on SLURM): servers started
      elsewhere (``scripts/slurm/``) are refreshed from each checkpoint, all at once: full weights through
      ``POST /bridge/update_weights`` (``example_trainer.inference.vllm_api_server``), adapters by LoRA hot-swap.
      The checkpoint directory must be readable by the servers (a shared filesystem).
    """

    def __init__(self, config: TrainingConfig) -> None:
        self.config = config
        self.manager: Any = None
        self.external_url: str | None = None
        self.remote_urls: list[str] = []
        self.active = config.use_vllm
        self.broadcaster: Any = None
        #: the servers (root URLs and the local server's pid) the broadcaster's group was formed with
        self._group_members: tuple[Any, ...] | None = None

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.config.vllm_port}"

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL (``.../v1``) of the server."""
        return self.manager.base_url if self.manager is not None else f"{self.root_url}/v1"

    def start(self, model_path: str, adapter_dir: Path | None = None) -> None:
        if not self.active:
            return
        remote = remote_inference_urls(self.config)
        if remote:
            self.remote_urls = [_root_url(url) for url in remote]
            logger.info("refreshing %d remote inference server(s): %s", len(remote), ", ".join(remote))
            if adapter_dir is not None:
                self._refresh_remote(adapter_dir, adapter_dir.name)
            return
        if self.config.weight_bridge_mode in ("lora_only", "shared_vllm") and _healthy(self.root_url):
            logger.info("using the inference server already running at %s", self.root_url)
            self.external_url = self.root_url
            if adapter_dir is not None:
                _hot_swap(self.external_url, adapter_dir, adapter_dir.name)
            return
        from example_trainer.inference.vllm_manager import VllmManager

        self.manager = VllmManager(self.config)
        self.manager.start(model_path)
        if adapter_dir is not None:
            self.manager.load_lora(str(adapter_dir), "training_adapter")

    @property
    def server_root_urls(self) -> list[str]:
        """The root URLs of the servers this run keeps up to date."""
        if self.remote_urls:
            return list(self.remote_urls)
        if self.external_url is not None:
            return [self.external_url]
        return [self.manager.root_url] if self.manager is not None else []

    def shared_model(self) -> Any:
        """``shared_vllm``: the policy built over the local server's own weight tensors (no copy)."""
        from example_trainer.grpo.model import _attn_implementation
        from example_trainer.inference.shared_weights import (
            attach_manifest,
            build_shared_model,
            fetch_manifest,
        )

        urls = self.server_root_urls
        if len(urls) != 1:
            raise RuntimeError("shared_vllm needs the one local inference server to be running")
        manifest = fetch_manifest(urls[0], timeout=self.config.vllm_startup_timeout)
        tensors = attach_manifest(manifest)
        model = build_shared_model(self.config.model_name, tensors, _attn_implementation(self.config.device))
        logger.info(
            "training the inference server's own weights (%d tensors in %d shared buffer(s))",
            len(tensors), len(manifest["buffers"]),
        )  # fmt: skip
        return model

    def broadcast(self, model: Any) -> float:
        """``--refresh-mode broadcast``: send ``model``'s weights into every server; returns the seconds.

        A local server that died is restarted first (:meth:`check`); a server restarted or moved since the
        weight group was formed gets a new group (the old one has a dead member), and a hand-off that fails
        because its server died meanwhile is made once more, to the restarted server.
        """
        from example_trainer.inference.weight_broadcast import WeightBroadcastError, unique_named_tensors

        start = time.perf_counter()
        named = unique_named_tensors(model)
        wait = not self.config.weight_broadcast_async
        try:
            self._current_broadcaster().send(named, wait=wait)
        except WeightBroadcastError as exc:
            self._settle_after_failure()
            if self._members() == self._group_members:
                raise
            logger.warning(
                "weight hand-off failed (%s); the inference server was restarted: sending again", exc
            )
            self._current_broadcaster().send(named, wait=wait)
        return time.perf_counter() - start

    def _settle_after_failure(self, grace: float = 5.0) -> None:
        """After a failed hand-off: a local server killed a moment ago may not have exited yet; give it
        ``grace`` seconds to, then restart it if it did (:meth:`check`)."""
        deadline = time.monotonic() + grace
        while self.manager is not None and not self.manager.exited() and time.monotonic() < deadline:
            time.sleep(0.05)
        self.check()

    def _members(self) -> tuple[Any, ...]:
        return (*self.server_root_urls, self.manager.pid if self.manager is not None else None)

    def _current_broadcaster(self) -> Any:
        """The broadcaster whose group holds the servers running now (a new one after a restart or move)."""
        import socket

        from example_trainer.inference.weight_broadcast import WeightBroadcaster

        self.check()
        members = self._members()
        if self.broadcaster is not None and members != self._group_members:
            logger.warning("the inference server was restarted or moved: forming a new weight group")
            self.broadcaster.abandon()
            self.broadcaster = None
        if self.broadcaster is None:
            backend = self.config.weight_broadcast_backend
            if backend == "auto":
                backend = "nccl" if self.remote_urls and self.config.device.startswith("cuda") else "gloo"
            host = self.config.weight_broadcast_host or (
                socket.getfqdn() if self.remote_urls else "127.0.0.1"
            )
            self.broadcaster = WeightBroadcaster(
                self.server_root_urls, backend=backend, host=host, device=self.config.device,
                timeout=self.config.vllm_startup_timeout,
            )  # fmt: skip
            self._group_members = members
        return self.broadcaster

    def wait_until_sent(self) -> None:
        """Block until the last (background) weight hand-off no longer reads the model's tensors: what the
        optimizer waits for before it changes them (``--weight-broadcast-async``)."""
        if self.broadcaster is not None:
            self.broadcaster.wait_sent()

    def wait_for_refresh(self) -> None:
        """Block until the last (background) weight hand-off is served."""
        if self.broadcaster is not None:
            self.broadcaster.wait()

    def check(self) -> None:
        """Raise if the managed server died and could not be restarted (VllmDiedError)."""
        if self.manager is not None:
            self.manager.ensure_running()

    def refresh(self, checkpoint_dir: Path, step: int) -> float:
        """Make the server serve ``checkpoint_dir`` (weights or adapter); returns the seconds it took."""
        if self.remote_urls:
            start = time.perf_counter()
            self._refresh_remote(checkpoint_dir, f"step_{step}")
            return time.perf_counter() - start
        if self.external_url is not None:
            start = time.perf_counter()
            _hot_swap(self.external_url, checkpoint_dir, f"step_{step}")
            return time.perf_counter() - start
        if self.manager is None:
            return 0.0
        return float(self.manager.refresh(str(checkpoint_dir), step))

    def _refresh_remote(self, checkpoint_dir: Path, name: str) -> None:
        """Load ``checkpoint_dir`` into every remote server in parallel; raises naming each failure."""
        from concurrent.futures import ThreadPoolExecutor

        from example_trainer.inference.weight_refresh import request_weight_update

        def one(url: str) -> str | None:
            try:
                if self.config.is_lora:
                    _hot_swap(url, checkpoint_dir, name)
                else:
                    request_weight_update(url, checkpoint_dir, timeout=self.config.vllm_startup_timeout)
            except Exception as exc:  # noqa: BLE001 - collected and reported together
                return f"{url}: {exc}"
            return None

        with ThreadPoolExecutor(max_workers=min(32, len(self.remote_urls))) as pool:
            failures = [f for f in pool.map(one, self.remote_urls) if f]
        if failures:
            raise RuntimeError(
                f"{len(failures)} of {len(self.remote_urls)} inference server(s) did not take "
                f"{checkpoint_dir}: " + "; ".join(failures)
            )

    def stop(self) -> None:
        if self.broadcaster is not None:
            self.broadcaster.close()
            self.broadcaster = None
        if self.manager is not None:
            try:
                self.manager.stop()
            finally:
                self.manager = None


def remote_inference_urls(config: TrainingConfig) -> list[str]:
    """The remote servers to refresh: ``--inference-server-urls``, or the servers of the last
    ``--num-inference-nodes`` nodes of the SLURM allocation; [] for a local vLLM."""
    if config.inference_server_urls:
        return list(config.inference_server_urls)
    if config.num_inference_nodes > 0:
        from atroposlib.envs.server_handling.slurm_discovery import trailing_nodes_inference_urls

        return trailing_nodes_inference_urls(config.num_inference_nodes)
    return []


def _root_url(url: str) -> str:
    """``http://host:port/v1`` -> ``http://host:port`` (the server's own routes live at the root)."""
    url = url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def _healthy(root_url: str) -> bool:
    import requests

    try:
        return requests.get(f"{root_url}/health", timeout=2).status_code == 200
    except requests.RequestException:
        return False


def _hot_swap(root_url: str, adapter_dir: Path, name: str) -> None:
    """Load ``adapter_dir`` into an external server: vLLM's ``/v1/load_lora_adapter``, else ``/lora/load``."""
    import requests

    path = str(Path(adapter_dir).resolve())
    resp = requests.post(
        f"{root_url}/v1/load_lora_adapter", json={"lora_name": name, "lora_path": path}, timeout=60
    )
    if resp.status_code != 200:
        resp = requests.post(
            f"{root_url}/lora/load", json={"adapter_path": path, "adapter_name": name}, timeout=60
        )
    if resp.status_code != 200:
        raise RuntimeError(
            f"inference server at {root_url} refused adapter {path}: HTTP {resp.status_code} {resp.text[:300]}"
        )
