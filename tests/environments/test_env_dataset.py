"""The YAML-configured dataset environment: config layering, the reward registry, scoring, process, evaluate."""

from __future__ import annotations

import pytest
import yaml
from pydantic import ValidationError

from atroposlib.envs.base import APIServerConfig
from atroposlib.envs.reward_fns import registry
from environments.dataset_environment.dataset_env import DatasetEnv, DatasetEnvConfig, reply_form_ok
from tests.helpers.cli_runs import ENVIRONMENTS, FIXTURES, GSM8K_SAMPLE, gsm8k_responder, read_jsonl, run_env
from tests.helpers.single_turn_runs import (
    check_groups,
    check_scored_group,
    prompt_text,
    setup_failure,
    write_jsonl,
)

SCRIPT = ENVIRONMENTS / "dataset_environment" / "dataset_env.py"
CONFIGS = ENVIRONMENTS / "configs"
MATH_SAMPLE = FIXTURES / "math_lighteval_sample.jsonl"


def _yaml_env(name: str) -> dict:
    return yaml.safe_load((CONFIGS / name).read_text())["env"]


def _env(tiny_model_dir, config_file: str | None = None, **overrides) -> DatasetEnv:
    values = {**(_yaml_env(config_file) if config_file else {}), **overrides}
    config = DatasetEnvConfig(tokenizer_name=str(tiny_model_dir), use_wandb=False, **values)
    server = APIServerConfig(base_url="http://127.0.0.1:9/v1", model_name="m", server_type="vllm")
    return DatasetEnv(config, server)


# ------------------------------------------------------------------------------------------------ config
def test_reward_entries_and_unknown_names():
    config = DatasetEnvConfig(
        reward_functions=["accuracy", {"name": "format", "weight": 0.5}, {"type": "r1"}]
    )
    assert config.reward_functions == ["accuracy", {"type": "format", "weight": 0.5}, {"type": "r1"}]
    with pytest.raises(
        ValidationError, match=r"unknown reward function 'nope'; registered: accuracy, .*format"
    ):
        DatasetEnvConfig(reward_functions=["accuracy", {"name": "nope", "weight": 2}])
    with pytest.raises(ValidationError, match="needs a 'type'"):
        DatasetEnvConfig(reward_functions=[{"weight": 2}])
    with pytest.raises(ValidationError, match="at least one reward"):
        DatasetEnvConfig(reward_functions=[])
    assert {"accuracy", "format", "r1", "cascading_r1_math", "combined"} <= set(registry.available_names())


def test_unknown_reward_in_yaml_is_one_line_at_start_up(tmp_path, tiny_model_dir):
    config = tmp_path / "bad.yaml"
    config.write_text(
        yaml.safe_dump(
            {"env": {**_yaml_env("dataset_env_gsm8k.yaml"), "reward_functions": ["accuracy", "nope"]}}
        )
    )
    result = run_env(
        SCRIPT, ["process", "--config", config, "--env.dataset_path", GSM8K_SAMPLE, "--env.tokenizer_name", tiny_model_dir],
        cwd=tmp_path,
    )  # fmt: skip
    assert result.returncode != 0
    assert "Traceback" not in result.stderr
    lines = [line for line in result.stderr.splitlines() if "unknown reward function 'nope'" in line]
    assert len(lines) == 1 and "registered: accuracy" in lines[0] and "env.reward_functions" in lines[0]


async def test_missing_prompt_field_or_data_source(tiny_model_dir):
    with pytest.raises(ValueError, match="prompt_field"):
        _env(tiny_model_dir, dataset_path=str(GSM8K_SAMPLE))
    with pytest.raises(ValueError, match="dataset_name .* or env.dataset_path"):
        _env(tiny_model_dir, prompt_field="question")


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{"question": "a", "answer": "#### 1"}, {"question": "b"}], "row 1: missing field 'answer'"),
        ([{"prompt": "a", "answer": "#### 1"}], "row 0: missing field 'question'"),
        ([], "no rows"),
    ],
)
async def test_bad_local_files(tiny_model_dir, tmp_path, rows, message):
    path = write_jsonl(tmp_path / "rows.jsonl", rows)
    env = _env(tiny_model_dir, "dataset_env_gsm8k.yaml", dataset_path=path)
    assert path in str(await setup_failure(env, message))


async def test_hub_is_the_default(tiny_model_dir, hub_offline):
    env = _env(tiny_model_dir, "dataset_env_gsm8k.yaml")
    await setup_failure(env, r"gsm8k \(train\): cannot load from the hub")


