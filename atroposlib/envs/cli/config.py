"""Configuration layering for the environment CLI: ``config_init()`` < ``--config`` YAML < flags.

Pure functions (no argparse, no environment construction) so each rule is tested directly:

* :func:`load_yaml_config` reads and checks the ``--config`` file (top-level ``env``, ``openai``,
  ``slurm``, ``testing``; also ``max_n_completions``, ``proxy_url`` and ``tool_parser``);
* :func:`check_known_keys` refuses a key the configuration class does not declare, naming the closest known
  one (the compatibility keys of ``atroposlib.envs.env_config`` excepted);
* :func:`mode_env_defaults` applies the per-subcommand defaults on top of ``config_init()``;
* :func:`build_env_config` / :func:`build_manager_config` merge the layers and validate;
* :func:`resolve_server_configs` decides which inference-server configs the environment gets.

Every problem a user can cause raises :class:`CliUsageError` whose message is one line naming the field.
"""

from __future__ import annotations

import copy
import difflib
import logging
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ValidationError

from atroposlib.envs.env_config import (
    COMPAT_ENV_KEYS,
    COMPAT_SERVER_KEYS,
    known_config_keys,
    rename_original_keys,
)
from atroposlib.utils.cli import merge_dicts

logger = logging.getLogger("atroposlib.envs.cli")

ENV_KEY = "env"
OPENAI_KEY = "openai"
TEACHER_KEY = "teacher"  # teacher inference servers of distillation environments (TeacherDistillationEnv)
MANAGER_KEYS = ("slurm", "testing", "max_n_completions", "proxy_url", "tool_parser")
KNOWN_TOP_LEVEL_KEYS = frozenset({ENV_KEY, OPENAI_KEY, TEACHER_KEY, *MANAGER_KEYS})
MODES = ("serve", "process", "evaluate")
#: The key of 0.4.0's flat dataset-environment files that lists the inference servers (their ``openai``).
FLAT_SERVERS_KEY = "server_configs"


class CliUsageError(Exception):
    """Bad flags or configuration: the message is a single line that names the offending field."""


# ---------------------------------------------------------------------------------------------------------
# Unknown keys
# ---------------------------------------------------------------------------------------------------------
def closest_key(key: str, known: Collection[str]) -> str | None:
    """The known key most like ``key`` (a misspelling, another case, a missing underscore), or None."""
    candidates = sorted(str(k) for k in known)
    lowered = {k.lower().replace("-", "_"): k for k in candidates}
    normal = str(key).lower().replace("-", "_")
    if normal in lowered:
        return lowered[normal]
    close = difflib.get_close_matches(normal, list(lowered), n=1, cutoff=0.6)
    return lowered[close[0]] if close else None


def check_known_keys(
    keys: Collection[Any],
    known: Collection[str],
    *,
    namespace: str,
    source: str,
    compat: Collection[str] = (),
) -> None:
    """Raise :class:`CliUsageError` for the first of ``keys`` that is neither in ``known`` nor in ``compat``:
    ``unknown key env.grup_size in --config x.yaml; did you mean group_size?``."""
    for key in keys:
        if key in known or key in compat:
            continue
        name = f"{namespace}.{key}" if namespace else str(key)
        close = closest_key(str(key), known)
        hint = f"; did you mean {close}?" if close else f"; known keys: {', '.join(sorted(known))}"
        raise CliUsageError(f"unknown key {name} in {source}{hint}")


def env_keys_of(env_config_cls: type[BaseModel]) -> set[str]:
    """The ``env`` keys ``env_config_cls`` accepts: its fields and aliases (compatibility keys aside)."""
    return known_config_keys(env_config_cls)


def flat_env_keys_of(env_config_cls: type[BaseModel]) -> set[str]:
    """The keys a flat 0.4.0 file of ``env_config_cls`` may hold at its top level: the accepted ones and the
    0.4.0 keys ignored or refused here (which then get their reason)."""
    return (
        env_keys_of(env_config_cls)
        | set(getattr(env_config_cls, "ignored_original_keys", {}))
        | set(getattr(env_config_cls, "unsupported_original_keys", {}))
    )


