"""The training loop, shared by every weight-bridge mode.

Per optimizer step: wait for an API batch, drop groups older than ``--max-staleness``, pad and micro-batch
it, run one GRPO step, log, and at the right steps save a checkpoint and bring the inference server up to
date. Modes differ only in what reaches vLLM:

========================  ===============================================================================
``none`` (legacy)         full checkpoints ``step_N``; vLLM restarted on (or, ``--refresh-mode reload``,
                          reloaded in place from) the new checkpoint every ``--vllm-restart-interval`` steps;
                          ``--refresh-mode broadcast``: the weights are broadcast into the servers' workers
                          (:mod:`example_trainer.inference.weight_broadcast`), no checkpoint is needed for it
``lora_only``             adapters ``adapter_step_N``; hot-swapped into an externally started vLLM
``lora_restart``          adapters ``adapter_step_N``; vLLM restarted with the new adapter
``shared_vllm``           one copy of the weights: the trainer trains the local server's own tensors in place
                          (CUDA IPC or CPU shared memory, :mod:`example_trainer.inference.shared_weights`); nothing
                          to refresh; checkpoints every ``--checkpoint-interval`` steps
========================  ===============================================================================

**Acknowledgement and resume.** A batch is acknowledged (``POST /batch/ack``) once a checkpoint containing
its update is on disk (right after its optimizer step with ``--checkpoint-interval 0``); the checkpoint lists
the batches it acknowledges (``trained_batches``), and a resumed trainer acknowledges them again first, so a
crash between the save and the acks never trains a batch twice. After a crash,
``--resume`` loads the newest checkpoint (weights, optimizer, RNG, step ``N``), registers with
``starting_step=N`` (a fresh API adopts it; a durable API keeps its own counter) and calls
``POST /batch/replay``, so the batches served after that checkpoint are served again, oldest first, and
step ``N + 1`` trains the same batch it trained before the crash. The API's step counts batches *formed*;
once the queue is drained both counters agree.
"""

from __future__ import annotations

import gc
import logging
import random
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from example_trainer.grpo.api_client import AtroposApiError, AtroposClient
from example_trainer.grpo.checkpointing import (
    checkpoint_name,
    gather_full_state,
    load_training_state,
    resolve_resume_path,
    save_checkpoint,
)
from example_trainer.grpo.config import TrainingConfig
from example_trainer.grpo.data import prepare_batch, split_stale_groups, staleness_histogram
from example_trainer.grpo.distributed import (
    BatchChannel,
    DistContext,
    barrier,
    broadcast_object,
    init_distributed,
    shutdown_distributed,
    unwrap_model,
    wrap_model,
)
from example_trainer.grpo.model import load_model_and_tokenizer, load_reference_model, trainable_parameters
from example_trainer.grpo.reporting import RunLogger, plot_training_curves
from example_trainer.grpo.step import create_optimizer, run_training_step

logger = logging.getLogger(__name__)

#: ``eval_hook(step, model_dir)`` → metrics such as ``{"accuracy": 0.4}``, logged as ``eval/<name>``.
#: Called before the first step of a fresh run (``model_dir`` None: the initial model), after every
#: inference refresh (vLLM then serves the weights of ``model_dir``) and after the final step;
#: ``accuracy`` is drawn in the end-of-run plot.
EvalHook = Callable[[int, Path | None], Mapping[str, float] | None]

#: ``sync_hook(step, model, server_root_urls)`` → metrics, logged as ``sync/<name>``: called on rank 0 each
#: time the inference servers were brought up to date (after every refresh; in ``shared_vllm`` every
#: ``--vllm-restart-interval`` steps, the servers then serving the trained tensors themselves), with the
#: model being trained. E.g. the device check compares the servers' logprobs with the model's there.
SyncHook = Callable[[int, Any, list[str]], Mapping[str, float] | None]

#: Seconds between two ``GET /batch`` while no batch is ready: a step on a small model takes well under a
#: second, and every poll interval is added to a step whose batch was not ready yet.
BATCH_POLL_S = 0.05


@dataclass
class TrainingResult:
    """Outcome of :func:`train`."""

    step: int  #: optimizer steps completed (including those before a resume)
    start_step: int  #: the step the run (re)started from
    final_checkpoint: Path | None
    plot_path: Path | None
    history: list[dict[str, Any]] = field(default_factory=list)  #: metrics of the steps of this run
    eval_history: list[dict[str, Any]] = field(default_factory=list)
    stopped_early: bool = False
    rank: int = 0  #: this process's rank (only rank 0's result carries metrics)


