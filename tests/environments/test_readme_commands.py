"""Every command of ``environments/README.md`` runs as written against the scripted inference server.

The commands are read from the README's table (its last column), so the test follows the documentation.
Each runs as a subprocess from the repository root with only what the README itself says a user adds
(``--openai.base_url`` and ``--openai.model_name`` of their server; other servers a command names, such as
a teacher's, point at the same scripted server), plus the tiny local tokenizer, an
output path in the test's directory and one group. The server type stays whatever the environment's
defaults say: for most that is an OpenAI-type chat endpoint, which ``process`` must accept (tokens are
then computed from the messages).

A README row needs a responder here (answers of differing quality, so groups carry a learning signal);
a row without one fails with a line that says so.
"""

from __future__ import annotations

import asyncio
import importlib.util
import inspect
import itertools
import json
import os
import re
import shlex
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from atroposlib.testing.scripted_server import launch_scripted_server
from tests.helpers.cli_runs import (
    FIXTURES,
    REPO_ROOT,
    arithmetic_responder,
    gsm8k_responder,
    read_jsonl,
    run_env,
)
from tests.helpers.multi_turn_runs import episode_responder, take_action, tool_call
from tests.helpers.single_turn_runs import OFFLINE
from tests.helpers.tool_replay import replayer

README = REPO_ROOT / "environments" / "README.md"
_COMMAND = re.compile(r"`((?:[A-Z_]+=\S+ )*python environments/[^`]+)`\s*\|\s*$")


def readme_commands() -> list[str]:
    """The command column of every table row of the README."""
    return [m.group(1) for line in README.read_text().splitlines() if (m := _COMMAND.search(line))]


