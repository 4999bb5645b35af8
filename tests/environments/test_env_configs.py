"""Every YAML of ``environments/configs/`` and every example configuration of atroposlib 0.4.0's environments
that exist here (``tests/fixtures/original_configs/``, in 0.4.0's own form): each key is honoured (it reaches
the resolved configuration: the environment's config, its servers, the manager) or the file is refused in one
line naming the key; none is ignored. What each honoured option does is tested with its environment
(``test_env_letter_counting.py``, ``test_env_ifeval.py``, ``test_env_pydantic_schema_following.py``,
``test_env_math.py``, ``test_env_dataset.py``)."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Any

import pytest
import yaml

from atroposlib.envs.cli import CliUsageError, parse_command
from atroposlib.envs.cli.config import ENV_KEY, MANAGER_KEYS, OPENAI_KEY, flat_env_keys_of, load_yaml_config
from atroposlib.envs.env_config import COMPAT_ENV_KEYS, COMPAT_SERVER_KEYS
from environments.dataset_environment.dataset_env import DatasetEnv
from environments.game_environments.blackjack_env import BlackjackEnv
from environments.gsm8k_server import GSM8kEnv
from environments.instruction_following_algorithm_environment import InstructionFollowingEnv
from environments.letter_counting_environment import LetterCountingEnv
from environments.math_server import MathEnv
from environments.pydantic_schema_following_environment import PydanticSchemaFollowingEnv
from tests.helpers.cli_runs import FIXTURES

ROOT = Path(__file__).resolve().parents[2]
CONFIGS = ROOT / "environments" / "configs"
ORIGINAL = FIXTURES / "original_configs"

#: (file, environment) pairs whose every key must be honoured.
HONOURED = [
    (CONFIGS / "dataset_env_gsm8k.yaml", DatasetEnv),
    (CONFIGS / "dataset_env_math.yaml", DatasetEnv),
    (CONFIGS / "dataset_env_weighted.yaml", DatasetEnv),
    (CONFIGS / "example.yaml", GSM8kEnv),
    (CONFIGS / "example.yaml", LetterCountingEnv),
    (ORIGINAL / "dataset_default.yaml", DatasetEnv),
    (ORIGINAL / "dataset_local.yaml", DatasetEnv),
    (ORIGINAL / "gsm8k.yaml", DatasetEnv),
    (ORIGINAL / "open_math_reasoning.yaml", DatasetEnv),
    (ORIGINAL / "letter_counting.yaml", LetterCountingEnv),
    (ORIGINAL / "instruction_following.yaml", InstructionFollowingEnv),
    (ORIGINAL / "pydantic_schema_editing.yaml", PydanticSchemaFollowingEnv),
    (ORIGINAL / "math_judging.yaml", MathEnv),
]
#: (file, environment, what the one-line refusal says).
REFUSED = [
    (
        ORIGINAL / "blackjack_default.yaml",
        BlackjackEnv,
        r"^unknown key tokenizer_name in --config .*blackjack",
    ),
    (
        ORIGINAL / "letter_counting_passages.yaml",
        LetterCountingEnv,
        r"^env\.use_text_passages in --config .* is not supported here: 0\.4\.0 cut passages from the OpenWebText",
    ),
]


def test_every_shipped_config_is_covered():
    shipped = {path.name for path in CONFIGS.glob("*.yaml")}
    assert shipped and shipped <= {path.name for path, _ in HONOURED if path.parent == CONFIGS}
    originals = {path.name for path in ORIGINAL.glob("*.yaml")}
    assert originals == {p.name for p, _ in HONOURED if p.parent == ORIGINAL} | {p.name for p, *_ in REFUSED}


def _plain(value: Any) -> Any:
    return value.value if isinstance(value, Enum) else value


def _servers(configs: Any) -> list[Any]:
    return configs if isinstance(configs, list) else [configs]


@pytest.mark.parametrize(
    ("path", "env_cls"), HONOURED, ids=lambda v: getattr(v, "name", getattr(v, "__name__", v))
)
def test_every_key_is_honoured(path, env_cls):
    config_cls = env_cls.env_config_cls
    flat = flat_env_keys_of(config_cls) if getattr(env_cls, "flat_config_form", False) else None
    doc = load_yaml_config(path, flat_env_keys=flat)
    run = parse_command(env_cls, ["evaluate", "--config", str(path)]).resolve()
    ignored = {**COMPAT_ENV_KEYS, **config_cls.ignored_original_keys}
    for key, value in (doc.get(ENV_KEY) or {}).items():
        if key in ignored:
            assert ignored[key], key  # accepted without effect only with a documented reason
            continue
        field = config_cls.original_key_aliases.get(key, key)
        assert _plain(getattr(run.env_config, field)) == value, (path.name, key)
    entries = doc.get(OPENAI_KEY) or []
    entries = entries if isinstance(entries, list) else [entries]
    servers = _servers(run.server_configs)
    for entry, server in zip(entries, servers, strict=False):
        for key, value in entry.items():
            if key in COMPAT_SERVER_KEYS:
                assert COMPAT_SERVER_KEYS[key]
                continue
            assert getattr(server, key) == value, (path.name, key)
    for key in MANAGER_KEYS:
        if key in doc:
            assert getattr(run.manager_config, key) == doc[key], (path.name, key)


@pytest.mark.parametrize(("path", "env_cls", "message"), REFUSED, ids=lambda v: getattr(v, "name", None))
@pytest.mark.parametrize("mode", ["serve", "process", "evaluate"])
def test_unsupported_files_are_refused_in_one_line(path, env_cls, message, mode):
    with pytest.raises(CliUsageError, match=message) as refused:
        parse_command(env_cls, [mode, "--config", str(path)]).resolve()
    assert "\n" not in str(refused.value)


def test_a_misspelled_key_in_a_shipped_config_names_the_closest_key(tmp_path):
    doc = yaml.safe_load((CONFIGS / "dataset_env_gsm8k.yaml").read_text())
    doc["env"]["promt_field"] = doc["env"].pop("prompt_field")
    bad = tmp_path / "typo.yaml"
    bad.write_text(yaml.safe_dump(doc))
    with pytest.raises(CliUsageError) as refused:
        parse_command(DatasetEnv, ["process", "--config", str(bad)]).resolve()
    assert str(refused.value) == f"unknown key env.promt_field in --config {bad}; did you mean prompt_field?"


def test_an_original_group_of_one_is_refused_for_training_but_evaluates():
    path = ORIGINAL / "dataset_default.yaml"
    assert parse_command(DatasetEnv, ["evaluate", "--config", str(path)]).resolve().env_config.group_size == 1
    with pytest.raises(CliUsageError, match="group_size 1"):
        parse_command(DatasetEnv, ["process", "--config", str(path)]).resolve()
