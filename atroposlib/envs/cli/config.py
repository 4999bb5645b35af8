"""Configuration layering for the environment CLI: ``config_init()`` < ``--config`` YAML < flags.

Pure functions (no argparse, no environment construction) so each rule is tested directly:

* :func:`load_yaml_config` reads and checks the ``--config`` file (top-level ``env``, ``openai``,
  ``slurm``, ``testing``; also ``max_n_completions``, ``proxy_url`` and ``tool_parser``);
* :func:`mode_env_defaults` applies the per-subcommand defaults on top of ``config_init()``;
* :func:`build_env_config` / :func:`build_manager_config` merge the layers and validate;
* :func:`resolve_server_configs` decides which inference-server configs the environment gets.

Every problem a user can cause raises :class:`CliUsageError` whose message is one line naming the field.
"""

from __future__ import annotations

import copy
import logging
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from atroposlib.utils.cli import merge_dicts

logger = logging.getLogger("atroposlib.envs.cli")

ENV_KEY = "env"
OPENAI_KEY = "openai"
TEACHER_KEY = "teacher"  # teacher inference servers of distillation environments (TeacherDistillationEnv)
MANAGER_KEYS = ("slurm", "testing", "max_n_completions", "proxy_url", "tool_parser")
KNOWN_TOP_LEVEL_KEYS = frozenset({ENV_KEY, OPENAI_KEY, TEACHER_KEY, *MANAGER_KEYS})
MODES = ("serve", "process", "evaluate")


class CliUsageError(Exception):
    """Bad flags or configuration: the message is a single line that names the offending field."""


# ---------------------------------------------------------------------------------------------------------
# YAML
# ---------------------------------------------------------------------------------------------------------
def load_yaml_config(path: str | Path | None) -> dict[str, Any]:
    """Load the ``--config`` YAML file and check its shape; ``None`` gives ``{}``.

    Raises :class:`CliUsageError` for a missing/unreadable file, invalid YAML, a top level that is not a
    mapping, an ``env`` section that is not a mapping, or an ``openai`` section that is neither a mapping
    nor a list of mappings. Unknown top-level keys are ignored with a warning (files written for other
    tools keep working).
    """
    if path is None:
        return {}
    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
    except FileNotFoundError:
        raise CliUsageError(f"--config {path}: file not found")
    except IsADirectoryError:
        raise CliUsageError(f"--config {path}: is a directory, expected a YAML file")
    except (OSError, UnicodeDecodeError) as exc:
        raise CliUsageError(f"--config {path}: cannot read file ({exc})")
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise CliUsageError(f"--config {path}: invalid YAML: {_yaml_error_text(exc)}")
    if doc is None:
        return {}
    if not isinstance(doc, Mapping):
        raise CliUsageError(
            f"--config {path}: expected a mapping with keys env/openai/slurm/testing, got {type(doc).__name__}"
        )
    doc = dict(doc)
    for key in doc:
        if key not in KNOWN_TOP_LEVEL_KEYS:
            logger.warning("--config %s: ignoring unknown top-level key %r", path, key)
    env = doc.get(ENV_KEY)
    if env is not None and not isinstance(env, Mapping):
        raise CliUsageError(
            f"--config {path}: 'env' must be a mapping of field: value, got {type(env).__name__}"
        )
    for key in (OPENAI_KEY, TEACHER_KEY):
        section = doc.get(key)
        if section is None:
            continue
        if isinstance(section, list):
            for i, entry in enumerate(section):
                if not isinstance(entry, Mapping):
                    raise CliUsageError(
                        f"--config {path}: '{key}[{i}]' must be a mapping of field: value, "
                        f"got {type(entry).__name__}"
                    )
        elif not isinstance(section, Mapping):
            raise CliUsageError(
                f"--config {path}: '{key}' must be a mapping or a list of mappings, got {type(section).__name__}"
            )
    return doc


