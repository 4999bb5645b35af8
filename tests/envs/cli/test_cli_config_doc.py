"""CONFIG.md's "Environment config and CLI" section lists every flag with the default the code really has."""

from __future__ import annotations

import re

import pytest
from pydantic_core import PydanticUndefined

from atroposlib.envs.base import APIServerConfig, BaseEnvConfig
from atroposlib.envs.cli.values import format_default
from atroposlib.envs.server_handling.server_manager import ServerManagerConfig
from environments.arithmetic_server import ArithmeticEnvConfig
from environments.gsm8k_server import GSM8kEnvConfig
from tests.helpers.cli_runs import REPO_ROOT


def _section() -> str:
    text = (REPO_ROOT / "CONFIG.md").read_text()
    start = text.index("## Environment config and CLI")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else None]


def _documented_defaults() -> dict[str, str]:
    rows = re.findall(r"^\| `--([\w.]+)` \| [^|]* \| `([^`]*)` \|", _section(), flags=re.MULTILINE)
    return dict(rows)


def _default(info) -> object:
    return info.default if info.default is not PydanticUndefined else info.default_factory()


MODELS = [
    (BaseEnvConfig, "env.", None),
    (APIServerConfig, "openai.", None),
    (ServerManagerConfig, "", None),
    (GSM8kEnvConfig, "env.", set(GSM8kEnvConfig.model_fields) - set(BaseEnvConfig.model_fields)),
    (ArithmeticEnvConfig, "env.", set(ArithmeticEnvConfig.model_fields) - set(BaseEnvConfig.model_fields)),
]


@pytest.mark.parametrize(("model", "prefix", "only"), MODELS, ids=[m[0].__name__ for m in MODELS])
def test_every_field_is_documented_with_its_real_default(model, prefix, only):
    documented = _documented_defaults()
    for name, info in model.model_fields.items():
        if only is not None and name not in only:
            continue
        flag = f"{prefix}{name}"
        assert flag in documented, f"--{flag} is missing from CONFIG.md"
        expected = format_default(_default(info))
        assert documented[flag] == (expected if expected != "" else '""'), flag
