"""The three environment subcommands (``serve``, ``process``, ``evaluate``) as pydantic models.

``BaseEnv.get_cli_{serve,process,evaluate}_config_cls()`` return a subclass of :class:`CliCommand` built
by :func:`build_command_cls`: one field per flag (``env.<field>``, ``openai.<field>``, ``slurm``,
``testing``, ``max_n_completions``, ``proxy_url``, ``tool_parser``, ``config``; distillation environments
(those with ``teacher_config_init``) also get ``teacher.<field>``) whose default is the *effective* default
(``config_init()`` plus the subcommand's adjustments). The argparse front end (``atroposlib.envs.cli``)
turns those fields into flags, instantiates the class with only the flags the user passed (so
``model_fields_set`` says what was explicit) and calls :meth:`CliCommand.run`.

Environments that need extra flags (e.g. a teacher server) can subclass the returned class, add fields
under their own prefix and override :meth:`CliCommand.run`, reusing :meth:`CliCommand.resolve`.
"""

from __future__ import annotations

import asyncio
import copy
import logging
import netrc
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar
from urllib.parse import urlparse

import yaml
from pydantic import BaseModel, ConfigDict, Field, create_model

from atroposlib.envs.cli.config import (
    ENV_KEY,
    MANAGER_KEYS,
    OPENAI_KEY,
    CliUsageError,
    build_env_config,
    build_manager_config,
    flat_env_keys_of,
    load_yaml_config,
    mode_env_defaults,
    resolve_server_configs,
    single_server_defaults,
)
from atroposlib.envs.env_config import resolve_tokenizer_name
from atroposlib.envs.serve.setup_errors import EnvSetupError, run_setup, traceback_requested

logger = logging.getLogger("atroposlib.envs.cli")

ENV_PREFIX = f"{ENV_KEY}."
OPENAI_PREFIX = f"{OPENAI_KEY}."
CONFIG_FIELD = "config"
_PLACEHOLDER_KEYS = frozenset({"", "x", "EMPTY", "dummy", "none", "None"})


class CliRunError(Exception):
    """The configuration was valid but the environment could not be started (message is one line)."""


def _server_classes() -> tuple[type[BaseModel], type[BaseModel], type[BaseModel]]:
    """``(APIServerConfig, ServerBaseline, ServerManagerConfig)``, imported lazily."""
    from atroposlib.envs.server_handling.server_baseline import APIServerConfig, ServerBaseline
    from atroposlib.envs.server_handling.server_manager import ServerManagerConfig

    return APIServerConfig, ServerBaseline, ServerManagerConfig


def openai_config_class(server_default: Any) -> type[BaseModel]:
    """The class whose fields become ``--openai.*``: that of ``config_init()``'s server config when it is an
    ``APIServerConfig`` (or a list of them), else ``APIServerConfig``."""
    api_cls, _, _ = _server_classes()
    if isinstance(server_default, api_cls):
        return type(server_default)
    if isinstance(server_default, list) and server_default and isinstance(server_default[0], api_cls):
        return type(server_default[0])
    return api_cls


@dataclass
class ResolvedRun:
    """Everything needed to construct and run an environment, after layering and validation."""

    mode: str
    env_config: BaseModel
    server_configs: Any
    manager_config: BaseModel
    explicit_manager_keys: frozenset[str]
    config_path: str | None = None
    #: extra constructor keywords, e.g. ``teacher_server_configs`` for distillation environments
    extra_env_kwargs: dict[str, Any] = field(default_factory=dict)


