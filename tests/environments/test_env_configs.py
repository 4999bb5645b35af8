"""Every YAML of ``environments/configs/`` and every example configuration of atroposlib 0.4.0's environments
that exist here (``tests/fixtures/original_configs/``, in 0.4.0's own form): each key is honoured (it reaches
the resolved configuration: the environment's config, its servers, the manager) or the file is refused in one
line naming the key; none is ignored. What each honoured option does is tested with its environment
(``test_env_letter_counting.py``, ``test_env_ifeval.py``, ``test_env_pydantic_schema_following.py``,
``test_env_math.py``, ``test_env_dataset.py``, ``test_env_text_reversal.py``, ``test_env_tool_calling.py``,
``test_env_answer_format.py``, ``test_env_code_execution.py``). :data:`ORIGINAL_KEYS` lists the keys 0.4.0's
config classes of further environments declared: each has exactly one place here."""

from __future__ import annotations

from enum import Enum
from pathlib import Path
from typing import Any

import pytest
import yaml

from atroposlib.envs.base import APIServerConfig
from atroposlib.envs.cli import CliUsageError, parse_command
from atroposlib.envs.cli.config import ENV_KEY, MANAGER_KEYS, OPENAI_KEY, flat_env_keys_of, load_yaml_config
from atroposlib.envs.env_config import COMPAT_ENV_KEYS, COMPAT_SERVER_KEYS
from environments.answer_format_environment import AnswerFormatEnv
from environments.code_execution_server import CodingEnv
from environments.dataset_environment.dataset_env import DatasetEnv
from environments.game_environments.blackjack_env import BlackjackEnv
from environments.game_environments.blackjack_env_thinking import BlackjackThinkingEnv
from environments.game_environments.textworld_env import TextWorldEnv
from environments.gsm8k_server import GSM8kEnv
from environments.instruction_following_algorithm_environment import InstructionFollowingEnv
from environments.letter_counting_environment import LetterCountingEnv
from environments.math_server import MathEnv
from environments.pydantic_schema_following_environment import PydanticSchemaFollowingEnv
from environments.text_reversal_environment import TextReversalEnv
from environments.tool_calling_server import ToolCallingEnv
from environments.tool_use_multiturn_server import MultiTurnToolCallingEnv
from environments.tool_use_turnlevel_advantage_server import MultiTurnToolUseTurnLevelAdvantageEnv
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