class InferenceSync:
    """Keeps the inference servers in step with training.

    * Local (default): one vLLM process owned by ``example_trainer.inference.vllm_manager`` (its log, health wait,
      one automatic restart after a crash). In ``lora_only`` mode an inference server that is already
      running on ``--vllm-port`` (the original's set-up: started by the user with ``--enable-lora``) is
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
        """``--refresh-mode broadcast``: send ``model``'s weights into every server; returns the seconds."""
        import socket

        from example_trainer.inference.weight_broadcast import WeightBroadcaster, unique_named_tensors

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
        return self.broadcaster.send(unique_named_tensors(model), wait=not self.config.weight_broadcast_async)

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


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def _load_model(config: TrainingConfig, resume_dir: Path | None, sharded: bool = False) -> tuple[Any, Any]:
    """The policy to train: from the checkpoint when resuming a full-model run, else ``model_name``.

    ``sharded``: left in CPU memory; FSDP moves each layer's shard to the device.
    """
    if sharded:
        return load_model_and_tokenizer(
            config, model_path=str(resume_dir) if resume_dir else None, to_device=False
        )
    if resume_dir is None or config.is_lora:
        model, tokenizer = load_model_and_tokenizer(config)
        if resume_dir is not None:
            from peft import set_peft_model_state_dict
            from safetensors.torch import load_file

            set_peft_model_state_dict(model, load_file(str(resume_dir / "adapter_model.safetensors")))
        return model, tokenizer
    return load_model_and_tokenizer(config, model_path=str(resume_dir))


def _attach_shared_model(
    config: TrainingConfig, inference: InferenceSync, resume_dir: Path | None
) -> tuple[Any, Any]:
    """``shared_vllm``: start the local server on the initial weights and build the policy over its tensors;
    when resuming, the checkpoint's weights are copied into them."""
    from transformers import AutoTokenizer

    inference.start(config.model_name)
    try:
        model = inference.shared_model()
        if resume_dir is not None:
            from safetensors.torch import load_file

            state: dict[str, Any] = {}
            for file in sorted(resume_dir.glob("*.safetensors")):
                state.update(load_file(str(file)))
            with torch.no_grad():
                model.load_state_dict(state, strict=False)
        from example_trainer.grpo.model import prepare_for_training

        prepare_for_training(model, config)
    except BaseException:
        inference.stop()
        raise
    return model, AutoTokenizer.from_pretrained(config.model_name)


def _reconcile_with_api(
    client: AtroposClient, step: int, resumed: bool, trained: list[int] | None = None
) -> dict[str, Any]:
    """After (re)registration: acknowledge the batches the checkpoint already holds (``trained``: a crash
    between its save and their acks left them unacknowledged), then replay the unacknowledged batches when
    resuming and compare step counters."""
    for batch_id in trained or ():
        try:
            client.request("POST", "/batch/ack", {"batch_id": batch_id})
            logger.info("acknowledged batch %d, trained in the checkpoint (its ack was lost)", batch_id)
        except AtroposApiError:
            pass  # acknowledged before the crash, as usual
    replayed = client.replay() if resumed else 0
    status = client.status()
    api_step = int(status.get("current_step", 0)) if isinstance(status, dict) else 0
    if resumed:
        logger.info(
            "resuming at step %d; the API is at step %d with %d unacknowledged batch(es) re-queued",
            step, api_step, replayed,
        )  # fmt: skip
        if api_step < step:
            logger.warning(
                "the API's step (%d) is behind the checkpoint's (%d): it lost its state (in-memory store or a "
                "new data dir?); training continues at step %d", api_step, step, step,
            )  # fmt: skip
    return {"api_step_at_start": api_step, "replayed_batches_at_start": replayed}


class _NoLogger:
    """Stands in for :class:`RunLogger` on ranks other than 0 (they write nothing)."""

    run_id = None

    def log(self, step: int, metrics: Mapping[str, Any]) -> None:
        return None

    def finish(self) -> None:
        return None