class CliCommand(BaseModel):
    """Base of the generated subcommand models; see the module docstring."""

    model_config = ConfigDict(extra="forbid", arbitrary_types_allowed=True, protected_namespaces=())

    mode: ClassVar[str] = "serve"
    env_cls: ClassVar[Any] = None
    env_defaults: ClassVar[dict[str, Any]] = {}
    server_default: ClassVar[Any] = None
    init_env_config: ClassVar[Any] = None
    teacher_namespace: ClassVar[str | None] = None
    teacher_default: ClassVar[Any] = None
    #: ``--help`` text for defaults that are computed later (field name -> text shown after "default:").
    help_defaults: ClassVar[dict[str, str]] = {}

    # -- what the user passed --------------------------------------------------------------------------
    def explicit(self, prefix: str = "") -> dict[str, Any]:
        """Flags given on the command line whose name starts with ``prefix``, prefix stripped.

        With ``prefix=""`` only un-namespaced flags (``slurm``, ``testing`` ...) are returned.
        """
        out = {}
        for name in self.model_fields_set:
            if prefix and name.startswith(prefix):
                out[name[len(prefix) :]] = getattr(self, name)
            elif not prefix and "." not in name and name != CONFIG_FIELD:
                out[name] = getattr(self, name)
        return out

    # -- layering --------------------------------------------------------------------------------------
    def resolve(self) -> ResolvedRun:
        """Layer ``config_init()`` < ``--config`` YAML < flags and validate; raises :class:`CliUsageError`."""
        _, _, manager_cls = _server_classes()
        cls = type(self)
        config_path = getattr(self, CONFIG_FIELD, None)
        env_config_cls = type(cls.init_env_config)
        flat = flat_env_keys_of(env_config_cls) if getattr(cls.env_cls, "flat_config_form", False) else None
        sections = (cls.teacher_namespace,) if cls.teacher_namespace else ()
        doc = load_yaml_config(config_path, flat_env_keys=flat, server_sections=sections)
        env_config = build_env_config(
            cls.env_cls,
            env_config_cls,
            cls.env_defaults,
            doc.get(ENV_KEY),
            self.explicit(ENV_PREFIX),
            mode=cls.mode,
            yaml_path=config_path,
        )
        _check_group_size(cls.env_cls, cls.mode, env_config)
        manager_cli = {k: v for k, v in self.explicit().items() if k in MANAGER_KEYS}
        manager_config = build_manager_config(manager_cls, doc, manager_cli, yaml_path=config_path)
        servers = resolve_server_configs(
            copy.deepcopy(cls.server_default),
            doc,
            self.explicit(OPENAI_PREFIX),
            openai_cls=openai_config_class(cls.server_default),
            yaml_path=config_path,
        )
        explicit_manager = frozenset(manager_cli) | frozenset(k for k in MANAGER_KEYS if k in doc)
        extra: dict[str, Any] = {}
        if cls.teacher_namespace:
            teacher = resolve_server_configs(
                copy.deepcopy(cls.teacher_default),
                doc,
                self.explicit(f"{cls.teacher_namespace}."),
                openai_cls=openai_config_class(cls.teacher_default),
                yaml_path=config_path,
                namespace=cls.teacher_namespace,
            )
            if teacher is not None:
                extra["teacher_server_configs"] = teacher
        if "tokenizer_name" in type(env_config).model_fields and not env_config.tokenizer_name:
            env_config.tokenizer_name = resolve_tokenizer_name(None, servers)
        return ResolvedRun(
            cls.mode, env_config, servers, manager_config, explicit_manager, config_path, extra
        )

    # -- running ---------------------------------------------------------------------------------------
    def run(self) -> None:
        """Resolve the configuration, construct the environment and run this subcommand to completion."""
        resolved = self.resolve()
        run_resolved(type(self).env_cls, resolved)


def _check_group_size(env_cls: type, mode: str, env_config: BaseModel) -> None:
    """Refuse a training group of one rollout in ``serve``/``process``: GRPO's advantage is a rollout's score
    minus its group's mean, so a lone rollout teaches nothing (unless the environment declares
    ``single_sample_scoring``)."""
    group_size = getattr(env_config, "group_size", None)
    if mode not in ("serve", "process") or group_size is None or group_size >= 2:
        return
    if getattr(env_cls, "single_sample_scoring", False):
        return
    raise CliUsageError(
        f"--env.group_size {group_size}: a group needs at least 2 rollouts of the same item to compare "
        f"(each rollout's advantage is its score minus the group's mean); use 2 or more"
    )


def _teacher_namespace(env_cls: type) -> str | None:
    """The flag/YAML namespace of a distillation env's teacher servers (``teacher``), or None for other envs."""
    if callable(getattr(env_cls, "teacher_config_init", None)):
        return getattr(env_cls, "teacher_namespace", None) or None
    return None


