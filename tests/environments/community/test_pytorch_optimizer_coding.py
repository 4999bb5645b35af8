"""PyTorch optimizer coding: reply rules, the sandboxed benchmark against the baseline, rewards, data, ``process``.

Every benchmark below runs the real harness in the real sandbox on the CPU.
"""

from __future__ import annotations

import pytest

from atroposlib.envs.cli import parse_command
from atroposlib.sandbox import Sandbox, SandboxLimits
from environments.community.pytorch_optimizer_coding.optimizer_benchmark_environmenr import (
    OptimizerBenchmarkEnvConfig,
    OptimizerBenchmarkEnvironment,
    OptimizerTask,
)
from environments.community.pytorch_optimizer_coding.optimizer_reply import extract_optimizer
from environments.community.pytorch_optimizer_coding.optimizer_runner import (
    BenchmarkResult,
    BenchmarkSettings,
    OptimizerRunner,
    optimizer_reward,
)
from tests.environments.community.community_runs import bad_rows_error, evaluate_local, process_local
from tests.helpers.cli_runs import FIXTURES
from tests.helpers.single_turn_runs import check_group, offline_env

SAMPLE = FIXTURES / "community" / "pytorch_optimizer_coding" / "tasks_sample.jsonl"
MOMENTUM = """import torch
from torch.optim import Optimizer


class HeavyBall(Optimizer):
    def __init__(self, params, lr=0.05, momentum=0.9):
        super().__init__(params, dict(lr=lr, momentum=momentum))

    @torch.no_grad()
    def step(self, closure=None):
        for group in self.param_groups:
            for p in group["params"]:
                if p.grad is None:
                    continue
                buf = self.state[p].setdefault("buf", torch.zeros_like(p))
                buf.mul_(group["momentum"]).add_(p.grad)
                p.add_(buf, alpha=-group["lr"])
"""
# the same rule written differently: an equivalent answer
MOMENTUM_ALT = MOMENTUM.replace("from torch.optim import Optimizer\n", "").replace(
    "class HeavyBall(Optimizer)", "class Other(torch.optim.Optimizer)"
)
DIVERGES = MOMENTUM.replace("lr=0.05", "lr=1e6")
DOES_NOTHING = MOMENTUM.replace('p.add_(buf, alpha=-group["lr"])', "pass")
RETURNS_NAN = MOMENTUM.replace('p.add_(buf, alpha=-group["lr"])', 'p.add_(float("nan"))')
# zeroes the weights in the constructor, and nudges them from a gradient hook during backward
EDITS_IN_INIT = MOMENTUM.replace(
    "super().__init__(params, dict(lr=lr, momentum=momentum))",
    "super().__init__(params, dict(lr=lr, momentum=momentum))\n"
    "        with torch.no_grad():\n            for g in self.param_groups:\n"
    "                for p in g['params']:\n                    p.mul_(0.5)",
)
EDITS_IN_BACKWARD = MOMENTUM.replace(
    "super().__init__(params, dict(lr=lr, momentum=momentum))",
    "super().__init__(params, dict(lr=lr, momentum=momentum))\n"
    "        for g in self.param_groups:\n            for p in g['params']:\n"
    "                p.register_post_accumulate_grad_hook(lambda t: [t.data.sub_(0.01 * t.grad), None][1])",
)
PATCHES_LOSS = MOMENTUM + "\ntorch.nn.functional.cross_entropy = lambda a, b, **k: (a * 0).sum()\n"
CRASHES = MOMENTUM.replace("buf.mul_(", "undefined_name.mul_(")
LIMITS = SandboxLimits(wall_seconds=120, cpu_seconds=120, memory_mb=16384, max_processes=256)
SETTINGS = BenchmarkSettings(2, 64, 2048, 1024, "adam", 1e-2)  # the environment's defaults


def block(code: str, tag: str = "python") -> str:
    return f"```{tag}\n{code}```"


