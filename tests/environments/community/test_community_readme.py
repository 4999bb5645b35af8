"""Every command of ``environments/community/README.md`` runs as written against the scripted inference server.

The commands are read from the "Shipped" table's last column; each runs from the repository root with what the
README says a user adds (``--openai.base_url`` / ``--openai.model_name``), the tiny local tokenizer, an output
path in the test's directory and one group. Every row of the README names an environment of the original's
collection, shipped or not, and every shipped folder here has a row.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import importlib.util
import os
import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import tomllib

from atroposlib.testing.scripted_server import launch_scripted_server
from tests.helpers.cli_runs import REPO_ROOT, read_jsonl, run_env
from tests.helpers.single_turn_runs import OFFLINE

COMMUNITY = REPO_ROOT / "environments" / "community"
README = COMMUNITY / "README.md"
_COMMAND = re.compile(r"`(python environments/community/[^`]+)`\s*\|\s*$")
#: the original's collection (atroposlib 0.4.0)
ORIGINAL = {
    "accessibility_env", "bleuberi", "cat_behavior_env", "conversational_style_dpo", "cybersecurity_sigma",
    "deepsacrifice_chess", "dynastai", "ethereum_virtual_machine", "examcraft", "goofy_math", "helpful_doctors",
    "humor_generation", "lean_proof_env", "mcp_tool_calling", "meteorology_forecast", "metric_card_generator",
    "openvla_robotics", "options_iv_prediction", "padres_spatial", "pay_to_play", "philosophical_rlaif_env.py",
    "physical_space_stl", "playwright_agent_env.py", "pokemon-showdown", "poker_holdem", "protein_design",
    "punchline_vrcli", "pytorch_optimizer_coding", "quantum_hybrid", "regex_generation", "router_env",
    "sanskrit_poetry", "selcube", "solitaire_winning_probability", "sql_query_env", "starmap_compression",
    "tutor_rl_agent", "ufc_prediction_env", "wikipedia_research", "word_hunt", "xitter_env",
}  # fmt: skip


def readme_commands() -> list[str]:
    return [m.group(1) for line in README.read_text().splitlines() if (m := _COMMAND.search(line))]


def _row_names() -> list[str]:
    rows = [line for line in README.read_text().splitlines() if line.startswith("| `")]
    return [line.split("`")[1].rstrip("/").split("/")[0] for line in rows]


def _command_folders() -> list[str]:
    return [shlex.split(c)[1].split("/")[2] for c in readme_commands()]


def _test_module(name: str) -> Any:
    path = Path(__file__).with_name(f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"community_readme_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _responder(script: str) -> Callable[[Any, int], str]:
    folder = script.split("/")[2]
    if script.endswith("ufc_prediction_env/ufc_image_env.py"):  # the second file of its folder
        return _test_module("test_ufc_image_env")._responder
    if folder == "sql_query_env":
        return _test_module("test_env_sql_query")._responder()
    if folder == "regex_generation":
        return _test_module("test_env_regex_generation")._responder()
    if folder == "accessibility_env":
        return _test_module("test_env_accessibility")._fixer
    if folder == "options_iv_prediction":
        return _test_module("test_env_options_iv")._analyst
    if folder == "sanskrit_poetry":
        return _test_module("test_env_sanskrit_poetry")._poet
    if folder == "solitaire_winning_probability":
        return _test_module("test_env_solitaire")._responder()
    if folder == "goofy_math":
        return _test_module("test_goofy_math")._readme_responder
    if folder == "humor_generation":
        return _test_module("test_humor_generation")._readme_responder
    if folder == "helpful_doctors":
        return _test_module("test_helpful_doctors").doctor_and_patient()
    if folder == "philosophical_rlaif_env.py":
        return _test_module("test_philosophical_rlaif")._readme_responder
    if folder == "poker_holdem":
        return _test_module("test_poker_holdem")._responder
    if folder == "metric_card_generator":
        return _test_module("test_metric_card_generator")._responder
    if folder == "starmap_compression":
        return _test_module("test_starmap_compression")._responder
    if folder == "selcube":
        return _test_module("test_selcube").solver(spoil_every=2)
    if folder == "cybersecurity_sigma":
        return _test_module("test_cybersecurity_sigma")._responder
    if folder == "cat_behavior_env":
        return _test_module("test_cat_behavior_env").cat_caretaker_and_judge()
    if folder == "bleuberi":
        return _test_module("test_bleuberi")._responder
    if folder == "deepsacrifice_chess":
        return _test_module("test_deepsacrifice_chess")._responder
    if folder == "tutor_rl_agent":
        return _test_module("test_tutor_rl_agent").tutor(spoil_every=2)
    if folder == "mcp_tool_calling":
        return _test_module("test_mcp_tool_calling")._responder
    if folder == "examcraft":
        return _test_module("test_examcraft").teacher("statistics", spoil=True)
    if folder == "ufc_prediction_env":
        return _test_module("test_ufc_prediction_env")._responder
    if folder == "pokemon-showdown":
        return _test_module("test_pokemon_showdown").readme_responder()
    if folder == "conversational_style_dpo":
        return _test_module("test_conversational_style_dpo")._readme_responder
    if folder == "ethereum_virtual_machine":
        return _test_module("test_ethereum_virtual_machine").readme_responder()
    if folder == "punchline_vrcli":
        return _test_module("test_punchline_vrcli")._responder
    if folder == "quantum_hybrid":
        return _test_module("test_quantum_hybrid")._responder
    if folder == "xitter_env":
        return _test_module("test_xitter_env")._responder
    if folder == "pytorch_optimizer_coding":
        return _test_module("test_pytorch_optimizer_coding")._responder
    if folder == "padres_spatial":
        return _test_module("test_padres_spatial")._responder
    if folder == "word_hunt":
        hunt = _test_module("test_env_word_hunt")
        return hunt._responder(hunt.Dictionary.load(hunt.DEFAULT_DICTIONARY, 3, 16))
    pytest.fail(
        f"environments/community/README.md runs {folder}, which {Path(__file__).name} has no responder for"
    )


def test_every_original_environment_has_one_row():
    names = _row_names()
    assert sorted(set(names)) == sorted(ORIGINAL) and len(set(names)) == 41
    # a folder has one row per environment file it ships (ufc_prediction_env: the text and image variants)
    assert len(names) - len(set(names)) == len(readme_commands()) - len(set(_command_folders()))
    shipped = {p.name for p in COMMUNITY.iterdir() if p.is_dir() and not p.name.startswith("_")} - {
        "__pycache__"
    }
    shipped |= {p.name for p in COMMUNITY.glob("*.py") if p.name != "__init__.py"}  # single-file originals
    commands = set(_command_folders())
    assert shipped == commands and all(shlex.split(c)[2] == "process" for c in readme_commands())


@pytest.mark.parametrize("command", readme_commands(), ids=lambda c: shlex.split(c)[1].split("/")[2])
def test_readme_command_runs_as_written(command, tiny_model_dir, tmp_path):
    words = shlex.split(command)
    script, args = words[1], words[3:]
    out = tmp_path / "groups.jsonl"
    respond, stop_services = _responder(script), None
    if isinstance(respond, tuple):  # a stand-in for a service the command names by address, stopped after it
        respond, stop_services = respond
    with contextlib.ExitStack() as stack:
        if stop_services is not None:
            stack.callback(stop_services)
        server = stack.enter_context(launch_scripted_server(respond=respond, tokenizer=tiny_model_dir))
        result = run_env(
            REPO_ROOT / script,
            ["process", *args, "--openai.base_url", server.base_url, "--openai.model_name", "scripted-model",
             "--env.tokenizer_name", tiny_model_dir, "--env.use_wandb", "false", "--env.total_steps", "1",
             "--env.group_size", "2", "--env.data_path_to_save_groups", out],
            cwd=REPO_ROOT,
            env={**os.environ, **OFFLINE},
        )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    groups = read_jsonl(out)
    assert len(groups) == 1 and len(set(groups[0]["scores"])) > 1
    for tokens, masks in zip(groups[0]["tokens"], groups[0]["masks"], strict=True):
        assert len(tokens) == len(masks) and any(m != -100 for m in masks) and masks[0] == -100


def test_the_community_extra_is_part_of_all():
    extras = tomllib.loads((REPO_ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "community" in extras["all"][0] and extras["community"]
    for requirement in extras["community"]:
        name = re.split(r"[<>=!; \[]", requirement, maxsplit=1)[0]
        assert importlib.metadata.version(name)  # installed by scripts/install.sh (.[all])
