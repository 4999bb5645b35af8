"""The training loop, shared by every weight-bridge mode: :class:`TrainingRun`.

Per optimizer step (:meth:`TrainingRun.run`): fetch the next API batch (groups older than
``--max-staleness`` dropped, the rest padded and micro-batched), train one GRPO step, save a checkpoint
when due, acknowledge the batches a checkpoint holds, refresh the inference servers' weights every
``--refresh-interval`` steps, log, evaluate after a refresh. Modes differ only in what reaches vLLM:

========================  ===============================================================================
``none`` (legacy)         full checkpoints ``step_N``; vLLM restarted on (or, ``--refresh-mode reload``,
                          reloaded in place from) the new checkpoint every ``--refresh-interval`` steps;
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
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from example_trainer.grpo.api_client import AtroposClient
from example_trainer.grpo.checkpointing import (
    checkpoint_name,
    gather_full_state,
    load_training_state,
    resolve_resume_path,
    save_checkpoint,
)
from example_trainer.grpo.config import TrainingConfig
from example_trainer.grpo.data import PreparedBatch, prepare_batch, split_stale_groups, staleness_histogram
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
from example_trainer.grpo.inference_sync import InferenceSync
from example_trainer.grpo.model import load_reference_model, trainable_parameters
from example_trainer.grpo.reporting import RunLogger, plot_training_curves
from example_trainer.grpo.startup import (
    NoLogger,
    attach_shared_policy,
    load_policy,
    reconcile_with_api,
    seed_everything,
)
from example_trainer.grpo.step import create_optimizer, run_training_step

logger = logging.getLogger(__name__)

#: ``eval_hook(step, model_dir)`` → metrics such as ``{"accuracy": 0.4}``, logged as ``eval/<name>``.
#: Called before the first step of a fresh run (``model_dir`` None: the initial model), after every
#: inference refresh (vLLM then serves the weights of ``model_dir``) and after the final step;
#: ``accuracy`` is drawn in the end-of-run plot.
EvalHook = Callable[[int, Path | None], Mapping[str, float] | None]

#: ``sync_hook(step, model, server_root_urls)`` → metrics, logged as ``sync/<name>``: called on rank 0 each
#: time the inference servers were brought up to date (after every refresh; in ``shared_vllm`` every
#: ``--refresh-interval`` steps, the servers then serving the trained tensors themselves), with the
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


@dataclass
class RunState:
    """What changes from step to step."""

    step: int  #: optimizer steps completed
    pending_acks: list[int] = field(default_factory=list)  #: trained batches not yet acknowledged
    last_saved: int = -1  #: the step of the newest checkpoint on disk (-1: none of this run)
    dropped_groups: int = 0  #: groups dropped as stale so far
    dropped_sequences: int = 0  #: their sequences
    staleness: dict[int, int] = field(default_factory=dict)  #: the latest batch's groups per staleness
    stop_sent: bool = False  #: rank 0 told the other ranks to stop


@dataclass
class StepBatch:
    """One step's batch: the API's id (rank 0 only), the stale groups dropped from it, the prepared batch."""

    batch_id: int | None
    stale_groups: int
    prepared: PreparedBatch


@dataclass(frozen=True)
class DueAfterStep:
    """What is due once optimizer step ``step`` is done."""

    step: int
    final: bool  #: the last step of the run
    refresh: bool  #: bring the inference servers up to date (restart, reload, hot-swap or broadcast)
    broadcast: bool  #: ... by sending the weights, without a checkpoint
    checkpoint: bool  #: write a checkpoint
    synced: bool  #: the servers serve this step's weights afterwards (the sync hook runs)


class TrainingRun:
    """One training run, as explicit state and named phases.

    :meth:`run` reads top to bottom: :meth:`setup`, :meth:`start_inference`, then per step
    :meth:`next_batch`, :meth:`train_step`, :meth:`log_step`, :meth:`due_after`, :meth:`checkpoint`,
    :meth:`acknowledge`, :meth:`refresh_weights` (its timings through :meth:`log_refresh`), :meth:`evaluate`;
    :meth:`finish` at the end, however the run ends. A step's record is written before the checkpoint that
    holds the step, so a crash never leaves a trained, checkpointed step without its record. Rank 0 alone talks
    to the API, refreshes the servers, writes checkpoints and metrics.
    """

    def __init__(
        self,
        config: TrainingConfig,
        ctx: DistContext,
        eval_hook: EvalHook | None = None,
        should_stop: Callable[[], bool] | None = None,
        sync_hook: SyncHook | None = None,
    ) -> None:
        self.config = config
        self.ctx = ctx
        self.eval_hook = eval_hook
        self.should_stop = should_stop or (lambda: False)
        self.sync_hook = sync_hook
        self.main = ctx.is_main
        self.shared = config.weight_bridge_mode == "shared_vllm"
        self.sharded = ctx.enabled and config.distributed_strategy == "fsdp"
        self.inference = InferenceSync(config)
        self.inference.active = self.inference.active and self.main
        # set by setup(): the API client (rank 0), the policy and its optimizer, the frozen reference
        # (KL term), the channel that carries batches to the other ranks
        self.client: AtroposClient | None = None
        self.model: Any = None
        self.tokenizer: Any = None
        self.optimizer: Any = None
        self.ref_model: Any = None
        self.channel: Any = None
        self.resume_dir: Path | None = None
        self.api_info: dict[str, Any] = {}
        self.run_log: Any = NoLogger()
        self.progress: Any = None
        self.state = RunState(step=0)
        self.result = TrainingResult(
            step=0, start_step=0, final_checkpoint=None, plot_path=None, rank=ctx.rank
        )

    # --- the run, top to bottom -------------------------------------------------------------------
    def run(self) -> TrainingResult:
        """Train until ``training_steps`` are done, the API runs dry or ``should_stop()``; see :func:`train`."""
        self.setup()
        if self.state.step >= self.config.training_steps:
            return self.nothing_to_train()
        try:
            self.start_inference()
            while self.state.step < self.config.training_steps:
                batch = self.next_batch()
                if batch is None:
                    break
                metrics = self.train_step(batch)
                self.log_step(batch, metrics)
                due = self.due_after(self.state.step)
                saved = self.checkpoint(self.state.step, due.final) if due.checkpoint else None
                self.acknowledge(due)
                self.log_refresh(self.refresh_weights(due, saved))
                self.evaluate(due, saved)
        finally:
            self.finish()
        return self.result

    # --- phases -------------------------------------------------------------------------------------
    def setup(self) -> None:
        """Reach the API, load (or attach) the policy, its optimizer and a checkpoint to resume from,
        register, and open the metrics log. The model load comes after the API check: fail fast."""
        config, ctx = self.config, self.ctx
        if self.main:
            self.client = AtroposClient.from_config(config)
            self.client.should_stop = self.should_stop  # no long retries once stopping (the API may go first)
            self.resume_dir = resolve_resume_path(config.resume, config.save_path)
            self.client.wait_until_ready(config.api_timeout)
        self.resume_dir = broadcast_object(ctx, self.resume_dir)  # every rank loads what rank 0 found
        seed_everything(config.seed)
        if self.shared:
            if ctx.enabled or not config.use_vllm:
                raise ValueError(
                    "shared_vllm trains the local server's weights: one trainer process, with --use-vllm"
                )
            model, self.tokenizer = attach_shared_policy(config, self.inference, self.resume_dir)
        else:
            model, self.tokenizer = load_policy(config, self.resume_dir, self.sharded)
        # FSDP replaces the parameters with sharded ones: the optimizer is built over those
        self.model = wrap_model(model, ctx, config.distributed_strategy)
        self.optimizer = create_optimizer(trainable_parameters(unwrap_model(self.model)), config)
        if config.weight_broadcast_async:  # the weights are sent from the parameters themselves
            self.optimizer.register_step_pre_hook(lambda *_: self.inference.wait_until_sent())
        start_step, extra = 0, {}
        if self.resume_dir is not None:
            loaded = load_training_state(self.resume_dir, self.optimizer, unwrap_model(self.model))
            start_step, extra = loaded.step, loaded.extra
            logger.info("loaded checkpoint %s (step %d)", self.resume_dir, start_step)
        use_ref = config.kl_coef > 0 and not config.is_lora
        self.ref_model = load_reference_model(config) if use_ref else None
        self.channel = BatchChannel(ctx)
        if self.main:
            self.client.register(config, starting_step=start_step)
            resumed = self.resume_dir is not None
            self.api_info = reconcile_with_api(self.client, start_step, resumed, extra.get("trained_batches"))
            self.run_log = RunLogger(config, resume_run_id=extra.get("wandb_run_id"))
        self.state = RunState(step=start_step, last_saved=start_step if self.resume_dir is not None else -1)
        self.result.step = self.result.start_step = start_step

    def nothing_to_train(self) -> TrainingResult:
        """The checkpoint resumed from already has every step."""
        logger.info("checkpoint %s already has %d steps: nothing to train", self.resume_dir, self.state.step)
        self.result.final_checkpoint = self.resume_dir
        self.run_log.finish()
        self.inference.stop()
        return self.result

    def start_inference(self) -> None:
        """Start (or find) the inference server on the initial weights, and evaluate them on a fresh run."""
        from tqdm.auto import tqdm

        config, resume_dir = self.config, self.resume_dir
        self.progress = tqdm(
            total=config.training_steps, initial=self.state.step, desc="grpo", unit="step", dynamic_ncols=True,
            disable=not self.main,
        )  # fmt: skip
        initial_model = (
            str(resume_dir) if (resume_dir is not None and not config.is_lora) else config.model_name
        )
        initial_adapter = None
        if config.weight_bridge_mode == "lora_restart" and config.use_vllm:  # the same on every rank
            initial_adapter = resume_dir or self.checkpoint(0, final=False)
        if not self.shared:  # shared_vllm's server started before the model could be attached
            self.inference.start(initial_model, initial_adapter)
        if self.state.step == 0:
            self.evaluate_at(0, None)

    def next_batch(self) -> StepBatch | None:
        """The next batch to train, or None to stop. Rank 0 fetches it and sends it to the other ranks."""
        if not self.main:
            prepared = self.channel.receive()
            return None if prepared is None else StepBatch(None, 0, prepared)
        try:
            batch = self._fetch_fresh_batch()
        except BaseException:
            self._release_ranks()
            raise
        if batch is None:
            self._release_ranks()
            return None
        batch.prepared = self.channel.send_batch(batch.prepared)
        return batch

    def train_step(self, batch: StepBatch) -> dict[str, float]:
        """One optimizer step on ``batch``; the step counter advances and the batch awaits its ack."""
        config = self.config
        metrics = run_training_step(
            self.model, self.optimizer, batch.prepared, config, self.state.step, self.ref_model, dist=self.ctx
        )
        if self.shared and config.device.startswith("cuda"):
            torch.cuda.synchronize()  # the server's next forward pass reads the finished update
        self.state.step += 1
        if batch.batch_id is not None:
            self.state.pending_acks.append(batch.batch_id)
        return metrics

    def due_after(self, step: int) -> DueAfterStep:
        """The schedule: the servers are refreshed every ``refresh_interval`` steps and after the last; a
        checkpoint is written for each refresh that reads one, every ``checkpoint_interval`` steps and
        after the last."""
        config = self.config
        final = step == config.training_steps
        on_interval = step % config.refresh_interval == 0 or final
        refresh = config.use_vllm and not self.shared and on_interval
        broadcast = refresh and not config.is_lora and config.refresh_mode == "broadcast"
        on_checkpoint_interval = config.checkpoint_interval > 0 and step % config.checkpoint_interval == 0
        return DueAfterStep(
            step=step,
            final=final,
            refresh=refresh,
            broadcast=broadcast,
            checkpoint=final or (refresh and not broadcast) or on_checkpoint_interval,
            synced=refresh or (self.shared and on_interval),
        )

    def checkpoint(self, step: int, final: bool) -> Path:
        """Write the checkpoint of ``step``: rank 0 writes; every rank waits until it is complete (with
        FSDP every rank first sends its shards to rank 0). It lists the batches it acknowledges."""
        config = self.config
        target = checkpoint_dir_for(config, step, final)
        full_state = gather_full_state(self.model, self.optimizer) if self.sharded else None  # every rank
        if self.main:
            extra = {
                **self.api_info, "wandb_run_id": self.run_log.run_id,
                "trained_batches": list(self.state.pending_acks),
            }  # fmt: skip
            target = save_checkpoint(
                unwrap_model(self.model), self.tokenizer, self.optimizer, config, step, final=final,
                extra=extra, full_state=full_state,
            )  # fmt: skip
        del full_state
        barrier(self.ctx)
        self.state.last_saved = step
        if final:
            self.result.final_checkpoint = target
        return target

    def acknowledge(self, due: DueAfterStep) -> None:
        """Acknowledge the trained batches once a checkpoint holds them (at once with checkpoint_interval 0:
        nothing would be replayed anyway)."""
        if self.main and (due.checkpoint or self.config.checkpoint_interval == 0):
            self._ack_pending()

    def refresh_weights(self, due: DueAfterStep, saved: Path | None) -> dict[str, float]:
        """Bring the inference servers up to date when due (broadcast, or from the checkpoint just saved),
        then run the sync hook; returns ``train/refresh_s`` and the hook's ``sync/*`` metrics."""
        inference, record = self.inference, {}
        if not inference.active:
            return record
        if due.broadcast:
            record["train/refresh_s"] = inference.broadcast(unwrap_model(self.model))
        elif due.refresh and saved is not None:
            record["train/refresh_s"] = inference.refresh(saved, due.step)
        if due.broadcast and (due.final or self.sync_hook is not None):
            inference.wait_for_refresh()  # the servers serve the weights the hook and the end expect
        if self.sync_hook is not None and due.synced:
            checks = self.sync_hook(due.step, unwrap_model(self.model), inference.server_root_urls) or {}
            record.update({f"sync/{k}": float(v) for k, v in checks.items()})
        return record

    def log_refresh(self, record: Mapping[str, float]) -> None:
        """The refresh's timings and sync checks, added to the current step's record (``metrics.jsonl``
        readers merge the records of one step)."""
        if not record:
            return
        self.run_log.log(self.state.step, dict(record))
        if self.main and self.result.history:
            self.result.history[-1].update(record)

    def log_step(self, batch: StepBatch, metrics: Mapping[str, float]) -> None:
        """The step's metrics to ``metrics.jsonl``/wandb, the result's history and the progress bar."""
        record: dict[str, Any] = {f"train/{k}": v for k, v in metrics.items()}
        record.update({"train/stale_groups": float(batch.stale_groups), "train/batch_id": batch.batch_id})
        if self.main:
            record.update(staleness_record(self.state.staleness, self._dropped()))
        step = self.state.step
        self.run_log.log(step, record)
        if self.main:
            self.result.history.append({"step": step, **record})
        self.progress.update(1)
        self.progress.set_postfix(
            loss=f"{metrics['loss']:.4f}",
            reward=f"{metrics['kept_reward_mean']:.3f}",
            tok_s=f"{metrics['tokens_per_s']:.0f}",
        )

    def evaluate(self, due: DueAfterStep, saved: Path | None) -> None:
        """Run the eval hook on the weights the servers now serve (after a refresh or the last step)."""
        if saved is not None and (due.refresh or due.final):
            self.evaluate_at(due.step, saved)

    def finish(self) -> None:
        """However the run ends: release the other ranks, keep completed steps in a checkpoint (and ack
        them), stop the servers, close the logs and draw the curves."""
        config, state = self.config, self.state
        if self.progress is not None:
            self.progress.close()
        self.result.step = state.step
        self.result.stopped_early = state.step < config.training_steps
        try:
            if self.ctx.enabled and self.result.stopped_early:
                self._release_ranks()  # a failure on rank 0 after a step: release the other ranks
            if state.step > state.last_saved and state.step > self.result.start_step:
                # Interrupted (or failed) after completed steps: keep them.
                self.result.final_checkpoint = self.checkpoint(state.step, final=False)
                self._ack_pending()
        finally:
            if self.shared:  # let go of the server's memory (IPC handles, mappings) before the server exits
                self.model = self.optimizer = None
                gc.collect()
            self.inference.stop()
            self.run_log.finish()
            if self.main:
                self.result.plot_path = plot_training_curves(
                    Path(config.save_path) / "metrics.jsonl", config.resolved_plot_path, max_step=state.step
                )

    # --- helpers of the phases ------------------------------------------------------------------
    def evaluate_at(self, step: int, model_dir: Path | None) -> None:
        if self.eval_hook is None or not self.main:
            return
        metrics = self.eval_hook(step, model_dir) or {}
        record = {f"eval/{k}": float(v) for k, v in metrics.items()}
        if record:
            self.run_log.log(step, record)
            self.result.eval_history.append({"step": step, **record})

    def _fetch_fresh_batch(self) -> StepBatch | None:
        """Rank 0: the next API batch with its stale groups dropped, prepared; None to stop. A batch with
        no fresh group is acknowledged at once and skipped."""
        config, state, client = self.config, self.state, self.client
        while not self.should_stop():
            self.progress.set_postfix_str("waiting for a batch", refresh=True)
            batch_id, groups = client.wait_for_batch(
                poll_interval=BATCH_POLL_S, should_stop=self.should_stop, on_wait=self.channel.heartbeat
            )
            if groups is None:
                return None
            fresh, stale = split_stale_groups(groups, state.step, config.max_staleness)
            state.dropped_groups += len(stale)
            state.dropped_sequences += sum(len(g["tokens"]) for g in stale)
            if stale:
                logger.warning("dropped %d group(s) older than %d steps", len(stale), config.max_staleness)
            if not fresh:
                if batch_id is not None:
                    client.ack(batch_id)
                continue
            self.inference.check()
            state.staleness = staleness_histogram(fresh, state.step)
            prepared = prepare_batch(fresh, config.micro_batch_size, shaping=config.score_shaping)
            return StepBatch(batch_id, len(stale), prepared)
        return None

    def _release_ranks(self) -> None:
        """Rank 0: tell the other ranks to stop (once)."""
        if self.main and not self.state.stop_sent:
            self.channel.send_stop()
            self.state.stop_sent = True

    def _ack_pending(self) -> None:
        if self.client is not None:
            for batch_id in self.state.pending_acks:
                self.client.ack(batch_id)
        self.state.pending_acks.clear()

    def _dropped(self) -> dict[str, int]:
        return {"groups": self.state.dropped_groups, "sequences": self.state.dropped_sequences}


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
        run = TrainingRun(
            config.model_copy(update={"device": ctx.device}), ctx, eval_hook, should_stop, sync_hook
        )
        return run.run()
    finally:
        shutdown_distributed(ctx)


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


def checkpoint_dir_for(config: TrainingConfig, step: int, final: bool = False) -> Path:
    """Where :func:`train` writes the checkpoint of ``step``."""
    return Path(config.save_path) / checkpoint_name(step, config.is_lora, final)


__all__ = [
    "EvalHook",
    "SyncHook",
    "InferenceSync",
    "TrainingResult",
    "TrainingRun",
    "checkpoint_dir_for",
    "train",
]