def train(
    config: TrainingConfig,
    eval_hook: EvalHook | None = None,
    should_stop: Callable[[], bool] | None = None,
    sync_hook: SyncHook | None = None,
) -> TrainingResult:
    """Run GRPO training as configured until ``config.training_steps`` optimizer steps are done.

    ``should_stop()`` is polled between steps and while waiting for batches (e.g. set by SIGINT); the run
    then saves a checkpoint of the last completed step and returns with ``stopped_early``.

    Under ``torchrun`` (or ``--world-size N``) the processes train data-parallel: rank 0 alone talks to the
    API, refreshes the inference servers, writes checkpoints and metrics, and broadcasts each batch; every
    rank trains its shard (see :mod:`example_trainer.grpo.distributed`). With ``--distributed-strategy fsdp`` the
    model is sharded over the ranks and every rank sends its shards to rank 0 for each checkpoint. Only
    rank 0's ``should_stop`` and ``eval_hook`` are used; its result has the metrics, the other ranks'
    results have none.

    Raises:
        AtroposApiError: the API is unreachable (after bounded retries) or rejects the trainer.
        OSError / ValueError: the model or a checkpoint cannot be loaded, or the config does not fit the model.
        DistributedConfigError: launcher variables and flags disagree.
    """
    ctx = init_distributed(config)
    try:
        return _train(
            config.model_copy(update={"device": ctx.device}), ctx, eval_hook, should_stop, sync_hook
        )
    finally:
        shutdown_distributed(ctx)


