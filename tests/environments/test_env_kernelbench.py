"""KernelBench: reply parsing, the sandboxed harness (CPU stand-in: correctness only), rewards, data, ``process``.

Speed-up measurement needs a CUDA device and is not exercised here; every check below runs the real
harness in the real sandbox with ``device="cpu"``.
"""

from __future__ import annotations

import json

import pytest

from atroposlib.envs.base import APIServerConfig
from atroposlib.envs.data_loading import DatasetError
from atroposlib.sandbox import Sandbox, SandboxLimits
from environments.kernelbench_env import kernelbench_env
from environments.kernelbench_env.kernel_reply import extract_model_new
from environments.kernelbench_env.kernel_runner import KernelResult, KernelRunner, RunnerSettings
from environments.kernelbench_env.kernelbench_env import (
    _TRAINING,
    KernelBenchEnv,
    KernelBenchEnvConfig,
    kernel_reward,
)
from tests.helpers.cli_runs import FIXTURES, read_jsonl

ROWS = read_jsonl(FIXTURES / "kernelbench_sample.jsonl")
MATMUL = ROWS[0]["code"]
GOOD = MATMUL.replace("class Model(", "class ModelNew(").replace("super(Model, self)", "super()")
WRONG = GOOD.replace("torch.matmul(A, B)", "torch.matmul(A, B) + 1")
LIMITS = SandboxLimits(wall_seconds=90, cpu_seconds=90, memory_mb=16384, max_processes=256)


def block(code: str, tag: str = "python") -> str:
    return f"```{tag}\n{code}```"


def test_the_one_model_new_block_is_read_after_the_reasoning():
    assert extract_model_new(f"<think>easy</think>Here:\n{block(GOOD)}").code == GOOD
    assert (
        extract_model_new(
            f"{block('x = 1')}\n{block('__global__ void k() {}', 'cpp')}\n{block(GOOD, '')}"
        ).code
        == GOOD
    )
    assert (
        extract_model_new(f"<think>{block(GOOD)}</think>done").problem
        == "no python code block defines class ModelNew"
    )
    assert "hedge" in extract_model_new(block(GOOD) + block(WRONG)).problem
    assert extract_model_new(f"<think>{block(GOOD)}").problem == "the <think> block is malformed"
    assert "not valid Python" in extract_model_new(block("class ModelNew(:\n  pass\n")).problem
    assert extract_model_new("class ModelNew: pass").code is None  # outside a code block


def test_rewards_rank_wrong_built_correct_and_faster():
    assert kernel_reward(KernelResult(False, False), 0.3, 1.0) == 0.0
    assert kernel_reward(KernelResult(True, False), 0.3, 1.0) == 0.3
    assert kernel_reward(KernelResult(True, True), 0.3, 1.0) == 1.0
    assert kernel_reward(KernelResult(True, True, ref_ms=3.0, new_ms=1.5), 0.3, 1.0) == pytest.approx(2.0)
    assert (
        kernel_reward(KernelResult(True, True, ref_ms=1.0, new_ms=2.0), 0.3, 1.0) == 1.0
    )  # slower: no bonus
    assert KernelResult(True, False, ref_ms=3.0, new_ms=1.0).speedup is None


@pytest.fixture(scope="module")
def runner() -> KernelRunner:
    return KernelRunner(Sandbox(2, LIMITS), LIMITS, RunnerSettings(device="cpu", correct_trials=2))


async def test_a_correct_candidate_matches_and_a_wrong_one_builds_only(runner):
    good = await runner.evaluate(MATMUL, GOOD)
    assert (good.compiled, good.correct, good.speedup) == (True, True, None)
    wrong = await runner.evaluate(MATMUL, WRONG)
    assert (wrong.compiled, wrong.correct) == (True, False) and "differs" in wrong.error


@pytest.mark.parametrize(
    "candidate,error",
    [
        (GOOD.replace("class ModelNew(", "class Other("), "compile: KeyError: 'ModelNew'"),
        ("import torch\nraise RuntimeError('Error building extension kernel')\n", "Error building extension"),
        (GOOD.replace("return torch.matmul(A, B)", "return torch.matmul(A, B)[:, :3]"), "output (64, 3)"),
    ],
)
async def test_builds_that_fail_and_outputs_of_the_wrong_shape(runner, candidate, error):
    result = await runner.evaluate(MATMUL, candidate)
    assert not result.correct and error in result.error


async def test_hacks_and_crashes_earn_nothing(runner):
    fake_report = (
        'import sys\nprint(\'00 {"compiled": true, "correct": true}\')\nsys.stdout.flush()\n' + WRONG
    )
    exits = GOOD.replace("return torch.matmul(A, B)", "import os; os._exit(0)")
    subclass = GOOD.replace(
        "class ModelNew(",
        "class Always(torch.Tensor):\n    @classmethod\n    def __torch_function__(cls, f, t, a=(), k=None):\n"
        "        return True\n\nclass ModelNew(",
    ).replace("return torch.matmul(A, B)", "return torch.zeros(64, 64).as_subclass(Always)")
    for candidate in (exits, subclass, fake_report):
        result = await runner.evaluate(MATMUL, candidate)
        assert not result.correct, result
    assert "not torch.Tensor" in (await runner.evaluate(MATMUL, subclass)).error
    exits_at_import = "import os\nos._exit(0)\n" + GOOD
    assert (await runner.evaluate(MATMUL, exits_at_import)).compiled is False