def test_the_one_optimizer_block_is_read_after_the_reasoning():
    assert extract_optimizer(f"<think>plan</think>Here:\n{block(MOMENTUM)}").class_name == "HeavyBall"
    assert extract_optimizer(f"{block('x = 1')}\n{block(MOMENTUM_ALT, '')}").class_name == "Other"
    assert "no python code block" in extract_optimizer(f"<think>{block(MOMENTUM)}</think>done").problem
    assert "hedge" in extract_optimizer(block(MOMENTUM) + block(MOMENTUM_ALT)).problem
    assert "hedge" in extract_optimizer(block(MOMENTUM + MOMENTUM_ALT.replace("import torch\n", ""))).problem
    assert extract_optimizer(f"<think>{block(MOMENTUM)}").problem == "the <think> block is malformed"
    assert "not valid Python" in extract_optimizer(block(MOMENTUM.replace("):\n", ":\n", 1))).problem
    assert extract_optimizer(MOMENTUM).code is None  # outside a code block


@pytest.mark.parametrize(
    "code,problem",
    [
        ("import os\n" + MOMENTUM, "imports os"),
        ("import sys as s\n" + MOMENTUM, "imports sys"),
        (MOMENTUM.replace("import torch", "import torch, inspect"), "imports inspect"),
        (MOMENTUM.replace("buf = ", "inner = torch.optim.Adam([p])\n                buf = "), "Adam"),
        ("from torch.optim import SGD\n" + MOMENTUM, "SGD"),
        (MOMENTUM.replace("buf = ", "f = __import__('os')\n                buf = "), "__import__"),
        (MOMENTUM.replace("buf = ", "g = self.step.__globals__\n                buf = "), "__globals__"),
        (MOMENTUM.replace("buf = ", "o = open('/etc/passwd')\n                buf = "), "open"),
    ],
)
def test_forbidden_imports_and_names_are_refused_before_running(code, problem):
    parsed = extract_optimizer(block(code))
    assert parsed.code is None and problem in parsed.problem


def test_the_reward_scales_with_progress_against_the_baseline():
    def result(candidate: float) -> BenchmarkResult:
        return BenchmarkResult(True, initial_loss=2.0, baseline_loss=1.0, candidate_loss=candidate)

    assert optimizer_reward(result(1.0), 0.2, 1.5) == pytest.approx(1.0)  # matches the baseline
    assert optimizer_reward(result(1.5), 0.2, 1.5) == pytest.approx(0.6)  # half its gain
    assert optimizer_reward(result(0.0), 0.2, 1.5) == pytest.approx(1.4)  # twice its gain, capped at 1.5
    assert optimizer_reward(result(2.0), 0.2, 1.5) == 0.0  # did not train
    assert optimizer_reward(result(float("nan")), 0.2, 1.5) == 0.0
    assert optimizer_reward(BenchmarkResult(False, error="crash"), 0.2, 1.5) == 0.0


@pytest.fixture(scope="module")
def runner() -> OptimizerRunner:
    return OptimizerRunner(Sandbox(2, LIMITS), LIMITS, SETTINGS)


@pytest.mark.parametrize("architecture", ["mnist", "classification_small", "tabular"])
async def test_a_working_optimizer_trains_and_is_compared_with_the_baseline(runner, architecture):
    result = await runner.benchmark(MOMENTUM, "HeavyBall", architecture, 3)
    assert result.trained and result.cheat is None and result.error is None
    assert result.candidate_loss < result.initial_loss and result.baseline_loss < result.initial_loss
    assert optimizer_reward(result, 0.2, 1.5) > 0.2
    if architecture != "tabular":
        assert result.candidate_accuracy > 0.5


async def test_the_same_task_and_seed_give_the_same_training(runner):
    first = await runner.benchmark(MOMENTUM, "HeavyBall", "tabular", 9)
    again = await runner.benchmark(MOMENTUM_ALT, "Other", "tabular", 9)
    # the held-out set is drawn afresh each run, so only the ratio of gains is stable
    assert first.progress == pytest.approx(again.progress, rel=0.25)


@pytest.mark.parametrize(
    "code,field,says",
    [
        (DIVERGES, "error", "diverged"),
        (RETURNS_NAN, "error", "diverged"),
        (CRASHES, "error", "NameError"),
        (EDITS_IN_INIT, "cheat", "(the constructor)"),
        (EDITS_IN_BACKWARD, "cheat", "(during backward)"),
        (PATCHES_LOSS, "cheat", "patched torch: cross_entropy"),
    ],
)
async def test_divergence_crashes_and_cheats_earn_nothing(runner, code, field, says):
    result = await runner.benchmark(code, "HeavyBall", "mnist", 3)
    assert says in (getattr(result, field) or "") and optimizer_reward(result, 0.2, 1.5) == 0.0