def _train(
    config: TrainingConfig,
    ctx: DistContext,
    eval_hook: EvalHook | None,
    should_stop: Callable[[], bool] | None,
    sync_hook: SyncHook | None = None,
) -> TrainingResult:
    should_stop = should_stop or (lambda: False)
    lora = config.is_lora
    shared = config.weight_bridge_mode == "shared_vllm"
    main = ctx.is_main
    sharded = ctx.enabled and config.distributed_strategy == "fsdp"

    client = AtroposClient.from_config(config) if main else None
    if client is not None:
        client.should_stop = should_stop  # no long retries once stopping (the API may be gone first)
    resume_dir: Path | None = None
    if main:
        resume_dir = resolve_resume_path(config.resume, config.save_path)
        client.wait_until_ready(config.api_timeout)  # before the (slow) model load: fail fast
    resume_dir = broadcast_object(ctx, resume_dir)  # every rank loads what rank 0 found
    seed_everything(config.seed)
    inference = InferenceSync(config)
    inference.active = inference.active and main
    if shared:
        if ctx.enabled or not config.use_vllm:
            raise ValueError(
                "shared_vllm trains the local server's weights: one trainer process, with --use-vllm"
            )
        model, tokenizer = _attach_shared_model(config, inference, resume_dir)
    else:
        model, tokenizer = _load_model(config, resume_dir, sharded)
    # FSDP replaces the parameters with sharded ones: the optimizer is built over those
    model = wrap_model(model, ctx, config.distributed_strategy)
    optimizer = create_optimizer(trainable_parameters(unwrap_model(model)), config)
    start_step, extra = 0, {}
    if resume_dir is not None:
        state = load_training_state(resume_dir, optimizer, unwrap_model(model))
        start_step, extra = state.step, state.extra
        logger.info("loaded checkpoint %s (step %d)", resume_dir, start_step)
    ref_model = load_reference_model(config) if config.kl_coef > 0 and not lora else None
    channel = BatchChannel(ctx)

    api_info: dict[str, Any] = {}
    if main:
        client.register(config, starting_step=start_step)
        api_info = _reconcile_with_api(
            client, start_step, resume_dir is not None, extra.get("trained_batches")
        )

    run_log: Any = RunLogger(config, resume_run_id=extra.get("wandb_run_id")) if main else _NoLogger()
    result = TrainingResult(
        step=start_step, start_step=start_step, final_checkpoint=None, plot_path=None, rank=ctx.rank
    )
    if start_step >= config.training_steps:
        logger.info("checkpoint %s already has %d steps: nothing to train", resume_dir, start_step)
        result.final_checkpoint = resume_dir
        run_log.finish()
        inference.stop()
        return result

    def run_eval(step: int, model_dir: Path | None) -> None:
        if eval_hook is None or not main:
            return
        metrics = eval_hook(step, model_dir) or {}
        record = {f"eval/{k}": float(v) for k, v in metrics.items()}
        if record:
            run_log.log(step, record)
            result.eval_history.append({"step": step, **record})

    def checkpoint(step: int, final: bool) -> Path:
        """Rank 0 writes; every rank waits until the checkpoint is complete (and, with FSDP, first sends
        its shards to rank 0)."""
        target = checkpoint_dir_for(config, step, final)
        full_state = gather_full_state(model, optimizer) if sharded else None  # every rank gathers
        if main:
            target = save_checkpoint(
                unwrap_model(model), tokenizer, optimizer, config, step, final=final,
                extra={**api_info, "wandb_run_id": run_log.run_id, "trained_batches": list(pending_acks)},
                full_state=full_state,
            )  # fmt: skip
        del full_state
        barrier(ctx)
        return target

    def next_batch() -> tuple[int | None, list[dict[str, Any]] | None, Any]:
        """Rank 0: (batch_id, stale groups, prepared batch), or Nones to stop; acks batches with no fresh
        groups itself. Counts the groups dropped as stale and records the trained groups' staleness."""
        while not should_stop():
            progress.set_postfix_str("waiting for a batch", refresh=True)
            batch_id, groups = client.wait_for_batch(
                poll_interval=BATCH_POLL_S, should_stop=should_stop, on_wait=channel.heartbeat
            )
            if groups is None:
                break
            fresh, stale = split_stale_groups(groups, step, config.max_staleness)
            dropped["groups"] += len(stale)
            dropped["sequences"] += sum(len(g["tokens"]) for g in stale)
            if stale:
                logger.warning("dropped %d group(s) older than %d steps", len(stale), config.max_staleness)
            if not fresh:
                if batch_id is not None:
                    client.ack(batch_id)
                continue
            inference.check()
            staleness.clear()
            staleness.update(staleness_histogram(fresh, step))
            return batch_id, stale, prepare_batch(fresh, config.batch_size, shaping=config.score_shaping)
        return None, None, None

    from tqdm.auto import tqdm

    dropped = {"groups": 0, "sequences": 0}  #: stale groups (and their sequences) dropped so far
    staleness: dict[int, int] = {}  #: the trained batch's groups per staleness (steps)
    pending_acks: list[int] = []
    last_saved = start_step if resume_dir is not None else -1
    step = start_step
    progress = tqdm(
        total=config.training_steps, initial=start_step, desc="grpo", unit="step", dynamic_ncols=True,
        disable=not main,
    )  # fmt: skip
    stop_sent = False
    try:
        # --- inference server start ---------------------------------------------------------------
        initial_model = str(resume_dir) if (resume_dir is not None and not lora) else config.model_name
        initial_adapter = None
        if config.weight_bridge_mode == "lora_restart" and config.use_vllm:  # the same on every rank
            initial_adapter = resume_dir or checkpoint(0, final=False)
        if not shared:  # shared_vllm's server started before the model could be attached
            inference.start(initial_model, initial_adapter)
        if start_step == 0:
            run_eval(0, None)

        while step < config.training_steps:
            batch_id: int | None = None
            stale: list[Any] = []
            if main:
                try:
                    batch_id, stale, prepared = next_batch()
                except BaseException:
                    channel.send_stop()
                    stop_sent = True
                    raise
                if prepared is None:
                    channel.send_stop()
                    stop_sent = True
                    break
                prepared = channel.send_batch(prepared)
            else:
                prepared = channel.receive()
                if prepared is None:
                    break
            metrics = run_training_step(model, optimizer, prepared, config, step, ref_model, dist=ctx)
            if shared and config.device.startswith("cuda"):
                torch.cuda.synchronize()  # the server's next forward pass reads the finished update
            step += 1
            if batch_id is not None:
                pending_acks.append(batch_id)

            final = step == config.training_steps
            refresh_due = (
                config.use_vllm and not shared and (step % config.vllm_restart_interval == 0 or final)
            )
            broadcast = refresh_due and not lora and config.refresh_mode == "broadcast"
            ckpt_due = (
                final
                or (refresh_due and not broadcast)
                or (config.checkpoint_interval > 0 and step % config.checkpoint_interval == 0)
            )
            saved: Path | None = None
            if ckpt_due:
                saved = checkpoint(step, final)
                last_saved = step
            if main and (ckpt_due or config.checkpoint_interval == 0):
                for bid in pending_acks:
                    client.ack(bid)
                pending_acks.clear()

            record = {f"train/{k}": v for k, v in metrics.items()}
            record.update({"train/stale_groups": float(len(stale)), "train/batch_id": batch_id})
            if main:
                record.update(staleness_record(staleness, dropped))
            if broadcast and inference.active:
                record["train/refresh_s"] = inference.broadcast(unwrap_model(model))
            elif refresh_due and saved is not None and inference.active:
                record["train/refresh_s"] = inference.refresh(saved, step)
            synced = refresh_due or (shared and (step % config.vllm_restart_interval == 0 or final))
            if (final or sync_hook is not None) and broadcast and inference.active:
                inference.wait_for_refresh()  # the servers serve the weights the hook and the end expect
            if sync_hook is not None and inference.active and synced:
                checks = sync_hook(step, unwrap_model(model), inference.server_root_urls) or {}
                record.update({f"sync/{k}": float(v) for k, v in checks.items()})
            run_log.log(step, record)
            if main:
                result.history.append({"step": step, **record})
            progress.update(1)
            progress.set_postfix(
                loss=f"{metrics['loss']:.4f}",
                reward=f"{metrics['kept_reward_mean']:.3f}",
                tok_s=f"{metrics['tokens_per_s']:.0f}",
            )
            if saved is not None and (refresh_due or final):
                run_eval(step, saved)
            if final:
                result.final_checkpoint = saved
    finally:
        progress.close()
        result.step = step
        result.stopped_early = step < config.training_steps
        try:
            if main and ctx.enabled and not stop_sent and step < config.training_steps:
                channel.send_stop()  # a failure on rank 0 after a step: release the other ranks
            if step > last_saved and step > start_step:
                # Interrupted (or failed) after completed steps: keep them.
                result.final_checkpoint = checkpoint(step, final=False)
                for bid in pending_acks:
                    client.ack(bid)
        finally:
            if shared:  # let go of the server's memory (IPC handles, mappings) before the server exits
                model = optimizer = None
                gc.collect()
            inference.stop()
            run_log.finish()
            if main:
                result.plot_path = plot_training_curves(
                    Path(config.save_path) / "metrics.jsonl", config.resolved_plot_path, max_step=step
                )
    return result