def _yaml_error_text(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    if mark is not None:
        return f"{problem} at line {mark.line + 1}, column {mark.column + 1}"
    return " ".join(str(exc).split())


# ---------------------------------------------------------------------------------------------------------
# Defaults per subcommand
# ---------------------------------------------------------------------------------------------------------
def default_wandb_name(env_cls: type) -> str:
    """The run name used when ``wandb_name`` is unset: the env's ``name`` or its class name."""
    return getattr(env_cls, "name", None) or env_cls.__name__


def default_process_output(env_cls: type) -> str:
    """Where ``process`` writes its groups unless told otherwise."""
    return f"data/{getattr(env_cls, 'name', None) or 'groups'}.jsonl"


def mode_env_defaults(env_cls: type, mode: str, env_config: BaseModel) -> dict[str, Any]:
    """Return the env-config defaults for ``mode``: ``config_init()`` values with the mode adjustments.

    * every mode: ``wandb_name`` = ``env_cls.name`` (or the class name) when unset;
    * ``process``: ``ensure_scores_are_not_same=False``, ``include_messages=True``, ``use_wandb=True``
      and ``data_path_to_save_groups = data/{name}.jsonl`` when unset;
    * ``evaluate``: ``use_wandb=True``;
    * ``serve``: nothing else.
    Adjustments only touch fields the config class has.
    """
    if mode not in MODES:
        raise ValueError(f"unknown mode {mode!r}")
    fields = type(env_config).model_fields
    values = {name: getattr(env_config, name) for name in fields}
    updates: dict[str, Any] = {}
    if mode == "process":
        updates = {"ensure_scores_are_not_same": False, "include_messages": True, "use_wandb": True}
        if values.get("data_path_to_save_groups") is None:
            updates["data_path_to_save_groups"] = default_process_output(env_cls)
    elif mode == "evaluate":
        updates = {"use_wandb": True}
    if values.get("wandb_name") is None:
        updates["wandb_name"] = default_wandb_name(env_cls)
    values.update({k: v for k, v in updates.items() if k in fields})
    return values


# ---------------------------------------------------------------------------------------------------------
# Validation helpers
# ---------------------------------------------------------------------------------------------------------
def format_validation_error(exc: ValidationError, namespace: str, source_of: Any = None) -> str:
    """One line naming the first failing field, e.g. ``env.group_size: Input should be ... (got 'x', from --config a.yaml)``."""
    err = exc.errors()[0]
    loc = [str(part) for part in err.get("loc", ())]
    field = ".".join([namespace, *loc]) if namespace else ".".join(loc) or "value"
    message = str(err.get("msg", "invalid value")).rstrip(".")
    detail = []
    if "input" in err and err.get("type") != "missing":
        detail.append(f"got {err['input']!r}")
    if source_of is not None and loc:
        source = source_of(loc[0])
        if source:
            detail.append(f"from {source}")
    suffix = f" ({', '.join(detail)})" if detail else ""
    return f"{field}: {message}{suffix}"


def _source_lookup(yaml_keys: Mapping[str, Any], cli_keys: Mapping[str, Any], namespace: str, yaml_path: Any):
    def source_of(field: str) -> str | None:
        if field in cli_keys:
            return f"--{namespace}.{field}" if namespace else f"--{field}"
        if field in yaml_keys:
            return f"--config {yaml_path}"
        return "config_init()"

    return source_of


# ---------------------------------------------------------------------------------------------------------
# Layering
# ---------------------------------------------------------------------------------------------------------
def build_env_config(
    env_cls: type,
    env_config_cls: type[BaseModel],
    defaults: Mapping[str, Any],
    yaml_env: Mapping[str, Any] | None,
    cli_env: Mapping[str, Any],
    *,
    mode: str,
    yaml_path: Any = None,
) -> BaseModel:
    """Merge ``defaults`` < ``yaml_env`` < ``cli_env`` and build ``env_config_cls``.

    Unknown YAML keys are passed on: ``BaseEnvConfig`` ignores them with a warning. After merging, a ``wandb_name`` of ``None`` falls back
    to the env's name and, in ``process``, a ``data_path_to_save_groups`` of ``None`` to
    ``data/{name}.jsonl`` (neither ``None`` is usable in that mode). Raises :class:`CliUsageError`
    naming the field when validation fails.
    """
    yaml_env = dict(yaml_env or {})
    merged = merge_dicts(defaults, yaml_env, cli_env)
    fields = env_config_cls.model_fields
    if "wandb_name" in fields and merged.get("wandb_name") is None:
        merged["wandb_name"] = default_wandb_name(env_cls)
    if (
        mode == "process"
        and "data_path_to_save_groups" in fields
        and merged.get("data_path_to_save_groups") is None
    ):
        merged["data_path_to_save_groups"] = default_process_output(env_cls)
    try:
        return env_config_cls(**merged)
    except ValidationError as exc:
        raise CliUsageError(
            format_validation_error(exc, ENV_KEY, _source_lookup(yaml_env, cli_env, ENV_KEY, yaml_path))
        )


def build_manager_config(
    manager_cls: type[BaseModel],
    yaml_doc: Mapping[str, Any],
    cli_values: Mapping[str, Any],
    *,
    yaml_path: Any = None,
) -> BaseModel:
    """``ServerManagerConfig`` defaults < top-level YAML keys < flags (``slurm``, ``testing``, ...)."""
    yaml_values = {k: yaml_doc[k] for k in MANAGER_KEYS if k in yaml_doc and k in manager_cls.model_fields}
    merged = merge_dicts(yaml_values, cli_values)
    try:
        return manager_cls(**merged)
    except ValidationError as exc:
        raise CliUsageError(
            format_validation_error(exc, "", _source_lookup(yaml_values, cli_values, "", yaml_path))
        )


def _single_yaml_openai(yaml_openai: Any) -> dict[str, Any]:
    if isinstance(yaml_openai, Mapping):
        return dict(yaml_openai)
    if isinstance(yaml_openai, list) and len(yaml_openai) == 1:
        return dict(yaml_openai[0])
    return {}


def single_server_defaults(default: Any, openai_cls: type[BaseModel]) -> dict[str, Any]:
    """The settings a single-server setup starts from: ``openai_cls`` defaults overlaid with the values of
    ``config_init()``'s single config (a bare config, the sole element of a list, or a ``ServerBaseline``)."""
    try:
        fresh = openai_cls()
        values = {name: getattr(fresh, name) for name in openai_cls.model_fields}
    except Exception:  # a subclass with required fields: fall back to the declared defaults
        values = {name: copy.deepcopy(info.default) for name, info in openai_cls.model_fields.items()}
    source = default[0] if isinstance(default, list) and len(default) == 1 else default
    if isinstance(source, BaseModel):
        values.update({k: getattr(source, k) for k in type(source).model_fields if k in values})
    return values


def resolve_server_configs(
    default: Any,
    yaml_doc: Mapping[str, Any],
    cli_values: Mapping[str, Any],
    *,
    openai_cls: type[BaseModel],
    yaml_path: Any = None,
    namespace: str = OPENAI_KEY,
) -> Any:
    """Decide inference-server configs from the environment's ``default``, YAML and ``--<namespace>.*`` flags.

    ``namespace`` is ``openai`` (the policy servers, ``default`` from ``config_init()``) or ``teacher``
    (``default`` from ``teacher_config_init()``). Applies ``resolve_openai_configs``
    (``atroposlib.envs.server_handling.openai_server``): a YAML list of >= 2 servers gives one config each;
    a default list of >= 2 is used as is; a single ``APIServerConfig`` stays a single config (merged default <
    YAML < flags); a bare ``ServerBaseline`` is kept unless YAML or flags set values; otherwise a one-element
    list. A ``None`` default stays ``None`` unless YAML or flags configure a server. Flags with several
    servers, and invalid values, raise :class:`CliUsageError` naming the field. Unknown keys in YAML entries
    are ignored (``APIServerConfig`` warns about them).
    """
    from atroposlib.envs.server_handling.openai_server import ServerConfigError, resolve_openai_configs

    cli_values = dict(cli_values)
    yaml_section = yaml_doc.get(namespace)
    if default is None:
        if not yaml_section and not cli_values:
            return None
        default = openai_cls()
    if isinstance(default, list) and len(default) >= 2 and isinstance(yaml_section, (Mapping, list)):
        if isinstance(yaml_section, Mapping) or len(yaml_section) == 1:
            logger.warning(
                "--config %s: the single-server '%s' section is ignored because the environment defines %d "
                "servers; give a '%s' list with one entry per server instead",
                yaml_path,
                namespace,
                len(default),
                namespace,
            )
    merged = merge_dicts(
        single_server_defaults(default, openai_cls), _single_yaml_openai(yaml_section), cli_values
    )
    # resolve_openai_configs reads the 'openai' namespace: hand it this namespace's section under that name.
    flags = {f"{OPENAI_KEY}.{k}": v for k, v in cli_values.items()}
    section = {OPENAI_KEY: yaml_section} if yaml_section is not None else {}
    try:
        return resolve_openai_configs(default, merged, section, flags, logger)
    except ServerConfigError as exc:
        message = str(exc)
        if namespace != OPENAI_KEY:
            message = message.replace(OPENAI_KEY, namespace)
        raise CliUsageError(message)
