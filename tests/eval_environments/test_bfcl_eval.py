"""BFCL end to end against the scripted server: bfcl_eval.py and tool_calling_server.py --env.eval_benchmark
bfcl on a fixture in BFCL's own layout, scored by BFCL's checker, with the leaderboard's per-category figures."""

from __future__ import annotations

import json

import pytest

from atroposlib.envs.data_loading import DatasetError
from environments.eval_environments.bfcl_eval import BfclEvalEnv
from environments.tool_calling_server import ToolCallingEnv
from tests.helpers.cli_runs import FIXTURES
from tests.helpers.single_turn_runs import offline_env, prompt_text

DATA = FIXTURES / "evals" / "bfcl"
CATEGORIES = json.dumps(["simple", "multiple", "parallel", "parallel_multiple", "irrelevance"])


def call(name: str, **arguments) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


REPLIES = {
    "weather in Paris in celsius": "<think>One call.</think>" + call("weather_current", city="Paris", unit="celsius"),
    "radius 2.5": call("circle_area", radius="2.5"),  # wrong type
    "Convert 100 USD": call("convert_currency", amount=100, source="USD", target="EUR", fee=1),  # extra argument
    "Paris and in Rome": call("weather_current", city="Paris"),  # a parallel call missing
    "5 GBP to JPY": call("weather_current", city="Oslo") + "\n" + call("convert_currency", amount=5, source="GBP", target="JPY"),
    "wrote Hamlet": "Shakespeare wrote it; none of these functions helps.",
    "capital of Peru": call("convert_currency", amount=1, source="PEN", target="USD"),  # should not call
}  # fmt: skip


def respond(prompt, index):
    text = prompt_text(prompt)
    return next(reply for key, reply in REPLIES.items() if key in text)


def check_bfcl_metrics(m: dict) -> None:
    assert m["eval/bfcl/simple_python"] == 0.5 and m["eval/bfcl/multiple"] == 0.0
    assert m["eval/bfcl/parallel"] == 0.0 and m["eval/bfcl/parallel_multiple"] == 1.0
    assert m["eval/bfcl/irrelevance"] == 0.5 and m["eval/bfcl/simple_python_count"] == 2
    assert m["eval/bfcl/non_live_summary_ast"] == pytest.approx((0.5 + 0 + 0 + 1) / 4)
    assert m["eval/bfcl/accuracy"] == pytest.approx(3 / 7)


def test_bfcl_eval_scores_each_category(scripted):
    run = scripted.evaluation(
        BfclEvalEnv,
        ["--env.dataset_path", DATA, "--env.bfcl_categories", CATEGORIES],
        respond,
        server_type=None,
    )
    m = run.metrics
    check_bfcl_metrics(m)
    assert m["eval/accuracy"] == pytest.approx(3 / 7) and m["eval/num_items"] == 7
    assert m["eval/category_parallel_multiple_accuracy"] == 1.0
    by_id = {s["id"]: s for s in run.samples}
    assert by_id["simple_python_1"]["error_type"] == "type_error:simple"
    assert by_id["multiple_0"]["error_type"] == "simple_function_checker:unexpected_param"
    assert by_id["parallel_0"]["error_type"] == "parallel_function_checker_no_order:wrong_count"
    assert by_id["irrelevance_1"]["error_type"] == "irrelevance_error:decoder_success"
    assert by_id["simple_python_0"]["extracted"] == [
        {"weather_current": {"city": "Paris", "unit": "celsius"}}
    ]
    system = by_id["simple_python_0"]["messages"][0]
    assert system["role"] == "system" and '"name": "weather_current"' in system["content"]
    assert "<tools>" in system["content"] and "<tool_call>" in system["content"]


def test_tool_calling_server_evaluates_on_bfcl(scripted):
    args = ["--env.dataset_path", FIXTURES / "hermes_fc_sample.jsonl", "--env.eval_benchmark", "bfcl",
            "--env.bfcl_data_dir", DATA, "--env.bfcl_categories", CATEGORIES, "--env.max_token_length", "2048"]  # fmt: skip
    run = scripted.evaluation(ToolCallingEnv, args, respond)
    check_bfcl_metrics(run.metrics)
    assert run.metrics["eval/percent_correct"] == pytest.approx(3 / 7)
    sample = next(s for s in run.samples if s["bfcl_id"] == "parallel_0")
    assert sample["error_type"] == "parallel_function_checker_no_order:wrong_count"
    assert sample["messages"][0]["content"].startswith("You are a deep thinking AI.")  # the env's own prompt


def test_bfcl_eval_runs_as_a_script(scripted, tmp_path):
    """Run as ``python .../bfcl_eval.py``, the script's own name must not shadow the bfcl_eval package."""
    out = tmp_path / "script_evals"
    args = ["--env.dataset_path", DATA, "--env.bfcl_categories", '["simple", "irrelevance"]',
            "--env.bfcl_per_category_limit", "1", "--env.data_dir_to_save_evals", out]  # fmt: skip
    scripted.command(BfclEvalEnv, "evaluate", args, respond, server_type=None)
    metrics = json.loads((out / "metrics.json").read_text())["results"]["all"]
    assert metrics["eval/num_items"] == 2 and metrics["eval/accuracy"] == 1.0  # the first entry of each


async def test_unknown_category_is_one_line(tiny_model_dir):
    env = offline_env(
        BfclEvalEnv, tiny_model_dir, dataset_path=str(DATA), bfcl_categories=["multi_turn_base"]
    )
    with pytest.raises(DatasetError, match="unknown or unsupported category 'multi_turn_base'"):
        await env.setup()