def build_command_cls(env_cls: type, mode: str, init: tuple[Any, Any] | None = None) -> type[CliCommand]:
    """Build the :class:`CliCommand` subclass for ``env_cls`` and ``mode`` (``serve``/``process``/``evaluate``).

    ``init`` is ``env_cls.config_init()``'s result; it is called when not given.
    """
    _, _, manager_cls = _server_classes()
    env_config, server_default = init if init is not None else env_cls.config_init()
    env_defaults = mode_env_defaults(env_cls, mode, env_config)
    openai_cls = openai_config_class(server_default)
    openai_values = single_server_defaults(server_default, openai_cls)
    manager_defaults = manager_cls()

    teacher_namespace = _teacher_namespace(env_cls)
    teacher_default = env_cls.teacher_config_init() if teacher_namespace else None

    fields: dict[str, Any] = {
        CONFIG_FIELD: (
            str | None,
            Field(default=None, description="YAML file with env:, openai:, slurm: and testing: sections"),
        )
    }
    for name, info in type(env_config).model_fields.items():
        fields[f"{ENV_PREFIX}{name}"] = (
            info.annotation,
            Field(default=env_defaults[name], description=info.description),
        )
    for name, info in openai_cls.model_fields.items():
        fields[f"{OPENAI_PREFIX}{name}"] = (
            info.annotation,
            Field(default=openai_values.get(name), description=info.description),
        )
    if teacher_namespace:
        teacher_cls = openai_config_class(teacher_default)
        teacher_values = single_server_defaults(teacher_default, teacher_cls)
        for name, info in teacher_cls.model_fields.items():
            fields[f"{teacher_namespace}.{name}"] = (
                info.annotation,
                Field(default=teacher_values.get(name), description=info.description),
            )
    for name, info in manager_cls.model_fields.items():
        fields[name] = (
            info.annotation,
            Field(default=getattr(manager_defaults, name), description=info.description),
        )

    cmd_cls = create_model(f"{env_cls.__name__}{mode.capitalize()}Command", __base__=CliCommand, **fields)
    cmd_cls.mode = mode
    cmd_cls.env_cls = env_cls
    cmd_cls.env_defaults = env_defaults
    cmd_cls.server_default = server_default
    cmd_cls.init_env_config = env_config
    cmd_cls.teacher_namespace = teacher_namespace
    cmd_cls.teacher_default = teacher_default
    cmd_cls.help_defaults = {}
    if f"{ENV_PREFIX}tokenizer_name" in fields and not env_defaults.get("tokenizer_name"):
        served = resolve_tokenizer_name(None, server_default)
        cmd_cls.help_defaults[f"{ENV_PREFIX}tokenizer_name"] = f"the served model's name, now {served}"
    cmd_cls.__doc__ = f"{mode} subcommand of {env_cls.__name__}"
    return cmd_cls


# ---------------------------------------------------------------------------------------------------------
# Execution
# ---------------------------------------------------------------------------------------------------------
def _has_wandb_credentials() -> bool:
    if os.environ.get("WANDB_API_KEY"):
        return True
    host = urlparse(os.environ.get("WANDB_BASE_URL", "https://api.wandb.ai")).hostname or "api.wandb.ai"
    path = os.environ.get("NETRC") or str(Path.home() / ".netrc")
    try:
        return netrc.netrc(path).authenticators(host) is not None
    except (OSError, netrc.NetrcParseError):
        return False


def ensure_wandb_usable(env_config: BaseModel) -> None:
    """Switch wandb to offline mode when it is enabled but no key is available (never prompt for a login).

    An explicit ``WANDB_MODE`` is respected.
    """
    if not getattr(env_config, "use_wandb", False) or os.environ.get("WANDB_MODE"):
        return
    if not _has_wandb_credentials():
        os.environ["WANDB_MODE"] = "offline"
        logger.info("no wandb API key found: logging to wandb in offline mode (set WANDB_API_KEY to sync)")


def _redact(server_dump: dict[str, Any]) -> dict[str, Any]:
    key = server_dump.get("api_key")
    if key is not None and str(key) not in _PLACEHOLDER_KEYS:
        server_dump = {**server_dump, "api_key": "<redacted>"}
    return server_dump


def dump_server_configs(server_configs: Any, *, redact: bool = True) -> Any:
    """JSON-ready view of the resolved server configs: a list, a dict, or ``{}`` for a ``ServerBaseline``."""
    api_cls, baseline_cls, _ = _server_classes()
    fix = _redact if redact else (lambda d: d)
    if isinstance(server_configs, list):
        return [fix(c.model_dump(mode="json")) for c in server_configs]
    if isinstance(server_configs, api_cls):
        return fix(server_configs.model_dump(mode="json"))
    if isinstance(server_configs, baseline_cls):
        return {}
    return server_configs


def write_evaluate_config(resolved: ResolvedRun) -> Path | None:
    """Write ``{data_dir_to_save_evals}/evaluate_config.yaml`` (keys env/openai/slurm/testing) when the
    directory is set; API keys other than placeholders are redacted. Returns the path written."""
    out_dir = getattr(resolved.env_config, "data_dir_to_save_evals", None)
    if not out_dir:
        return None
    path = Path(out_dir) / "evaluate_config.yaml"
    path.parent.mkdir(parents=True, exist_ok=True)
    doc = {
        "env": resolved.env_config.model_dump(mode="json"),
        "openai": dump_server_configs(resolved.server_configs),
        "slurm": resolved.manager_config.slurm,
        "testing": resolved.manager_config.testing,
    }
    if "teacher_server_configs" in resolved.extra_env_kwargs:
        doc["teacher"] = dump_server_configs(resolved.extra_env_kwargs["teacher_server_configs"])
    path.write_text(yaml.safe_dump(doc, sort_keys=False), encoding="utf-8")
    return path