async def test_local_rows_are_used_for_training_and_evaluation(tiny_model_dir):
    env = _env(tiny_model_dir, "dataset_env_gsm8k.yaml", dataset_path=str(GSM8K_SAMPLE))
    await env.setup()
    rows = read_jsonl(GSM8K_SAMPLE)
    assert sorted(r["question"] for r in env.train_rows) == sorted(r["question"] for r in rows)
    assert env.train_rows != rows  # shuffled (seeded)
    assert env.test_rows == rows  # a local dataset_path also serves for evaluation
    first = await env.get_next_item()
    assert env.prompt_messages(first)[0]["role"] == "system"
    assert env.prompt_messages(first)[1] == {"role": "user", "content": first["question"]}


# ------------------------------------------------------------------------------------------------ scoring
@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("<think>7 + 7</think>The answer is \\boxed{14}.", 1.2),
        ("<think>7 + 7</think>\\boxed{14.0}", 1.2),  # the same number written differently
        ("<think>7 + 7</think>\\boxed{\\frac{28}{2}}", 1.2),
        ("\\boxed{14}", 1.0),  # right, without the reasoning the format reward asks for
        ("<think>7 + 8</think>\\boxed{15}", 0.2),
        ("<think>\\boxed{14}</think>I will not say.", 0.2),  # the answer only inside the reasoning
        ("<think>hmm</think>\\boxed{14} or maybe \\boxed{15}", 0.0),  # several answers
        ("<think>unclosed \\boxed{14}", 0.0),  # malformed reasoning
        ("<think>a</think><think>b</think>\\boxed{14}", 0.0),
        ("The answer is 14.", 0.0),  # not boxed
        ("", 0.0),
    ],
)
def test_weighted_rewards(tiny_model_dir, reply, expected):
    env = _env(tiny_model_dir, "dataset_env_weighted.yaml", dataset_path=str(GSM8K_SAMPLE))
    row = {"question": "q", "answer": "7 and 7 make 14.\n#### 14"}
    assert env.score_replies([reply], row) == [pytest.approx(expected)]


@pytest.mark.parametrize(
    ("reply", "solution", "expected"),
    [
        ("\\boxed{0.5}", "so $\\boxed{\\frac{1}{2}}$.", 1.0),
        ("\\boxed{\\sqrt{8}}", "we have $\\boxed{2\\sqrt{2}}$.", 1.0),
        ("$x = 3$, so \\boxed{3}", "so $x = \\boxed{3}$.", 1.0),
        ("\\boxed{\\frac{1}{3}}", "so $\\boxed{\\frac{1}{2}}$.", 0.0),
    ],
)
def test_math_config_accepts_equivalent_forms(tiny_model_dir, reply, solution, expected):
    env = _env(tiny_model_dir, "dataset_env_math.yaml", dataset_path=str(MATH_SAMPLE))
    assert env.score_replies([reply], {"problem": "p", "solution": solution}) == [expected]


def test_strict_reply_form_guards_the_first_reward_hacks(tiny_model_dir):
    hedge = "\\boxed{14} or \\boxed{15}"
    row = {"question": "q", "answer": "#### 14"}
    lenient = _env(
        tiny_model_dir, "dataset_env_gsm8k.yaml", dataset_path=str(GSM8K_SAMPLE), strict_reply_form=False
    )
    strict = _env(tiny_model_dir, "dataset_env_gsm8k.yaml", dataset_path=str(GSM8K_SAMPLE))
    assert lenient.score_replies([hedge], row) == [1.0]  # the accuracy reward alone takes the first box
    assert strict.score_replies([hedge], row) == [0.0]
    assert reply_form_ok("\\boxed{14} and again \\boxed{ 14 }") and reply_form_ok("no boxes")
    assert not reply_form_ok("<think>open")


# ------------------------------------------------------------------------------------------------ runs
def test_process_gsm8k_config_on_a_local_file(scripted):
    args = ["--config", CONFIGS / "dataset_env_gsm8k.yaml", "--env.dataset_path", GSM8K_SAMPLE,
            "--env.group_size", "2", "--env.total_steps", "2", "--env.max_tokens", "64"]  # fmt: skip
    groups = scripted.process(DatasetEnv, args, gsm8k_responder())
    check_groups(groups, 2, [0.0, 1.0])
    questions = {r["question"] for r in read_jsonl(GSM8K_SAMPLE)}
    assert all(group["messages"][0][1]["content"] in questions for group in groups)


MATH_REPLIES = {
    "What is the value of": ("\\boxed{0.5}", "\\boxed{\\frac{1}{4}}"),
    "Simplify": ("\\boxed{\\sqrt{8}}", "\\boxed{8}"),
    "Solve": ("x = \\boxed{3}", "\\boxed{-3}"),
    "How many positive divisors": ("\\boxed{6}", "\\boxed{5}"),
    "What is $7^2": ("\\boxed{24}", "\\boxed{2}"),
    "What is the remainder": ("\\boxed{2}", "\\boxed{14}"),
}


