"""``OpenAIServer`` (any OpenAI-compatible endpoint) and ``resolve_openai_configs``.

``OpenAIServer`` serves chat and text completions only; token ids and logprobs are not available
from a generic OpenAI endpoint, so ``ManagedServer`` needs the ``vllm`` or ``sglang`` server types
(``DummyManagedServer`` is the opt-in placeholder). Its health check lists ``/models`` instead of
spending a completion every second.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from typing import Any, Optional, Union

from pydantic import ValidationError

from atroposlib.envs.server_handling.openai_compat import OpenAICompatibleServer
from atroposlib.envs.server_handling.server_baseline import (  # noqa: F401  (re-exported)
    APIServer,
    APIServerConfig,
    ReasoningConfig,
    ServerBaseline,
)

OPENAI_NAMESPACE = "openai"
NAMESPACE_SEP = "."


class OpenAIServer(OpenAICompatibleServer):
    """Client for an OpenAI-compatible API (OpenAI, OpenRouter, a plain ``vllm serve`` ...)."""

    async def _tokens_and_logprobs_completion_wrapper(self, **kwargs) -> tuple[list, list, list, list]:
        raise NotImplementedError(
            "OpenAIServer cannot return token ids and logprobs; use server_type 'vllm' or 'sglang' "
            "for tokens_and_logprobs_completion / ManagedServer."
        )


class ServerConfigError(ValueError):
    """The inference-server configuration from defaults/YAML/CLI cannot be resolved.

    ``exit_code`` is the process exit status a CLI should use (2, like an argparse error).
    """

    exit_code = 2


def _single_config(config: Any) -> dict[str, Any]:
    return config.model_dump() if hasattr(config, "model_dump") else dict(config)


def resolve_openai_configs(
    default_server_configs: Union[ServerBaseline, APIServerConfig, list[APIServerConfig], None],
    openai_config_dict: Optional[Mapping[str, Any]],
    yaml_config: Optional[Mapping[str, Any]],
    cli_passed_flags: Optional[Mapping[str, Any]],
    logger: Optional[logging.Logger] = None,
) -> Union[ServerBaseline, APIServerConfig, list[APIServerConfig]]:
    """Decide the server configs of an environment from ``config_init()``, YAML and CLI flags.

    Args:
        default_server_configs: the second value returned by ``config_init()``.
        openai_config_dict: the merged single-server settings (default dump <- YAML ``openai`` <- CLI).
        yaml_config: the whole YAML document (``{}`` when there is none).
        cli_passed_flags: the CLI flags, keys still prefixed (``"openai.base_url"``).
        logger: where to log the decision (module logger by default).

    Returns, by situation:

    * YAML ``openai:`` is a list of >= 2 mappings -> ``[APIServerConfig(**d), ...]``;
    * the default is a list of >= 2 configs -> the defaults unchanged;
    * the default is a single ``APIServerConfig`` -> ``APIServerConfig(**merged)`` (one object;
      ``ServerManager`` uses a single config as given);
    * the default is a plain ``ServerBaseline`` -> unchanged when nothing overrides it; with YAML or
      CLI ``openai`` settings it becomes ``APIServerConfig(**baseline <- YAML <- CLI)``, in every
      command;
    * anything else (a list of one, None) -> ``[APIServerConfig(**merged)]``.

    compat: the table is atroposlib 0.4.0's, except that it ignored overrides of a ``ServerBaseline``
    outside ``serve``.

    Raises:
        ServerConfigError: ``--openai.*`` flags combined with several servers, or invalid settings
            (the message names the offending field).
    """
    log = logger or logging.getLogger(__name__)
    yaml_openai = (yaml_config or {}).get(OPENAI_NAMESPACE)
    cli_openai = _cli_openai_flags(cli_passed_flags or {})
    multi_yaml = isinstance(yaml_openai, list) and len(yaml_openai) >= 2
    multi_default = (
        not multi_yaml and isinstance(default_server_configs, list) and len(default_server_configs) >= 2
    )
    if (multi_yaml or multi_default) and cli_openai:
        _refuse_flags_with_several_servers(cli_openai)
    if multi_yaml:
        return _configs_from_yaml_list(yaml_openai, log)
    if isinstance(default_server_configs, ServerBaseline) and not isinstance(
        default_server_configs, APIServerConfig
    ):
        return _from_baseline(default_server_configs, yaml_openai, cli_openai, log)
    if multi_default:
        log.info("Using the %d servers from config_init().", len(default_server_configs))
        return default_server_configs
    return _single_server(default_server_configs, openai_config_dict, log)


_PREFIX = f"{OPENAI_NAMESPACE}{NAMESPACE_SEP}"


def _cli_openai_flags(cli_passed_flags: Mapping[str, Any]) -> dict[str, Any]:
    """The ``--openai.*`` flags, without their prefix."""
    return {k[len(_PREFIX) :]: v for k, v in cli_passed_flags.items() if k.startswith(_PREFIX)}


def _refuse_flags_with_several_servers(cli_openai: Mapping[str, Any]) -> None:
    flags = ", ".join("--" + _PREFIX + k for k in sorted(cli_openai))
    raise ServerConfigError(
        f"--{_PREFIX}* flags ({flags}) cannot be used when several servers are configured (a list under "
        f"'{OPENAI_NAMESPACE}' in YAML or in config_init); edit the YAML list instead"
    )


def _configs_from_yaml_list(yaml_openai: list, log: logging.Logger) -> list[APIServerConfig]:
    log.info("Using the %d servers listed under '%s' in the YAML config.", len(yaml_openai), OPENAI_NAMESPACE)
    configs = []
    for i, entry in enumerate(yaml_openai):
        if not isinstance(entry, Mapping):
            raise ServerConfigError(
                f"YAML {OPENAI_NAMESPACE}[{i}] must be a mapping, got {type(entry).__name__}"
            )
        configs.append(_build(entry, f"YAML {OPENAI_NAMESPACE}[{i}]"))
    return configs


def _from_baseline(
    baseline: ServerBaseline, yaml_openai: Any, cli_openai: Mapping[str, Any], log: logging.Logger
) -> Union[ServerBaseline, APIServerConfig]:
    """A plain ``ServerBaseline``, or one ``APIServerConfig`` when YAML or CLI settings override it."""
    yaml_single = _yaml_single(yaml_openai)
    if not yaml_single and not cli_openai:
        log.info("Using ServerBaseline configuration (server discovery).")
        return baseline
    log.info("ServerBaseline overridden by openai settings from YAML/CLI; using one APIServerConfig.")
    return _build({**baseline.model_dump(), **yaml_single, **cli_openai}, "openai settings")


def _single_server(
    default_server_configs: Any, openai_config_dict: Optional[Mapping[str, Any]], log: logging.Logger
) -> Union[APIServerConfig, list[APIServerConfig]]:
    """One server from the merged settings: as an object for a single default config, else in a list."""
    final = _build(dict(openai_config_dict or {}), "openai settings")
    if isinstance(default_server_configs, APIServerConfig):
        log.info("Using one server: %s", final.base_url or "(default OpenAI URL)")
        return final
    if not isinstance(default_server_configs, list):
        log.warning(
            "Unexpected server config type %s from config_init(); using one server from the merged settings.",
            type(default_server_configs).__name__,
        )
    return [final]


def _yaml_single(yaml_openai: Any) -> dict[str, Any]:
    if isinstance(yaml_openai, Mapping):
        return dict(yaml_openai)
    if isinstance(yaml_openai, list) and len(yaml_openai) == 1 and isinstance(yaml_openai[0], Mapping):
        return dict(yaml_openai[0])
    return {}


def _build(values: Mapping[str, Any], where: str) -> APIServerConfig:
    try:
        return APIServerConfig(**dict(values))
    except ValidationError as exc:
        first = exc.errors()[0]
        field = ".".join(str(p) for p in first.get("loc", ())) or "?"
        raise ServerConfigError(
            f"{where}: invalid value for {OPENAI_NAMESPACE}.{field}: {first.get('msg')} "
            f"(got {first.get('input')!r})"
        ) from exc
