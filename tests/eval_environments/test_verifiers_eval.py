"""The verifiers evaluation on the test tasksets (``tests/fixtures/vf_tasksets``) against the scripted server:
the rubric's mean reward and per-reward breakdown of a single-turn taskset, whole multi-turn tool
conversations in the samples, the original's option names, and what is not carried."""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path
from typing import Any

import pytest

from environments.eval_environments.verifiers_eval import VerifiersEvaluationEnv
from environments.verifiers_server import VerifiersUnsupported
from tests.helpers.cli_runs import FIXTURES
from tests.helpers.single_turn_runs import offline_env, prompt_text

TASKSETS = FIXTURES / "vf_tasksets"


def _server_tests() -> Any:
    """tests/environments/test_env_verifiers.py (its scripted responders are reused)."""
    path = Path(__file__).parents[1] / "environments" / "test_env_verifiers.py"
    spec = importlib.util.spec_from_file_location("vf_server_tests", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(autouse=True)
def tasksets_installed(monkeypatch):
    """The test tasksets importable, as an installed package is."""
    monkeypatch.syspath_prepend(str(TASKSETS))


def sums(prompt: Any, index: int) -> str:
    """203 and 207 right (1.5), 205 boxed but wrong (0.5), 209 unboxed (0.0)."""
    a, b = map(int, re.search(r"What is (\d+) \+ (\d+)\?", prompt_text(prompt)).groups())
    return {203: "\\boxed{203}", 205: "\\boxed{204}", 207: "<think>sum</think>\\boxed{207}"}.get(a + b, "209")


def test_the_mean_reward_and_each_reward_functions_breakdown(scripted):
    run = scripted.evaluation(
        VerifiersEvaluationEnv,
        ["--env.vf_env_name", "vf_test_arith", "--env.env_args", '{"count": 4, "offset": 100}',
         "--env.eval_max_tokens", "64"],
        sums,
        server_type=None,
    )  # fmt: skip
    m = run.metrics
    assert m["eval/avg_score"] == 0.875 and m["eval/accuracy"] == 0.75
    assert (m["eval/total_evaluated"], m["eval/total_correct"]) == (4, 3)
    assert (m["eval/correct"], m["eval/boxed"]) == (0.5, 0.75)
    assert (m["eval/correct_correct"], m["eval/boxed_correct"]) == (2, 3)
    assert [(s["score"], s["correct"], s["gold_answer"]) for s in run.samples] == [
        (1.5, True, "203"), (0.5, True, "205"), (1.5, True, "207"), (0.0, False, "209")
    ]  # fmt: skip
    assert run.samples[1]["metrics"] == {"correct": 0.0, "boxed": 1.0}
    assert all(r["body"]["temperature"] == 0.0 for r in run.requests)  # the original's default


def test_multi_turn_tool_conversations_are_played_and_written_whole(scripted):
    responder = _server_tests().pencil_responder(right=lambda box, k: box % 2 == 0)
    run = scripted.evaluation(
        VerifiersEvaluationEnv,
        ["--env.vf_env_name", "vf_test_tools", "--env.env_args", '{"count": 6}', "--env.max_eval_items", "4",
         "--env.max_concurrent", "2", "--env.temperature", "0.3"],
        responder,
        server_type=None,
    )  # fmt: skip
    m = run.metrics
    assert m["eval/num_items"] == 4 and m["eval/avg_score"] == 0.75 and m["eval/accuracy"] == 0.5
    assert (m["eval/correct"], m["eval/looked_up"], m["eval/metric_tool_results"]) == (0.5, 0.5, 0.5)
    right = run.samples[2]  # box 2: looked up, then answered
    assert [msg["role"] for msg in right["messages"]] == ["system", "user", "assistant", "tool", "assistant"]
    assert '"content": "17"' in right["messages"][3]["content"] and right["reply"] == "There are 17 pencils."
    assert [s["score"] for s in run.samples] == [1.5, 0.0, 1.5, 0.0] and len(run.requests) == 6
    assert all(r["body"]["temperature"] == 0.3 for r in run.requests)


async def test_what_is_not_carried_stops_the_setup(tiny_model_dir):
    env = offline_env(VerifiersEvaluationEnv, tiny_model_dir, vf_env_name="vf_test_sandboxed")
    with pytest.raises(VerifiersUnsupported, match=r"BuildTask needs a runtime \(its own setup hook\)"):
        await env.setup()
    env = offline_env(VerifiersEvaluationEnv, tiny_model_dir)
    with pytest.raises(ValueError, match="--env.vf_env_name is not set"):
        await env.setup()