def staleness_record(histogram: Mapping[int, int], dropped: Mapping[str, int]) -> dict[str, float]:
    """The metrics of one step's staleness: ``train/staleness/<k>`` groups trained ``k`` steps after they
    were generated, their mean and maximum, and the stale groups/sequences dropped since the start."""
    record = {f"train/staleness/{k}": float(n) for k, n in histogram.items()}
    total = sum(histogram.values())
    if total:
        record["train/staleness_mean"] = sum(k * n for k, n in histogram.items()) / total
        record["train/staleness_max"] = float(max(histogram))
    record["train/stale_groups_total"] = float(dropped["groups"])
    record["train/stale_sequences_total"] = float(dropped["sequences"])
    return record


def _require_mode(config: TrainingConfig, modes: tuple[str, ...], fn: str) -> None:
    if config.weight_bridge_mode not in modes:
        raise ValueError(f"{fn} needs weight_bridge_mode in {modes}, got {config.weight_bridge_mode!r}")


def train_legacy(config: TrainingConfig, eval_hook: EvalHook | None = None, **kwargs: Any) -> TrainingResult:
    """Mode ``none``: full-model training; vLLM restarted (or reloaded) on each new checkpoint."""
    _require_mode(config, ("none",), "train_legacy")
    return train(config, eval_hook, **kwargs)


def train_lora(config: TrainingConfig, eval_hook: EvalHook | None = None, **kwargs: Any) -> TrainingResult:
    """Mode ``lora_only``: LoRA adapters hot-swapped into a running vLLM (``--enable-lora``)."""
    _require_mode(config, ("lora_only",), "train_lora")
    return train(config, eval_hook, **kwargs)


def train_lora_restart(
    config: TrainingConfig, eval_hook: EvalHook | None = None, **kwargs: Any
) -> TrainingResult:
    """Mode ``lora_restart``: LoRA adapters; vLLM restarted with each new adapter."""
    _require_mode(config, ("lora_restart",), "train_lora_restart")
    return train(config, eval_hook, **kwargs)


def train_shared_vllm(
    config: TrainingConfig, eval_hook: EvalHook | None = None, **kwargs: Any
) -> TrainingResult:
    """Mode ``shared_vllm``: the trainer trains the local inference server's own weights in place (one copy;
    generation sees every optimizer step without a refresh)."""
    _require_mode(config, ("shared_vllm",), "train_shared_vllm")
    return train(config, eval_hook, **kwargs)


def checkpoint_dir_for(config: TrainingConfig, step: int, final: bool = False) -> Path:
    """Where :func:`train` writes the checkpoint of ``step``."""
    return Path(config.save_path) / checkpoint_name(step, config.is_lora, final)


__all__ = [
    "EvalHook",
    "SyncHook",
    "InferenceSync",
    "TrainingResult",
    "checkpoint_dir_for",
    "train",
    "train_legacy",
    "train_lora",
    "train_lora_restart",
    "train_shared_vllm",
]