# ---------------------------------------------------------------------------------------------------------
# YAML
# ---------------------------------------------------------------------------------------------------------
def load_yaml_config(
    path: str | Path | None,
    *,
    flat_env_keys: Collection[str] | None = None,
    server_sections: Collection[str] = (TEACHER_KEY,),
) -> dict[str, Any]:
    """Load the ``--config`` YAML file and check its shape; ``None`` gives ``{}``.

    Raises :class:`CliUsageError` for a missing/unreadable file, invalid YAML, a top level that is not a
    mapping, an unknown top-level key (naming the closest known one), an ``env`` section that is not a
    mapping, or an ``openai`` section that is neither a mapping nor a list of mappings.

    ``flat_env_keys`` (environments whose 0.4.0 version read flat files, e.g. the dataset environment): a file
    without an ``env`` section whose top level holds those keys is read in that flat form: those keys become
    the ``env`` section and a ``server_configs`` list the ``openai`` section.

    ``server_sections``: the top-level sections besides ``openai`` that hold inference servers (an
    environment's teacher or judge namespace, e.g. ``teacher`` or ``judge``); any other top-level key is refused.
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
    if flat_env_keys is not None and ENV_KEY not in doc and any(k in flat_env_keys for k in doc):
        doc = _unflatten(doc, flat_env_keys)
    source = f"--config {path}"
    top_level = frozenset({ENV_KEY, OPENAI_KEY, *MANAGER_KEYS, *server_sections})
    for key in doc:
        if key not in top_level:
            close = closest_key(str(key), top_level)
            hint = (
                f"; did you mean {close}?"
                if close
                else f"; the top level holds {', '.join(sorted(top_level))} (environment settings under env:)"
            )
            raise CliUsageError(f"unknown key {key} in {source}{hint}")
    env = doc.get(ENV_KEY)
    if env is not None and not isinstance(env, Mapping):
        raise CliUsageError(
            f"--config {path}: 'env' must be a mapping of field: value, got {type(env).__name__}"
        )
    for key in (OPENAI_KEY, *server_sections):
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


def _unflatten(doc: dict[str, Any], flat_env_keys: Collection[str]) -> dict[str, Any]:
    """A flat 0.4.0 dataset-environment file as sections: env fields under ``env``, ``server_configs`` as
    ``openai``; the manager keys stay; any other key is left at the top level (and refused there)."""
    out: dict[str, Any] = {}
    env: dict[str, Any] = {}
    for key, value in doc.items():
        if key == FLAT_SERVERS_KEY:
            out[OPENAI_KEY] = value
        elif key in KNOWN_TOP_LEVEL_KEYS and key != ENV_KEY:
            out[key] = value
        elif key in flat_env_keys or key in COMPAT_ENV_KEYS:
            env[key] = value
        else:
            out[key] = value
    out[ENV_KEY] = env
    return out


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
def _checked_env_section(env_config_cls: type[BaseModel], section: Mapping[str, Any], source_of: Any) -> dict:
    """``section`` with every key checked (unknown: the closest known key; a 0.4.0 key refused here: its
    reason), compatibility keys dropped and 0.4.0 names renamed to this release's fields."""
    known = env_keys_of(env_config_cls)
    unsupported = getattr(env_config_cls, "unsupported_original_keys", {})
    for key in section:
        if key in unsupported and key not in known:
            raise CliUsageError(
                f"{ENV_KEY}.{key} in {source_of(key)} is not supported here: {unsupported[key]}"
            )
        compat = {**COMPAT_ENV_KEYS, **getattr(env_config_cls, "ignored_original_keys", {})}
        check_known_keys([key], known, namespace=ENV_KEY, source=source_of(key), compat=compat)
    try:
        return rename_original_keys(env_config_cls, {k: v for k, v in section.items() if k in known})
    except ValueError as exc:
        raise CliUsageError(f"{ENV_KEY}: {exc}")


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

    A key ``env_config_cls`` does not declare (:data:`COMPAT_ENV_KEYS` aside, which are dropped) raises
    :class:`CliUsageError` naming it and the closest known key. After merging, a ``wandb_name`` of ``None``
    falls back to the env's name and, in ``process``, a ``data_path_to_save_groups`` of ``None`` to
    ``data/{name}.jsonl`` (neither ``None`` is usable in that mode). Raises :class:`CliUsageError`
    naming the field when validation fails.
    """
    yaml_env = dict(yaml_env or {})
    yaml_env = _checked_env_section(env_config_cls, yaml_env, lambda key: f"--config {yaml_path}")
    cli_env = _checked_env_section(env_config_cls, cli_env, lambda key: f"--{ENV_KEY}.{key}")
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


def _checked_server_section(section: Any, openai_cls: type[BaseModel], namespace: str, yaml_path: Any) -> Any:
    """``section`` (a mapping or a list of them) with every key checked against ``openai_cls`` and the
    compatibility keys dropped."""
    if section is None:
        return None
    known = known_config_keys(openai_cls)

    def checked(entry: Mapping[str, Any], name: str) -> dict[str, Any]:
        check_known_keys(
            entry, known, namespace=name, source=f"--config {yaml_path}", compat=COMPAT_SERVER_KEYS
        )
        return {k: v for k, v in entry.items() if k in known}

    if isinstance(section, list):
        return [checked(entry, f"{namespace}[{i}]") for i, entry in enumerate(section)]
    return checked(section, namespace)


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
    servers, and invalid values, raise :class:`CliUsageError` naming the field. A key of a YAML entry that
    ``openai_cls`` does not declare raises :class:`CliUsageError` naming the closest known one;
    :data:`COMPAT_SERVER_KEYS` are dropped.
    """
    from atroposlib.envs.server_handling.openai_server import ServerConfigError, resolve_openai_configs

    cli_values = dict(cli_values)
    yaml_section = _checked_server_section(yaml_doc.get(namespace), openai_cls, namespace, yaml_path)
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