def _print_configs(env_cls: type, resolved: ResolvedRun) -> None:
    from rich.console import Console
    from rich.pretty import Pretty

    console = Console(stderr=True)
    console.print(f"[bold]{env_cls.__name__}[/bold] {resolved.mode}")
    console.print("env config:", Pretty(resolved.env_config.model_dump(mode="json")))
    console.print("server configs:", Pretty(dump_server_configs(resolved.server_configs)))


def construct_env(env_cls: type, resolved: ResolvedRun) -> Any:
    """Construct the environment from resolved configs and apply the server-manager options.

    Raises :class:`CliRunError` when the constructor fails (e.g. tokenizer not found, invalid reasoning
    effort) so the CLI can report it in one line; with ``ATROPOS_CLI_TRACEBACK=1`` the original exception
    propagates instead.
    """
    manager = resolved.manager_config
    try:
        env = env_cls(
            config=resolved.env_config,
            server_configs=resolved.server_configs,
            slurm=manager.slurm,
            testing=manager.testing,
            **resolved.extra_env_kwargs,
        )
    except Exception as exc:  # reported in one line; ATROPOS_CLI_TRACEBACK=1 shows the traceback instead
        if traceback_requested():
            raise
        message = " ".join(str(exc).split())
        raise CliRunError(
            f"could not construct {env_cls.__name__}: {type(exc).__name__}: {message} "
            "(ATROPOS_CLI_TRACEBACK=1 shows the traceback)"
        )
    server = getattr(env, "server", None)
    if server is not None:
        if "max_n_completions" in resolved.explicit_manager_keys:
            server.max_n_completions = manager.max_n_completions
        if "proxy_url" in resolved.explicit_manager_keys and manager.proxy_url:
            server.proxy_url = manager.proxy_url
            server.use_proxy = True
        if "tool_parser" in resolved.explicit_manager_keys and getattr(manager, "tool_parser", None):
            server.tool_parser = manager.tool_parser
    return env


async def _evaluate(env: Any) -> None:
    runner = getattr(env, "_run_evaluate", None)
    if runner is not None:
        await runner()
        return
    await run_setup(env)
    await env.evaluate()


def _run_offline(main: Any) -> None:
    """``asyncio.run(main)`` for ``process``/``evaluate``: a down inference server, or items that keep failing,
    end the run with a one-line :class:`CliRunError`."""
    from atroposlib.envs.cli.process import ProcessModeError
    from atroposlib.envs.server_handling.errors import ServerUnavailableError

    async def with_quiet_siblings() -> Any:
        # Requests gathered beside the one that failed end with the same error; nobody reads theirs.
        loop = asyncio.get_running_loop()

        def handler(loop: asyncio.AbstractEventLoop, context: dict[str, Any]) -> None:
            if not isinstance(context.get("exception"), ServerUnavailableError):
                loop.default_exception_handler(context)

        loop.set_exception_handler(handler)
        return await main

    try:
        asyncio.run(with_quiet_siblings())
    except (ServerUnavailableError, ProcessModeError, EnvSetupError) as exc:
        raise CliRunError(" ".join(str(exc).split())) from exc


def run_resolved(env_cls: type, resolved: ResolvedRun) -> Any:
    """Construct the environment and run ``resolved.mode`` to completion; returns the environment.

    A failing ``setup()`` raises :class:`CliRunError` (one line) in every mode, and so does a registration
    the API refuses in ``serve``; in ``process`` and
    ``evaluate``, so do unreachable inference servers and items that keep failing."""
    ensure_wandb_usable(resolved.env_config)
    if resolved.mode == "evaluate":
        written = write_evaluate_config(resolved)
        if written is not None:
            logger.info("wrote %s", written)
    _print_configs(env_cls, resolved)
    env = construct_env(env_cls, resolved)
    if resolved.mode == "serve":
        from atroposlib.envs.serve.api_session import RegistrationRefused

        try:
            asyncio.run(env.env_manager())
        except (EnvSetupError, RegistrationRefused) as exc:
            raise CliRunError(" ".join(str(exc).split())) from exc
    elif resolved.mode == "process":
        env.process_mode = True
        env.n_groups_to_process = resolved.env_config.total_steps
        env.group_size_to_process = resolved.env_config.group_size
        _run_offline(env.process_manager())
    elif resolved.mode == "evaluate":
        _run_offline(_evaluate(env))
    else:
        raise ValueError(f"unknown mode {resolved.mode!r}")
    return env
