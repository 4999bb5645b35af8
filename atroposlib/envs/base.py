"""``BaseEnv``: the class every environment subclasses, and the names environments import from here.

An environment implements ``setup``, ``get_next_item``, ``evaluate`` and either ``collect_trajectories`` (a whole
group) or ``collect_trajectory`` (one rollout), and ends its file with ``MyEnv.cli()``. ``BaseEnv`` holds the
configuration, the inference servers (``self.server``), the tokenizer, the hooks, checkpointing and the
command-line classmethods. Running it is the job of a runner that holds the env:

* :class:`~atroposlib.envs.serve.runtime.EnvRunner` (``self.runner``, built by ``__init__``) - ``serve``: the
  scheduling loop and its workers, the API session, sending groups, wandb, the JSONL file, signals;
* :class:`~atroposlib.envs.cli.process.ProcessRunner` / :class:`~atroposlib.envs.cli.process.EvaluateRunner` -
  the offline ``process`` and ``evaluate`` modes, sharing the env runner's sender and wandb reporter.

The runners call the env only through its hooks, so overriding one (``handle_send_to_api``, ``wandb_log``,
``add_train_workers`` ...) changes what runs. compat: the runtime attributes environments read and write
(``curr_step``, ``status_dict``, ``workers``, ``rollouts_for_wandb`` ...) are properties of ``BaseEnv`` that
read and write the runner's state, and the runtime methods of atroposlib 0.4.0 are thin methods delegating to
the runner.

compat: the names atroposlib 0.4.0 exported from ``atroposlib.envs.base`` (``BaseEnvConfig``,
``ScoredDataGroup``, ``APIServerConfig``, ``ServerBaseline``, ``EvalHandlingEnum`` ...) are importable from here.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
import time
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Generic, Optional, TypeVar, Union

from atroposlib.envs.cli.process import EvaluateRunner, ProcessRunner
from atroposlib.envs.constants import ENV_NAMESPACE, NAMESPACE_SEP, OPENAI_NAMESPACE
from atroposlib.envs.env_config import BaseEnvConfig, resolve_tokenizer_name
from atroposlib.envs.group_assembly import assemble_group
from atroposlib.envs.groups import EvalHandlingEnum, ScoredDataGroup, ScoredDataItem
from atroposlib.envs.serve.api_client import SendOutcome, TrajectoryApiClient
from atroposlib.envs.serve.group_validation import GroupProblem
from atroposlib.envs.serve.jsonl_sink import first_free_path
from atroposlib.envs.serve.runtime import EnvRunner
from atroposlib.envs.serve.scheduling import derived_batch_size as _derived_batch_size
from atroposlib.envs.serve.sending import describe_item
from atroposlib.envs.server_handling.openai_server import resolve_openai_configs
from atroposlib.envs.server_handling.server_baseline import (
    APIServer,
    APIServerConfig,
    ReasoningConfig,
    ServerBaseline,
)
from atroposlib.envs.server_handling.server_harness import ServerHarness
from atroposlib.envs.server_handling.server_manager import ServerManager, ServerManagerConfig
from atroposlib.envs.tokenizer_compat import ensure_token_list_chat_template
from atroposlib.type_definitions import UUID, Item, Message
from atroposlib.utils.hf_tokenizers import load_hf_tokenizer

logger = logging.getLogger(__name__)

ServerConfigs = Union[ServerBaseline, APIServerConfig, list]


def load_tokenizer(name: str) -> Any:
    """The tokenizer ``name`` (a hub name or a local directory) whose ``apply_chat_template`` returns token-id
    lists as under transformers 4.x (see :mod:`atroposlib.envs.tokenizer_compat`).

    Raises :class:`~atroposlib.utils.hf_tokenizers.TokenizerLoadError` (one line; at once when the hub is
    unreachable and the tokenizer is not cached), see :func:`~atroposlib.utils.hf_tokenizers.load_hf_tokenizer`.
    """
    return ensure_token_list_chat_template(load_hf_tokenizer(name, flag="--env.tokenizer_name"))


def _jsonable(value: Any) -> Any:
    """A JSON-encodable form of ``value`` (arrays and tensors as lists, models as dicts, else ``str``)."""
    for attr in ("tolist", "model_dump", "item"):
        fn = getattr(value, attr, None)
        if callable(fn):
            return fn()
    return str(value)


T = TypeVar("T")


class RunnerState(Generic[T]):
    """A ``BaseEnv`` attribute that lives on the env's runner: ``env.<name>`` reads and writes
    ``env.runner.<part>.<attr>`` (``part`` None: the runner itself; ``attr`` defaults to the name)."""

    def __init__(self, part: Optional[str] = None, attr: Optional[str] = None) -> None:
        self.part = part
        self.attr = attr or ""

    def __set_name__(self, owner: type, name: str) -> None:
        self.name = name
        self.attr = self.attr or name

    def _holder(self, env: Any) -> Any:
        try:
            runner = env.__dict__["runner"]
        except KeyError:
            raise AttributeError(f"{self.name} is available once BaseEnv.__init__ has run") from None
        return runner if self.part is None else getattr(runner, self.part)

    def __get__(self, env: Any, owner: Optional[type] = None) -> T:
        if env is None:  # looked up on the class: the descriptor itself
            return self  # type: ignore[return-value]
        return getattr(self._holder(env), self.attr)

    def __set__(self, env: Any, value: T) -> None:
        setattr(self._holder(env), self.attr, value)


class BaseEnv(ABC):
    """Base class of environments.

    Class attributes: ``name`` (default run/output name), ``env_config_cls`` (config class used by the default
    ``config_init``), ``server_cls`` (inference client class; the abstract ``APIServer`` means "choose from
    ``server_type``"), ``loads_tokenizer`` (default True), ``single_sample_scoring`` (default False).
    """

    name: Optional[str] = None
    env_config_cls: type[BaseEnvConfig] = BaseEnvConfig
    server_cls: type[APIServer] = APIServer
    #: whether the env loads ``config.tokenizer_name`` into ``self.tokenizer`` (False: it builds no token-level
    #: groups, e.g. evaluation-only environments talking to any OpenAI-compatible server; ``self.tokenizer``
    #: is then None)
    loads_tokenizer: bool = True
    #: whether one rollout per item carries a training signal on its own (e.g. SFT rows, or rewards already
    #: centred by the environment); when False, ``serve`` and ``process`` refuse ``group_size`` < 2
    single_sample_scoring: bool = False

    def __init__(
        self,
        config: BaseEnvConfig,
        server_configs: ServerConfigs,
        slurm: bool = False,
        testing: bool = False,
    ):
        """Build the env: reasoning settings, the ``ServerManager``, the tokenizer and its :class:`EnvRunner`.

        ``server_configs`` may be a ``ServerBaseline`` (servers discovered on localhost/SLURM), a list of
        ``APIServerConfig`` or a single ``APIServerConfig`` (used as given, as a one-element list).
        ``config.wandb_name`` defaults to ``name`` (or the class name) when unset, and ``config.tokenizer_name``
        to the first server's ``model_name`` (see :func:`~atroposlib.envs.env_config.resolve_tokenizer_name`).
        When ``config.data_path_to_save_groups`` names an existing file, the first free ``<stem>_<k>`` path is
        used instead (and written back into the config).
        """
        self.config = config
        if not config.wandb_name:
            config.wandb_name = self.name or type(self).__name__
        self.reasoning_config = ReasoningConfig(
            enabled=config.thinking_mode,
            effort=config.reasoning_effort,
            max_tokens=config.max_reasoning_tokens,
        )
        if isinstance(server_configs, APIServerConfig):
            server_configs = [server_configs]
        self.server = ServerManager(
            server_configs,
            slurm=slurm,
            testing=testing,
            server_class=self.server_cls,
            reasoning_config=self.reasoning_config,
        )
        config.tokenizer_name = resolve_tokenizer_name(config.tokenizer_name, server_configs)
        self.tokenizer = load_tokenizer(config.tokenizer_name) if self.loads_tokenizer else None
        if testing:
            # The in-process fake backend answers in this tokenizer's ids, so replies decode to text.
            for server in getattr(self.server, "servers", None) or []:
                if isinstance(server, ServerHarness) and server.tokenizer is None:
                    server.tokenizer = self.tokenizer
        #: set by the command line in ``process`` mode (with ``n_groups_to_process``/``group_size_to_process``)
        self.process_mode = False
        if config.data_path_to_save_groups:
            path = first_free_path(config.data_path_to_save_groups)
            if str(path) != str(config.data_path_to_save_groups):
                logger.info("%s exists; writing groups to %s", config.data_path_to_save_groups, path)
                config.data_path_to_save_groups = str(path)
        self.runner = EnvRunner(self)

    # ------------------------------------------------------------------------------------------------------
    # Configuration
    # ------------------------------------------------------------------------------------------------------
    @classmethod
    def config_init(cls) -> tuple[BaseEnvConfig, ServerConfigs]:
        """Default configuration: ``(env config, server configs)``. Override to set your defaults."""
        return cls.env_config_cls(), ServerBaseline()

    @property
    def derived_batch_size(self) -> int:
        """Sequences of each trainer batch this env can expect to fill (see ``scheduling.derived_batch_size``)."""
        return _derived_batch_size(self.config.batch_size, self.status_dict, self.config.min_batch_allocation)

    # ------------------------------------------------------------------------------------------------------
    # Hooks
    # ------------------------------------------------------------------------------------------------------
    async def setup(self) -> None:
        """Load datasets and prepare state; called once before any other hook."""
        raise NotImplementedError("Environments must implement setup()")

    @abstractmethod
    async def get_next_item(self) -> Item:
        """The next item to roll out, or ``None`` when there is none right now."""

    async def collect_trajectory(self, item: Item) -> tuple[Optional[ScoredDataItem], list[Item]]:
        """One scored rollout of ``item`` plus backlog items (used by the default ``collect_trajectories``)."""
        raise NotImplementedError(
            "Implement collect_trajectories (a whole group) or collect_trajectory (one rollout)"
        )

    async def collect_trajectories(
        self, item: Item
    ) -> tuple[Union[Optional[ScoredDataGroup], list[Optional[ScoredDataGroup]]], list[Item]]:
        """Default: run ``collect_trajectory(item)`` ``group_size`` times concurrently and assemble the group.

        Rollouts returned as ``None`` are skipped; optional fields no rollout supplied are ``None``;
        ``inference_logprobs`` and ``distill_*`` are kept; backlog lists are concatenated. Returns
        ``(None, backlog)`` when no rollout was usable.
        """
        results = await asyncio.gather(
            *(self.collect_trajectory(item) for _ in range(self.config.group_size))
        )
        rollouts: list[Any] = []
        backlog: list[Item] = []
        for result in results:
            if isinstance(result, tuple) and len(result) == 2:
                rollout, extra = result
            else:
                rollout, extra = result, None
            rollouts.append(rollout)
            if extra:
                backlog.extend(extra)
        group, notes = assemble_group(rollouts)
        for note in notes:
            logger.warning("[%s] item %s: %s", self.env_label, describe_item(item), note)
        return group, backlog

    async def postprocess_histories(self, trajectories: Any) -> Any:
        """Last chance to change groups before they are checked and sent (default: unchanged)."""
        return trajectories

    @abstractmethod
    async def evaluate(self, *args: Any, **kwargs: Any) -> None:
        """Run an evaluation (periodically during ``serve``, once in ``evaluate`` mode)."""

    async def cleanup(self) -> None:  # noqa: B027 - an optional hook, empty by default
        """Called after every item a worker handled."""

    async def _close_inference_clients(self) -> None:
        """Close ``self.server``'s connections (when it can close); the runners call it when a run ends.
        Environments with more clients (e.g. a teacher) extend it."""
        close = getattr(self.server, "close", None)
        if close is None:
            return
        try:
            await close()
        except Exception as exc:
            logger.debug("closing inference clients failed: %s", exc)

    # ------------------------------------------------------------------------------------------------------
    # Checkpoints
    # ------------------------------------------------------------------------------------------------------
    def _checkpoint_folder(self) -> Path:
        return Path(self.checkpoint_dir or ".") / "env_checkpoints" / str(self.wandb_prepend)

    def save_checkpoint(self, step: int, data: Optional[dict[str, Any]] = None) -> None:
        """Write ``data`` as ``{checkpoint_dir}/env_checkpoints/{wandb_prepend}/step-{step}.json``.

        The runtime calls this with ``data=None`` at every ``checkpoint_interval``; overrides supply their
        state (``super().save_checkpoint(step, {"iter": self.iter})``). Nothing is written for ``None``.
        """
        if data is None:
            return
        folder = self._checkpoint_folder()
        folder.mkdir(parents=True, exist_ok=True)
        target = folder / f"step-{step}.json"
        tmp = target.with_suffix(".json.tmp")
        tmp.write_text(json.dumps(data), encoding="utf-8")
        tmp.replace(target)
        logger.info("[%s] checkpoint written to %s", self.env_label, target)

    def load_checkpoint(self) -> None:
        """Restore attributes from the newest checkpoint at or before ``curr_step`` (if any)."""
        folder = self._checkpoint_folder()
        if not folder.is_dir():
            return
        best: Optional[tuple[int, Path]] = None
        for path in folder.glob("step-*.json"):
            match = re.fullmatch(r"step-(\d+)\.json", path.name)
            if (
                match
                and int(match.group(1)) <= self.curr_step
                and (best is None or int(match.group(1)) > best[0])
            ):
                best = (int(match.group(1)), path)
        if best is None:
            return
        try:
            data = json.loads(best[1].read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            logger.error("[%s] could not read checkpoint %s: %s", self.env_label, best[1], exc)
            return
        for key, value in data.items():
            setattr(self, key, value)
        logger.info("[%s] restored checkpoint %s", self.env_label, best[1])

    # ------------------------------------------------------------------------------------------------------
    # Runtime state (compat: attributes of the env in atroposlib 0.4.0; they live on ``self.runner``)
    # ------------------------------------------------------------------------------------------------------
    runner: EnvRunner
    env_id: RunnerState[Optional[int]] = RunnerState()
    status_dict: RunnerState[dict[str, Any]] = RunnerState()
    curr_step: RunnerState[int] = RunnerState()
    max_token_len: RunnerState[int] = RunnerState()
    wandb_prepend: RunnerState[Optional[str]] = RunnerState()
    checkpoint_dir: RunnerState[str] = RunnerState()
    checkpoint_interval: RunnerState[int] = RunnerState()
    items_sent_this_step: RunnerState[int] = RunnerState()
    eval_runner: RunnerState[Optional[asyncio.Task]] = RunnerState()
    eval_workers: RunnerState[set] = RunnerState()
    max_num_workers: RunnerState[int] = RunnerState()
    last_loop_time: RunnerState[Optional[float]] = RunnerState()
    workers: RunnerState[set] = RunnerState("pool")
    running_items: RunnerState[dict[str, dict[str, Any]]] = RunnerState("pool")
    backlog: RunnerState[list] = RunnerState("pool")
    items_abandoned: RunnerState[int] = RunnerState("pool")
    last_completed_item: RunnerState[Any] = RunnerState("pool")
    rollouts_for_wandb: RunnerState[list] = RunnerState("wandb")
    completion_lengths: RunnerState[list] = RunnerState("wandb")
    task_duration: RunnerState[list] = RunnerState("wandb")
    succeeded_task_duration: RunnerState[list] = RunnerState("wandb")
    failed_task_duration: RunnerState[list] = RunnerState("wandb")
    task_successful: RunnerState[list] = RunnerState("wandb")
    mainloop_timings: RunnerState[list] = RunnerState("wandb")
    workers_added_list: RunnerState[list] = RunnerState("wandb")
    wandb_run: RunnerState[Any] = RunnerState("wandb", "run")
    wandb_project: RunnerState[Optional[str]] = RunnerState("wandb", "project")
    wandb_group: RunnerState[Optional[str]] = RunnerState("wandb", "group")
    jsonl_writer: RunnerState[Any] = RunnerState("sender")
    discard_counts: RunnerState[Any] = RunnerState("sender")
    groups_accepted_total: RunnerState[int] = RunnerState("sender")
    groups_sent_total: RunnerState[int] = RunnerState("sender")

    @property
    def api(self) -> TrajectoryApiClient:
        """The trajectory-API client of the runner (created on first use)."""
        return self.runner.sender.api

    @property
    def env_label(self) -> str:
        """How this env is named in log lines: the API-assigned name, else ``wandb_name``, else the class name."""
        runner = self.__dict__.get("runner")
        return (
            (runner.wandb_prepend if runner is not None else None)
            or getattr(self.config, "wandb_name", None)
            or self.name
            or type(self).__name__
        )

    # ------------------------------------------------------------------------------------------------------
    # Runtime hooks: the runner calls these; the defaults delegate to it
    # ------------------------------------------------------------------------------------------------------
    async def env_manager(self) -> None:
        """Run ``serve`` until ``total_steps`` or a shutdown (:meth:`EnvRunner.serve`)."""
        await self.runner.serve()

    async def process_manager(self) -> None:
        """Run ``process`` (:meth:`~atroposlib.envs.cli.process.ProcessRunner.run`)."""
        await ProcessRunner(self).run()

    async def _run_evaluate(self, *_: Any, **__: Any) -> None:
        """Run ``evaluate`` (:meth:`~atroposlib.envs.cli.process.EvaluateRunner.run`)."""
        await EvaluateRunner(self).run()

    def request_shutdown(self, reason: str = "requested") -> None:
        """Ask a running ``env_manager`` to stop gracefully (safe to call from the event loop thread)."""
        self.runner.request_shutdown(reason)

    async def setup_wandb(self) -> None:
        """serve: join the trainer's wandb project (:meth:`WandbReporter.join_trainer_run`)."""
        await self.runner.wandb.join_trainer_run()

    async def register_env(self) -> None:
        """``POST /register-env`` until accepted (:meth:`ApiSession.register`)."""
        await self.runner.session.register()

    async def get_server_info(self) -> None:
        """Adopt the trainer's batch size and lengths from ``GET /info`` (:meth:`ApiSession.server_info`)."""
        await self.runner.session.server_info()

    async def get_status(self) -> None:
        """Poll ``GET /status-env`` into ``status_dict`` (:meth:`ApiSession.poll_status`)."""
        await self.runner.session.poll_status()

    async def env_step_checks(self) -> None:
        """React to a new trainer step: evaluations, checkpoints, wandb (:meth:`EnvRunner.step_checks`)."""
        await self.runner.step_checks()

    async def add_train_workers(self) -> None:
        """Start workers up to the current cap (:meth:`WorkerPool.add_workers`)."""
        await self.runner.pool.add_workers()

    async def handle_env(self, item_uuid: str) -> Any:
        """One worker: collect one running item's groups and hand them on (:meth:`WorkerPool.collect`)."""
        return await self.runner.pool.collect(item_uuid)

    async def handle_send_to_api(
        self, scored_data: Any, item: Any = None, do_send_to_api: bool = True,
        abort_on_any_max_length_exceeded: bool = True,
    ) -> int:  # fmt: skip
        """Check, record and (optionally) send groups; returns the number accepted (:meth:`GroupSender.send`).

        ``do_send_to_api=False`` records without sending (``process``); ``abort_on_any_max_length_exceeded``
        drops groups with a sequence at or over the trainer's ``max_token_len``."""
        return await self.runner.sender.send(
            scored_data, item, to_api=do_send_to_api, check_lengths=abort_on_any_max_length_exceeded
        )

    async def _send_scored_data_to_api(self, scored_data: Any) -> SendOutcome:
        """Deliver accepted groups to the trajectory API (:meth:`GroupSender.deliver`)."""
        return await self.runner.sender.deliver(scored_data)

    def record_group_scores(self, scores: Any, kept: bool, equal_scores: bool = False) -> None:
        """Count a generated group's scores in the next wandb log's rollout stats (:meth:`RolloutStats.record`)."""
        self.runner.sender.stats.record(scores, kept, equal_scores)

    def rollout_stats(self) -> dict[str, float]:
        """The rollout stats counted since the last log (:meth:`RolloutStats.metrics`)."""
        return self.runner.sender.stats.metrics()

    def reset_rollout_stats(self) -> None:
        """Empty the buffers behind :meth:`rollout_stats`."""
        self.runner.sender.stats.reset()

    def record_discard(self, problem: GroupProblem, item: Any = None) -> None:
        """Count and log a discarded group (:meth:`GroupSender.record_discard`)."""
        self.runner.sender.record_discard(problem, item)

    def discard_summary(self) -> dict[str, int]:
        """All discards so far by reason (a copy)."""
        return dict(self.runner.sender.discard_counts)

    async def wandb_log(self, wandb_metrics: Optional[dict[str, Any]] = None) -> None:
        """Add the base metrics and log at ``curr_step`` (:meth:`WandbReporter.log`). Overrides add their keys
        and then ``await super().wandb_log(metrics)``."""
        await self.runner.wandb.log(wandb_metrics)

    async def create_rollout_table(self, wandb_metrics: dict[str, Any]) -> dict[str, Any]:
        """Add the buffered rollouts as a table under ``train/rollouts`` (:meth:`WandbReporter.rollout_table`)."""
        return self.runner.wandb.rollout_table(wandb_metrics)

    async def add_rollouts_for_wandb(self, scored_data: Any, item: Any = None) -> None:
        """Keep an accepted group's first rollouts for the table (:meth:`WandbReporter.keep_rollouts`)."""
        self.runner.wandb.keep_rollouts(scored_data)

    def perf_stats(self, metrics_dict: dict[str, Any]) -> dict[str, Any]:
        """Add (and clear) the timing statistics (:meth:`WandbReporter.perf_stats`)."""
        return self.runner.wandb.perf_stats(metrics_dict)

    async def evaluate_log(
        self,
        metrics: dict[str, Any],
        task_name: Optional[str] = None,
        model_name: Optional[str] = None,
        start_time: Optional[float] = None,
        end_time: Optional[float] = None,
        generation_parameters: Optional[dict[str, Any]] = None,
        samples: Optional[list[dict[str, Any]]] = None,
        verbose: bool = True,
        subtasks: Optional[dict[str, dict[str, Any]]] = None,
    ) -> None:
        """Write evaluation results under ``data_dir_to_save_evals`` (no-op with a warning when unset).

        ``metrics.json`` = ``{"config_general": {model_name, total_evaluation_time_seconds (str),
        generation_parameters ({"max_new_tokens": max_token_length, **given})}, "results":
        {"atropos|<task>|0": metrics, "all": metrics}}``, plus ``"atropos|<task>:<subtask>|0": metrics`` for
        each of ``subtasks`` (lighteval's subtask entries); ``samples.jsonl`` (one JSON object per sample) when
        samples are given. Both hold the latest evaluation; every evaluation is also appended to
        ``metrics_history.jsonl`` with ``curr_step``, so periodic evals are not lost.
        """
        config = self.config
        if config.data_dir_to_save_evals is None:
            logger.warning(
                "[%s] data_dir_to_save_evals is not set: evaluation results not written", self.env_label
            )
            return
        directory = Path(config.data_dir_to_save_evals)
        directory.mkdir(parents=True, exist_ok=True)
        task_name = task_name or f"{self.name or type(self).__name__}_eval"
        if model_name is None:
            model_name = getattr(config, "model_name", None)
        if model_name is None:
            servers = getattr(self.server, "servers", None) or []
            model_name = getattr(getattr(servers[0], "config", None), "model_name", None) if servers else None
        now = time.time()
        start_time = now if start_time is None else start_time
        end_time = now if end_time is None else end_time
        if verbose:
            try:
                from atroposlib.utils.display import display_metrics_table

                display_metrics_table(task_name, metrics, start_time, end_time)
            except ImportError:
                logger.info("[%s] %s: %s", self.env_label, task_name, metrics)
        params = {"max_new_tokens": config.max_token_length, **(generation_parameters or {})}
        general = {"model_name": model_name, "total_evaluation_time_seconds": str(end_time - start_time)}
        result = {
            "config_general": {**general, "generation_parameters": params},
            "results": {f"atropos|{task_name}|0": metrics, "all": metrics},
        }
        for subtask, values in (subtasks or {}).items():
            result["results"][f"atropos|{task_name}:{subtask}|0"] = values
        (directory / "metrics.json").write_text(
            json.dumps(result, indent=2, default=_jsonable), encoding="utf-8"
        )
        with open(directory / "metrics_history.jsonl", "a", encoding="utf-8") as fh:
            fh.write(
                json.dumps({"step": self.curr_step, "time": end_time, **result}, default=_jsonable) + "\n"
            )
        logger.info("[%s] evaluation results written to %s", self.env_label, directory / "metrics.json")
        if samples:
            with open(directory / "samples.jsonl", "w", encoding="utf-8") as fh:
                for sample in samples:
                    fh.write(json.dumps(sample, default=_jsonable) + "\n")

    # ------------------------------------------------------------------------------------------------------
    # Command line (implemented in atroposlib.envs.cli)
    # ------------------------------------------------------------------------------------------------------
    @classmethod
    def cli(cls) -> None:
        """Command-line entry point: ``python my_env.py {serve,process,evaluate} [flags]`` (exits)."""
        from atroposlib.envs.cli import run_cli

        run_cli(cls)

    @classmethod
    def get_cli_serve_config_cls(cls) -> type:
        from atroposlib.envs.cli import get_cli_serve_config_cls

        return get_cli_serve_config_cls(cls)

    @classmethod
    def get_cli_process_config_cls(cls) -> type:
        from atroposlib.envs.cli import get_cli_process_config_cls

        return get_cli_process_config_cls(cls)

    @classmethod
    def get_cli_evaluate_config_cls(cls) -> type:
        from atroposlib.envs.cli import get_cli_evaluate_config_cls

        return get_cli_evaluate_config_cls(cls)


__all__ = [
    "ENV_NAMESPACE",
    "NAMESPACE_SEP",
    "OPENAI_NAMESPACE",
    "UUID",
    "APIServer",
    "APIServerConfig",
    "BaseEnv",
    "BaseEnvConfig",
    "EvalHandlingEnum",
    "Item",
    "Message",
    "ReasoningConfig",
    "ScoredDataGroup",
    "ScoredDataItem",
    "ServerBaseline",
    "ServerManager",
    "ServerManagerConfig",
    "logger",
    "resolve_openai_configs",
]