def _test_module(name: str) -> Any:
    """A sibling test module, loaded by path (its responders are reused)."""
    path = Path(__file__).with_name(f"{name}.py")
    spec = importlib.util.spec_from_file_location(f"readme_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _games(script_for: Callable[[int], list[str]]) -> Callable[[Any, int], str]:
    """Episode ``k`` plays ``script_for(k)``: valid moves and invalid replies alternate across episodes."""
    return episode_responder([script_for(0), script_for(1)])


def _tool_use_responder() -> Callable[[Any, int], str]:
    """Each episode calls the calculator, then boxes the gold answer (even episodes) or a wrong one (odd)."""
    rows = read_jsonl(FIXTURES / "tool_use_sample.jsonl")
    golds = {row["question"]: float(row["answer"].split("####")[-1].strip().replace(",", "")) for row in rows}
    counter = itertools.count()

    def respond(prompt: Any, index: int) -> str:
        text = json.dumps(prompt) if isinstance(prompt, list) else str(prompt)
        found = re.search(r"<think>episode (\d+)</think>", text)
        if found is None:
            episode = next(counter)
            return f"<think>episode {episode}</think>" + tool_call("calculator", expression="1 + 1")
        gold = next((g for q, g in golds.items() if q in text), 0.0)
        return f"The answer is \\boxed{{{gold + int(found.group(1)) % 2:g}}}."

    return respond


def _responder(script: str, args: list[str], tiny_model_dir: Path) -> Callable[[Any, int], str]:
    name = script.removeprefix("environments/")
    gsm8k_like = ("gsm8k_server.py", "gsm8k_server_teacher_distill.py", "gsm8k_server_axolotl.py")
    if name in gsm8k_like or name == "dataset_environment/dataset_env.py":
        return gsm8k_responder()
    if name in ("arithmetic_server.py", "arithmetic_server_teacher_distill.py"):
        return arithmetic_responder()
    if name == "math_server.py":
        return _test_module("test_env_math").alternating_responder
    if name == "math_server_zero.py":
        return _test_module("test_env_math_zero").alternating_responder
    if name == "mcqa_thinking_env.py":
        return _test_module("test_env_mcqa").alternating_responder
    if name == "tool_calling_server.py":
        return _test_module("test_env_tool_calling").mixed_responder
    if name == "code_execution_server.py":
        return _test_module("test_env_code_execution").mixed_responder
    if name == "fundamental_prediction_environment.py":
        return _test_module("test_env_fundamentals").group_responder
    if name == "instruction_following_algorithm_environment.py":
        return _test_module("test_env_ifeval").good_or_bad
    single = {
        "letter_counting_environment.py": "test_env_letter_counting",
        "text_reversal_environment.py": "test_env_text_reversal",
        "pydantic_schema_following_environment.py": "test_env_pydantic_schema_following",
        "answer_format_environment.py": "test_env_answer_format",
    }
    if name in single:
        return _test_module(single[name])._responder()
    if name == "reasoning_gym_environment.py":
        tasks = json.loads(args[args.index("--env.tasks") + 1])
        return _test_module("test_env_reasoning_gym")._responder(tiny_model_dir, tasks=tasks)
    if name == "rlaif_server.py":
        rlaif = _test_module("test_env_rlaif")
        return rlaif.judge_responder(rlaif.prefers_kind)
    if name == "multimodal_counting_server.py":
        counting = _test_module("test_env_multimodal_counting")
        return counting.answering_responder(counting.CountingEnvConfig(), range(0, 50))
    if name.startswith("multimodal_dpo/"):
        vision = _test_module("test_env_multimodal_dpo")
        env_cls = next(c for c in vision.ALL if Path(inspect.getfile(c)).name == Path(name).name)
        data_file = REPO_ROOT / args[args.index("--env.dataset_path") + 1]
        return vision._responder(env_cls, data_file, lambda index, row: index % 2 == 0)
    if name == "game_environments/blackjack_env.py":
        return _games(lambda k: [take_action("stick")] if k == 0 else ["I fold."])
    if name == "game_environments/taxi_env.py":
        return _games(lambda k: [take_action("south")] if k == 0 else ["I will wait here."])
    if name == "game_environments/diplomacy_environment/diplomacy_env_minimal.py":
        return _games(
            lambda k: (
                [take_action("A PAR - BUR; A MAR - SPA; F BRE - MAO", "orders")] if k == 0 else ["I wait."]
            )
        )
    if name == "kernelbench_env/kernelbench_env.py":
        return _test_module("test_env_kernelbench").good_or_wrong
    if name == "game_environments/textworld_env.py":
        return _games(lambda k: [take_action("look", "command")] if k == 0 else ["Let me think."])
    if name == "tool_use_python_math_server.py":
        return _tool_use_responder()
    if name in ("tool_use_multiturn_server.py", "tool_use_turnlevel_advantage_server.py"):
        return replayer(read_jsonl(FIXTURES / "tool_use_multiturn_sample.jsonl")[:2])
    if name == "tool_use_interleaved_thinking.py":
        return _test_module("test_env_tool_use_interleaved_thinking")._golden_responder()
    if name == "deep_research_env.py":
        research = _test_module("test_env_deep_research")
        return research._researcher(research.GOLDS)
    if name == "t1_tool_planning/t1_env.py":
        return _test_module("test_env_t1_tool_planning")._planner()
    if name == "game_environments/blackjack_env_thinking.py":
        return _test_module("test_env_blackjack_thinking")._player
    if name == "infinimath/infinimath_env.py":
        infinimath = _test_module("test_env_infinimath")
        problems, _ = asyncio.run(infinimath._problems(tiny_model_dir, 1))
        return infinimath._solver(problems, lambda problem, index: index % 2 == 0)
    if name == "sft_loader_server.py":
        return _test_module("test_env_sft_loader")._no_sampling
    if name == "swe_rl_env.py":
        return _test_module("test_env_swe_rl")._responder()
    if name == "verifiers_server.py":
        return _test_module("test_env_verifiers").pencil_responder()
    if name == "mcp_env.py":
        mcp = _test_module("test_env_mcp")
        return mcp._caller(mcp.ROWS)
    pytest.fail(
        f"environments/README.md runs {script}, which tests/environments/{Path(__file__).name} has no responder for"
    )


def test_the_readme_lists_commands():
    commands = readme_commands()
    assert len(commands) >= 20
    assert all(shlex.split(re.sub(r"^(?:[A-Z_]+=\S+ )+", "", c))[2] == "process" for c in commands)


@pytest.mark.parametrize(
    "command", readme_commands(), ids=lambda c: re.search(r"environments/(\S+)", c).group(1)
)
def test_readme_command_runs_as_written(command, tiny_model_dir, tmp_path):
    words = shlex.split(command)
    settings = {}
    while "=" in words[0]:  # VAR=value prefixes set the command's environment
        key, _, value = words.pop(0).partition("=")
        settings[key] = str(REPO_ROOT / value) if key == "PYTHONPATH" else value
    script, args = words[1], words[3:]
    respond = _responder(script, args, tiny_model_dir)
    out = tmp_path / "groups.jsonl"
    with launch_scripted_server(respond=respond, tokenizer=tiny_model_dir) as server:
        # Servers the command names (a teacher's, say) are the user's to fill in: here the scripted one,
        # serving the tiny model.
        args = [
            server.base_url if k and args[k - 1].endswith(".base_url")
            else str(tiny_model_dir) if k and args[k - 1].endswith(".model_name") else value
            for k, value in enumerate(args)
        ]  # fmt: skip
        result = run_env(
            REPO_ROOT / script,
            ["process", *args, "--openai.base_url", server.base_url, "--openai.model_name", "scripted-model",
             "--env.tokenizer_name", tiny_model_dir, "--env.use_wandb", "false", "--env.total_steps", "1",
             "--env.data_path_to_save_groups", out],
            cwd=REPO_ROOT,
            env={**os.environ, **OFFLINE, **settings},
        )  # fmt: skip
    assert result.returncode == 0, result.stderr[-3000:]
    assert "NotImplementedError" not in result.stderr
    groups = read_jsonl(out)
    # One item's groups: one, or one per turn where an environment groups each turn's alternatives
    # (blackjack_env_thinking.py). A group of one (single-sample scoring, the SFT loader) has nothing to vary.
    assert len(groups) == 1 or (len(groups) > 1 and "thinking" in script)
    for group in groups:
        # process writes every scored group; one whose scores are all equal says so
        assert len(group["scores"]) == 1 or len(set(group["scores"])) > 1 or group["scores_all_equal"] is True
        for tokens, masks in zip(group["tokens"], group["masks"], strict=True):
            assert len(tokens) == len(masks) and any(m != -100 for m in masks) and masks[0] == -100
    assert out.with_suffix(".html").exists()
