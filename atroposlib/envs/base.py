"""``BaseEnv``: the class every environment subclasses, and the names environments import from here.

An environment implements ``setup``, ``get_next_item``, ``evaluate`` and either ``collect_trajectories`` (a whole
group) or ``collect_trajectory`` (one rollout), and ends its file with ``MyEnv.cli()``. ``BaseEnv`` is composed
of mixins that each do one job:

* :mod:`atroposlib.envs.serve` - the ``serve`` runtime: the scheduling loop and its workers, sending groups to
  the trajectory API, the API client, JSONL files, wandb;
* :mod:`atroposlib.envs.cli` - the command line (``serve``, ``process``, ``evaluate``, config layering) and the
  offline ``process``/``evaluate`` modes;
* :mod:`atroposlib.envs.group_assembly` - one group out of single rollouts (the default
  ``collect_trajectories``).

compat: the names atroposlib 0.4.0 exported from ``atroposlib.envs.base`` (``BaseEnvConfig``,
``ScoredDataGroup``, ``APIServerConfig``, ``ServerBaseline``, ``EvalHandlingEnum`` ...) are importable from here.
"""

from __future__ import annotations

import asyncio
import json
import logging
import re
from abc import ABC, abstractmethod
from pathlib import Path
from typing import Any, Optional, Union

from atroposlib.envs.cli.process import OfflineModesMixin
from atroposlib.envs.constants import ENV_NAMESPACE, NAMESPACE_SEP, OPENAI_NAMESPACE
from atroposlib.envs.env_config import BaseEnvConfig, resolve_tokenizer_name
from atroposlib.envs.group_assembly import assemble_group
from atroposlib.envs.groups import EvalHandlingEnum, ScoredDataGroup, ScoredDataItem
from atroposlib.envs.serve.jsonl_sink import JsonlWriter, first_free_path
from atroposlib.envs.serve.runtime import ServeRuntimeMixin
from atroposlib.envs.serve.scheduling import derived_batch_size as _derived_batch_size
from atroposlib.envs.serve.scheduling import resolve_max_num_workers
from atroposlib.envs.serve.sending import GroupSendingMixin, describe_item
from atroposlib.envs.serve.wandb_logging import WandbLoggingMixin
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


class BaseEnv(ServeRuntimeMixin, GroupSendingMixin, WandbLoggingMixin, OfflineModesMixin, ABC):
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
        """Build the env: reasoning settings, the ``ServerManager``, the tokenizer and the output file.

        ``server_configs`` may be a ``ServerBaseline`` (servers discovered on localhost/SLURM), a list of
        ``APIServerConfig`` or a single ``APIServerConfig`` (used as given, as a one-element list).
        ``config.wandb_name`` defaults to ``name`` (or the class name) when unset, and ``config.tokenizer_name``
        to the first server's ``model_name`` (see :func:`~atroposlib.envs.env_config.resolve_tokenizer_name`).
        """
        self.items_sent_this_step = 0
        self.eval_runner: Optional[asyncio.Task] = None
        self.workers_added_list: list[int] = []
        self.succeeded_task_duration: list[float] = []
        self.failed_task_duration: list[float] = []
        self.task_duration: list[float] = []
        self.mainloop_timings: list[float] = []
        self.task_successful: list[bool] = []
        self.last_loop_time: Optional[float] = None
        self.last_completed_item: Any = None
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
        self.workers: set[asyncio.Task] = set()
        self.eval_workers: set[asyncio.Task] = set()
        self.backlog: list[Any] = []
        self.rollouts_for_wandb: list = []
        self.running_items: dict[str, dict[str, Any]] = {}
        self.wandb_project: Optional[str] = None
        self.wandb_group: Optional[str] = None
        self.curr_step = 0
        self.max_token_len = -1
        config.tokenizer_name = resolve_tokenizer_name(config.tokenizer_name, server_configs)
        self.tokenizer = load_tokenizer(config.tokenizer_name) if self.loads_tokenizer else None
        if testing:
            # The in-process fake backend answers in this tokenizer's ids, so replies decode to text.
            for server in getattr(self.server, "servers", None) or []:
                if isinstance(server, ServerHarness) and server.tokenizer is None:
                    server.tokenizer = self.tokenizer
        self.completion_lengths: list[int] = []
        self.max_num_workers = resolve_max_num_workers(
            config.max_num_workers,
            config.max_num_workers_per_node,
            len(getattr(self.server, "servers", []) or []),
        )
        self.wandb_prepend: Optional[str] = None
        self.checkpoint_dir = ""
        self.checkpoint_interval = -1
        self.process_mode = False
        self._wandb_started = False
        self.wandb_run: Any = None
        self._new_counters()
        self._init_runtime_state()
        self.jsonl_writer: Optional[JsonlWriter] = None
        if config.data_path_to_save_groups:
            path = first_free_path(config.data_path_to_save_groups)
            if str(path) != str(config.data_path_to_save_groups):
                logger.info("%s exists; writing groups to %s", config.data_path_to_save_groups, path)
                config.data_path_to_save_groups = str(path)
            # Created on the first accepted group: a run that produces none leaves no empty file behind.
            self.jsonl_writer = JsonlWriter(path, mode="w")

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

    async def cleanup(self) -> None:
        """Called after every item a worker handled."""

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