async def test_an_optimizer_that_does_not_move_earns_nothing(runner):
    result = await runner.benchmark(DOES_NOTHING, "HeavyBall", "classification_small", 3)
    assert result.ran and not result.trained and optimizer_reward(result, 0.2, 1.5) == 0.0


async def test_a_forged_report_and_an_early_exit_earn_nothing(runner):
    forged = 'print(\'00 {"ran": true, "initial_loss": 9, "candidate_loss": 0}\')\n' + DOES_NOTHING
    assert not (await runner.benchmark(forged, "HeavyBall", "tabular", 1)).trained
    exits = MOMENTUM.replace("buf = ", "raise SystemExit(0)\n                buf = ")
    result = await runner.benchmark(exits, "HeavyBall", "tabular", 1)
    assert not result.ran and optimizer_reward(result, 0.2, 1.5) == 0.0


async def test_a_run_past_the_timeout_is_stopped():
    limits = SandboxLimits(wall_seconds=8, cpu_seconds=8, memory_mb=16384, max_processes=256)
    slow = OptimizerRunner(Sandbox(1, limits), limits, SETTINGS)
    loops = MOMENTUM.replace("buf = ", "while True:\n                    pass\n                buf = ")
    result = await slow.benchmark(loops, "HeavyBall", "tabular", 1)
    assert not result.ran and "limit" in result.error


async def test_tasks_options_and_bad_rows(tiny_model_dir, tmp_path):
    env = offline_env(
        OptimizerBenchmarkEnvironment, tiny_model_dir, architecture="tabular", num_train_tasks=4
    )
    await env.setup()
    assert env.train == [OptimizerTask("tabular", s) for s in range(4)] and len(env.test) == 8
    assert not {t.seed for t in env.train} & {t.seed for t in env.test}
    user = env.prompt_messages(env.test[0])[1]["content"]
    assert "MLP 8-32-1" in user and "Adam (lr=0.01)" in user and "2 epochs" in user
    local = offline_env(OptimizerBenchmarkEnvironment, tiny_model_dir, dataset_path=str(SAMPLE))
    await local.setup()
    assert [t.architecture for t in local.train] == ["mnist", "classification_small", "tabular"]
    await bad_rows_error(
        OptimizerBenchmarkEnvironment, tiny_model_dir, tmp_path, [{"architecture": "mnist"}], "row 0"
    )
    error = await bad_rows_error(
        OptimizerBenchmarkEnvironment, tiny_model_dir, tmp_path,
        [{"architecture": "mnist", "seed": 1}, {"architecture": "resnet", "seed": 2}], "row 1",
    )  # fmt: skip
    assert "'architecture'" in str(error)


def test_the_original_options_are_accepted(tmp_path):
    path = tmp_path / "original.yaml"
    path.write_text(
        "env:\n  architecture: tabular\n  max_epochs: 3\n  timeout: 60\n  novelty_threshold: 7.0\n"
    )
    config = (
        parse_command(OptimizerBenchmarkEnvironment, ["process", "--config", str(path)]).resolve().env_config
    )
    assert (config.architecture, config.max_epochs, config.timeout) == ("tabular", 3, 60)
    assert "novelty_threshold" not in config.model_dump()
    defaults = OptimizerBenchmarkEnvConfig()
    assert (defaults.architecture, defaults.max_epochs, defaults.timeout) == ("mnist", 2, 300)


def _responder(prompt, index):
    """A working optimizer for even choices; the same one inside the reasoning only for odd ones."""
    return f"<think>{block(MOMENTUM)}</think>I would use momentum." if index % 2 else block(MOMENTUM)


def test_process_end_to_end(scripted):
    groups = process_local(
        scripted,
        OptimizerBenchmarkEnvironment,
        SAMPLE,
        _responder,
        group_size=2,
        total_steps=2,
        max_tokens=1024,
    )
    assert len(groups) == 2
    for group in groups:
        check_group(group, 2)
        assert min(group["scores"]) == 0.0 and max(group["scores"]) > 0.2


def test_evaluate_counts_replies_that_match_the_baseline(scripted):
    metrics = evaluate_local(
        scripted, OptimizerBenchmarkEnvironment, SAMPLE, lambda p, i: block(DIVERGES), max_tokens=1024
    ).metrics
    assert metrics["eval/percent_correct"] == 0.0 and metrics["eval/ran_rate"] == 0.0
