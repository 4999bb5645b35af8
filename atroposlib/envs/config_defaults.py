"""An environment's ``config_init`` defaults: its own config and one inference server on ``localhost``.

:func:`local_server_config` is the inference-server default an environment's ``config_init`` returns: an
OpenAI-compatible server on ``localhost``. :class:`LocalServerDefaults` (placed before
:class:`~atroposlib.envs.base.BaseEnv` in an environment's bases) builds ``config_init`` from it and the
environment's own config defaults, so an environment states only the values that differ.
"""

from __future__ import annotations

from typing import Any, ClassVar, Optional

from atroposlib.envs.base import APIServerConfig, BaseEnvConfig


def local_server_config(model_name: str, port: int, **settings: Any) -> APIServerConfig:
    """``APIServerConfig`` for ``model_name`` served at ``http://localhost:{port}/v1`` (api key ``x``,
    256 concurrent evaluation requests); ``settings`` are further ``APIServerConfig`` fields and override
    those two."""
    return APIServerConfig(
        **{"api_key": "x", "num_requests_for_eval": 256, **settings},
        model_name=model_name,
        base_url=f"http://localhost:{port}/v1",
    )


class LocalServerDefaults:
    """``config_init()`` of an environment trained against one inference server on ``localhost``.

    It returns :meth:`default_env_config`, its ``wandb_name`` set to the environment's ``name`` when left
    unset, and :meth:`default_server_config`: :func:`local_server_config` of :attr:`default_model` on
    :attr:`default_server_port` with :attr:`default_server_settings`. An environment
    overrides :meth:`default_env_config` when its defaults differ from those of its ``env_config_cls``,
    and these attributes when its server does.
    """

    name: ClassVar[Optional[str]]
    env_config_cls: ClassVar[type[BaseEnvConfig]]
    #: the model the default inference server serves
    default_model: ClassVar[str] = "NousResearch/DeepHermes-3-Llama-3-8B-Preview"
    #: the localhost port of the default inference server
    default_server_port: ClassVar[int] = 9001
    #: further ``APIServerConfig`` fields of the default inference server
    default_server_settings: ClassVar[dict[str, Any]] = {}

    @classmethod
    def default_env_config(cls) -> BaseEnvConfig:
        """The environment config ``config_init`` starts from (default: ``env_config_cls()``)."""
        return cls.env_config_cls()

    @classmethod
    def default_server_config(cls) -> APIServerConfig:
        """The inference server ``config_init`` names (see the class docstring)."""
        return local_server_config(cls.default_model, cls.default_server_port, **cls.default_server_settings)

    @classmethod
    def config_init(cls) -> tuple[BaseEnvConfig, APIServerConfig]:
        """``(environment config, inference server)`` (see the class docstring)."""
        env_config = cls.default_env_config()
        if env_config.wandb_name is None:
            env_config.wandb_name = cls.name
        return env_config, cls.default_server_config()