# -- the original keys of the other environments (each honoured, aliased, accepted with a reason or refused) --
#: (environment, 0.4.0 config keys that environment's config class declared). Each must be declared here, an
#: alias, accepted with its reason or refused with its reason; the environment's own test file shows the
#: effect of each honoured key.
ORIGINAL_KEYS = [
    (TextReversalEnv, ["use_thinking", "dataset_name", "eval_dataset_name", "test_set_size",
                       "max_train_token_length", "max_eval_token_length"]),
    (ToolCallingEnv, ["dataset", "max_eval_samples", "eval_sample_seed"]),
    (AnswerFormatEnv, ["dataset", "max_eval_samples", "eval_sample_seed", "dataset_configs", "debug_logging",
                       "suppress_base_env_logs", "dump_rollouts", "dump_failed_rollouts",
                       "rollout_save_score_threshold", "eval_set_percentage", "supported_formats",
                       "ensure_equivalent_ratios", "format_group_threshold", "seed"]),
    (CodingEnv, ["dataset_name", "max_test_cases_to_log", "system_prompt"]),
    (MultiTurnToolCallingEnv, ["max_tool_call_turns_cap", "validate_think_blocks", "generate_all_gpt_turns",
                               "max_gen_per_turn", "wrong_call_penalty", "skip_completed",
                               "scenario_category", "add_dynamic_few_shot"]),
    (MultiTurnToolUseTurnLevelAdvantageEnv, ["max_tool_call_turns_cap", "validate_think_blocks",
                                             "generate_all_gpt_turns", "max_gen_per_turn", "wrong_call_penalty",
                                             "skip_completed", "scenario_category", "add_dynamic_few_shot",
                                             "use_parallel_requests", "turn_level_advantage_lambda"]),
    (BlackjackEnv, ["env_name", "max_episode_turns", "eval_episodes"]),
    (BlackjackThinkingEnv, ["env_name", "temperature", "top_p", "max_turns", "thinking_active", "eval_episodes",
                            "max_think_chars_history", "max_trajectory_tokens", "debug_mode", "group_size",
                            "tiebreak_token_factor"]),
    (TextWorldEnv, ["env_name", "max_steps", "challenge_name", "challenge_rewards", "challenge_goal",
                    "challenge_test_mode", "nb_rooms", "nb_objects", "quest_min_length", "quest_max_length",
                    "quest_max_depth", "grammar_theme", "grammar_include_adj", "game_seed", "max_token_length",
                    "max_trajectory_tokens", "agent_config", "rm_config", "G_policy_alternatives",
                    "G_rm_judgements", "rm_reward_discount_factor", "debug_mode", "game_generation_params",
                    "game_file_path", "default_server_config", "policy_agent_server_config",
                    "rm_agent_server_config", "atropos_agent_config", "atropos_rm_config", "vrcli_enabled",
                    "vrcli_weight", "vrcli_discount_factor", "enable_policy_thinking_summarization",
                    "max_policy_thinking_summary_tokens", "use_registry", "registry_mode",
                    "registry_generation_ratio", "registry_difficulty", "registry_game_type"]),
]  # fmt: skip


@pytest.mark.parametrize(("env_cls", "keys"), ORIGINAL_KEYS, ids=lambda v: getattr(v, "__name__", None))
def test_every_original_key_has_a_place(env_cls, keys):
    config_cls = env_cls.env_config_cls
    for key in keys:
        placed = [
            key in config_cls.model_fields,
            key in config_cls.original_key_aliases,
            bool(config_cls.ignored_original_keys.get(key)),
            bool(config_cls.unsupported_original_keys.get(key)),
        ]
        assert sum(placed) == 1, (env_cls.__name__, key, placed)


@pytest.mark.parametrize(("env_cls", "keys"), ORIGINAL_KEYS, ids=lambda v: getattr(v, "__name__", None))
@pytest.mark.parametrize("mode", ["process", "evaluate"])
def test_refused_original_keys_name_their_reason_in_one_line(env_cls, keys, mode, tmp_path):
    refused = [key for key in keys if key in env_cls.env_config_cls.unsupported_original_keys]
    for key in refused:
        path = tmp_path / f"{key}.yaml"
        path.write_text(yaml.safe_dump({"env": {key: True}}))
        with pytest.raises(
            CliUsageError, match=rf"^env\.{key} in --config .* is not supported here: "
        ) as caught:
            parse_command(env_cls, [mode, "--config", str(path)]).resolve()
        assert "\n" not in str(caught.value)


@pytest.mark.parametrize(
    ("env_cls", "extra"),
    [
        (MultiTurnToolCallingEnv, ""),
        (
            MultiTurnToolUseTurnLevelAdvantageEnv,
            "  use_parallel_requests: true\n  turn_level_advantage_lambda: 1.0\n",
        ),
    ],
    ids=["multiturn", "turnlevel"],
)
def test_original_tool_use_keys_set_the_turn_budget(env_cls, extra, tmp_path, tiny_model_dir):
    path = tmp_path / "tool_use.yaml"
    path.write_text(f"env:\n  tokenizer_name: {tiny_model_dir}\n  max_gen_per_turn: 300\n{extra}")
    config = parse_command(env_cls, ["evaluate", "--config", str(path)]).resolve().env_config
    server = APIServerConfig(base_url="http://127.0.0.1:9/v1", model_name="m", server_type="vllm")
    assert env_cls(config, server, slurm=False, testing=True).generation_budget == 300