def _math_responder():
    """An equivalent form of the right answer for even choice indices, a wrong answer for odd ones."""

    def respond(prompt, index):
        text = prompt_text(prompt)
        right, wrong = next(pair for start, pair in MATH_REPLIES.items() if start in text)
        return f"Working through the problem. The final answer is {wrong if index % 2 else right}."

    return respond


def test_process_math_config_on_a_local_file(scripted):
    args = ["--config", CONFIGS / "dataset_env_math.yaml", "--env.dataset_path", MATH_SAMPLE,
            "--env.group_size", "2", "--env.total_steps", "3", "--env.max_tokens", "64"]  # fmt: skip
    groups = scripted.process(DatasetEnv, args, _math_responder())
    check_groups(groups, 3, [0.0, 1.0])


def test_evaluate_reports_accuracy(scripted):
    args = ["--config", CONFIGS / "dataset_env_weighted.yaml", "--env.dataset_path", GSM8K_SAMPLE,
            "--env.eval_limit", "4", "--env.max_tokens", "64"]  # fmt: skip
    metrics, samples, out = scripted.evaluate(DatasetEnv, args, gsm8k_responder())
    assert metrics["eval/percent_correct"] == 1.0
    assert len(samples) == 4 and all(s["correct"] for s in samples)
    assert "dataset evaluation: percent_correct=1.0000" in out


def test_prefill_starts_the_reply(scripted):
    args = ["--config", CONFIGS / "dataset_env_gsm8k.yaml", "--env.dataset_path", GSM8K_SAMPLE,
            "--env.eval_limit", "2", "--env.max_tokens", "64", "--env.prefill", "Step by step: "]  # fmt: skip
    metrics, samples, _ = scripted.evaluate(DatasetEnv, args, gsm8k_responder())
    replies = [s["messages"][-1]["content"] for s in samples]
    assert all(r.startswith("Step by step: ") and "\\boxed{" in r for r in replies)
    assert metrics["eval/percent_correct"] == 1.0


def test_serve_with_a_yaml_config(scripted, api):
    args = ["--config", CONFIGS / "dataset_env_gsm8k.yaml", "--env.dataset_path", GSM8K_SAMPLE,
            "--env.group_size", "2", "--env.max_tokens", "64"]  # fmt: skip
    served = scripted.serve(DatasetEnv, args, gsm8k_responder(), api)
    assert served.registration["desired_name"] == "dataset_env_gsm8k"  # the YAML's wandb_name
    check_scored_group(served.group, [0.0, 1.0])
    assert "Traceback" not in served.log


# ----------------------------------------------------------------------------- 0.4.0's settings
def test_length_warmup_grows_the_reply_budget_and_debug_mode_logs_more(tiny_model_dir):
    import logging

    env = _env(
        tiny_model_dir, "dataset_env_gsm8k.yaml", max_tokens=1000, min_tokens=200, length_warmup_steps=10
    )
    budgets = []
    for step in (0, 5, 10, 20):
        env.curr_step = step
        budgets.append(env.generation_budget)
    assert budgets == [200, 600, 1000, 1000]
    assert (
        _env(tiny_model_dir, "dataset_env_gsm8k.yaml", max_tokens=1000, min_tokens=200).generation_budget
        == 1000
    )
    _env(tiny_model_dir, "dataset_env_gsm8k.yaml", debug_mode=True)
    assert logging.getLogger(DatasetEnv.__module__).level == logging.DEBUG
    logging.getLogger(DatasetEnv.__module__).setLevel(logging.NOTSET)


def test_an_original_flat_config_runs_with_its_settings(scripted, tmp_path):
    """0.4.0's own gsm8k.yaml (flat, servers under server_configs): its warm-up starts the budget at
    min_tokens, and include_messages_in_scoring: false sends groups without messages."""
    args = ["--config", FIXTURES / "original_configs" / "gsm8k.yaml", "--env.dataset_path", GSM8K_SAMPLE,
            "--env.group_size", "2", "--env.total_steps", "1", "--env.include_messages", "false",
            "--env.use_wandb", "false"]  # fmt: skip
    requests = scripted.command(DatasetEnv, "process", args, gsm8k_responder())
    sampled = [r["body"] for r in requests if r["path"] == "/generate"]
    assert sampled and all(b["max_tokens"] == 2048 and b["temperature"] == 0.7 for b in sampled)
    (group,) = read_jsonl(tmp_path / "data" / "dataset.jsonl")
    assert group["messages"] is None and len(set(group["scores"])) == 2
