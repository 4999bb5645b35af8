"""Config defaults declared as values: an environment states its defaults as a class attribute.

:class:`DeclaredDefaults` is a :class:`~atroposlib.envs.config_defaults.LocalServerDefaults` whose
:meth:`~DeclaredDefaults.default_env_config` is built from :attr:`DeclaredDefaults.default_env_values` (the
fields of ``env_config_cls`` that differ from its own defaults) and ``tokenizer_name`` set to
``default_model``, so an environment lists values instead of writing a constructor call.
"""

from __future__ import annotations

from typing import Any, ClassVar

from atroposlib.envs.base import BaseEnvConfig
from atroposlib.envs.config_defaults import LocalServerDefaults


class DeclaredDefaults(LocalServerDefaults):
    """``config_init()`` from declared values (placed before the environment base in its bases).

    ``default_env_config()`` returns ``env_config_cls(tokenizer_name=default_model, **default_env_values)``;
    a ``tokenizer_name`` in :attr:`default_env_values` wins over ``default_model``.
    """

    #: the fields of ``env_config_cls`` whose defaults this environment changes
    default_env_values: ClassVar[dict[str, Any]] = {}

    @classmethod
    def default_env_config(cls) -> BaseEnvConfig:
        """``env_config_cls`` with ``tokenizer_name=default_model`` and :attr:`default_env_values`."""
        return cls.env_config_cls(**{"tokenizer_name": cls.default_model, **cls.default_env_values})