async def test_a_build_that_never_finishes_is_stopped():
    limits = SandboxLimits(wall_seconds=8, cpu_seconds=8, memory_mb=16384, max_processes=256)
    runner = KernelRunner(Sandbox(1, limits), limits, RunnerSettings(device="cpu"))
    result = await runner.evaluate(MATMUL, "import torch\nwhile True:\n    pass\n" + GOOD)
    assert not result.compiled and ("limit" in result.error)


async def test_cuda_scoring_needs_a_cuda_device(runner):
    cuda = KernelRunner(runner.sandbox, LIMITS, RunnerSettings(device="cuda"))
    result = await cuda.evaluate(MATMUL, GOOD)
    try:
        import torch

        has_cuda = torch.cuda.is_available()
    except ImportError:  # pragma: no cover
        has_cuda = False
    if not has_cuda:
        assert not result.compiled and result.error.startswith("cuda unavailable")
        assert not await cuda.device_reachable()
    assert await runner.device_reachable()  # the CPU stand-in needs no probe


def _env(tiny_model_dir, **values) -> KernelBenchEnv:
    config = KernelBenchEnvConfig(tokenizer_name=str(tiny_model_dir), use_wandb=False, **values)
    return KernelBenchEnv(
        config, APIServerConfig(base_url="http://127.0.0.1:9/v1", model_name="m", server_type="vllm")
    )


async def test_setup_stops_without_cuda_and_names_bad_rows(tiny_model_dir, tmp_path, hub_offline):
    import torch

    if not torch.cuda.is_available():
        env = _env(tiny_model_dir, dataset_path=str(FIXTURES / "kernelbench_sample.jsonl"))
        with pytest.raises(RuntimeError, match="needs a CUDA device"):
            await env.setup()
    bad = tmp_path / "bad.jsonl"
    bad.write_text(
        "\n".join(json.dumps(r) for r in [ROWS[0], {k: v for k, v in ROWS[1].items() if k != "code"}])
    )
    with pytest.raises(DatasetError, match=r"bad.jsonl: row 1: missing field 'code'"):
        await _env(tiny_model_dir, dataset_path=str(bad), device="cpu").setup()
    with pytest.raises(DatasetError, match=r"ScalingIntelligence/KernelBench \(level_2\): cannot load"):
        await _env(tiny_model_dir, device="cpu", level=2).setup()
    with pytest.raises(ValueError, match="problem_id 9 is not in"):
        await _env(
            tiny_model_dir,
            device="cpu",
            problem_id=9,
            dataset_path=str(FIXTURES / "kernelbench_sample.jsonl"),
        ).setup()


async def test_only_training_verdicts_feed_the_train_metrics(tiny_model_dir):
    env = _env(tiny_model_dir, device="cpu", dataset_path=str(FIXTURES / "kernelbench_sample.jsonl"))
    env.kernel_runner = KernelRunner(
        Sandbox(2, LIMITS), LIMITS, RunnerSettings(device="cpu", correct_trials=1)
    )
    replies = [block(GOOD), "no code"]
    assert await env.score_replies_async(replies, ROWS[0]) == [1.0, 0.0]  # as evaluation scores
    assert env.results == []
    token = _TRAINING.set(True)  # what collect_trajectories sets around a training group
    try:
        await env.score_replies_async(replies, ROWS[0])
    finally:
        _TRAINING.reset(token)
    assert [(r.compiled, r.correct) for r in env.results] == [(True, True), (False, False)]


async def test_the_prompt_shows_the_reference_and_asks_for_model_new(tiny_model_dir):
    env = _env(
        tiny_model_dir, device="cpu", dataset_path=str(FIXTURES / "kernelbench_sample.jsonl"), problem_id=2
    )
    await env.setup()
    assert [r["problem_id"] for r in env.train] == [2]
    system, user = env.prompt_messages(env.train[0])
    assert "class ModelNew" in system["content"] and "problem 2 (2_Linear_ReLU.py)" in user["content"]
    assert "self.linear = nn.Linear" in user["content"]


def good_or_wrong(prompt, index: int) -> str:
    """Replies alternate between a correct pure-PyTorch ModelNew and a wrong one, for either problem."""
    text = json.dumps(prompt) if isinstance(prompt, list) else str(prompt)
    code = MATMUL if "matmul" in text else ROWS[1]["code"]
    new = code.replace("class Model(", "class ModelNew(").replace("super(Model, self)", "super()")
    if index % 2:
        new = new.replace("return torch.", "return 1 + torch.")
    return f"<think>rewrite</think>{block(new)}"


def test_process_scores_every_group_on_the_cpu_stand_in(scripted):
    args = ["--env.dataset_path", FIXTURES / "kernelbench_sample.jsonl", "--env.device", "cpu",
            "--env.group_size", "2", "--env.total_steps", "2", "--env.max_token_length", "1024",
            "--env.sandbox_memory_mb", "16384"]  # fmt: skip
    groups = scripted.process(KernelBenchEnv, args, good_or_wrong)
    assert len(groups) == 2
    for group in groups:
        assert sorted(group["scores"]) == [0.3, 1.0]
        assert all(m[-1]["content"].startswith("<think>rewrite</think>") for m in group["messages"])


def test_scoring_on_cuda_binds_the_gpus_device_nodes_into_the_sandbox(monkeypatch):
    nodes = ["/dev/nvidia0", "/dev/nvidia-uvm", "/dev/nvidiactl"]
    monkeypatch.setattr(
        kernelbench_env.glob, "glob", lambda pattern: nodes if pattern == "/dev/nvidia*" else []
    )
    assert kernelbench_env.gpu_device_nodes("cuda:1") == sorted(nodes)
    assert kernelbench_env.gpu_device_nodes("cpu") == []
