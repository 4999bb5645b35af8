"""KernelBench: write a faster GPU kernel (``ModelNew``) for a reference PyTorch module.

Each item is one KernelBench problem: the reference source defines ``Model``, ``get_inputs`` and
``get_init_inputs``. The model answers with one Python code block defining ``class ModelNew`` (the same
interface, its operators replaced by custom CUDA kernels through ``torch.utils.cpp_extension.load_inline``
or by Triton kernels); see :mod:`kernel_reply` for what counts as that block.

Scoring (**needs a CUDA device**): inside the sandbox (:mod:`atroposlib.sandbox`, bubblewrap), the
harness (:mod:`kernel_harness`) builds ``ModelNew``, runs it and the reference on ``correct_trials`` seeded
inputs and compares the outputs (``allclose`` within ``atol``/``rtol``), then times both with CUDA events
(median of ``perf_trials``). Reward: 0 for a malformed or hedged reply (no block, several ``ModelNew``
blocks, reasoning left open, not Python), a candidate that does not build, crashes, or runs past
``eval_timeout_seconds``; ``compile_reward`` (0.3) when it builds but is wrong; 1 when it matches the
reference, plus ``speedup_weight * (speed-up - 1)`` when it is faster (nothing is taken off when slower).
Evaluation reports ``eval/percent_correct`` (matches), ``eval/compiled_rate`` and ``eval/mean_score``.

``--env.device cpu`` runs the harness on the CPU: it checks that ``ModelNew`` builds and matches the
reference (pure-PyTorch candidates only: CUDA and Triton kernels need a GPU), measures no speed-up (one
line says so at start-up), and exists to test the pipeline on machines without a GPU. With the default
``--env.device cuda`` the environment stops at start-up with one line when this machine has no CUDA
device, or when the sandbox cannot reach it.

Data: ``ScalingIntelligence/KernelBench`` split ``level_{level}`` (default level 1, every problem;
``--env.problem_id`` keeps one), or ``--env.dataset_path FILE`` in the hub set's schema (``code``,
``problem_id``, ``name``; ``level`` optional). Evaluation answers the same problems (a benchmark), or
``--env.eval_dataset_path``.

``python environments/kernelbench_env/kernelbench_env.py {serve,process,evaluate}``
"""

from __future__ import annotations

import asyncio
import contextvars
import glob
import logging
from collections.abc import Sequence
from typing import Any, Optional

from pydantic import Field

from atroposlib.envs.config_defaults import LocalServerDefaults
from atroposlib.envs.data_loading import hub_split, load_rows
from atroposlib.envs.reporting import mean
from atroposlib.envs.single_turn import SingleTurnEnv, SingleTurnEnvConfig
from atroposlib.sandbox import Sandbox, SandboxError, SandboxLimits

try:
    from environments.kernelbench_env.kernel_reply import extract_model_new
    from environments.kernelbench_env.kernel_runner import KernelResult, KernelRunner, RunnerSettings
except ModuleNotFoundError:  # run as a script: this folder is on the path
    from kernel_reply import extract_model_new
    from kernel_runner import KernelResult, KernelRunner, RunnerSettings

logger = logging.getLogger(__name__)

HUB_NAME = "ScalingIntelligence/KernelBench"
#: Set while a training group is scored, so that only training verdicts feed the ``train/...`` metrics.
_TRAINING = contextvars.ContextVar("kernelbench_training", default=False)
REQUIRED_FIELDS = ("code", "problem_id", "name")
SYSTEM_PROMPT = (
    "You write custom GPU kernels to speed up PyTorch models. You may think inside <think> </think> tags "
    "first. Then answer with exactly one ```python code block holding a complete module that defines "
    "class ModelNew (same constructor arguments and forward signature as Model, same outputs). Write the "
    "kernels inline: CUDA C++ through torch.utils.cpp_extension.load_inline, or Triton. Give no other "
    "code block defining ModelNew."
)


def kernel_reward(result: KernelResult, compile_reward: float, speedup_weight: float) -> float:
    """0 unless built; ``compile_reward`` if built but wrong; 1 (+ ``speedup_weight * (speedup - 1)``
    when measured faster) if it matches the reference."""
    if not result.compiled:
        return 0.0
    if not result.correct:
        return compile_reward
    speedup = result.speedup
    return 1.0 + (speedup_weight * (speedup - 1.0) if speedup and speedup > 1.0 else 0.0)


def gpu_device_nodes(device: str) -> list[str]:
    """The host's NVIDIA device nodes a candidate needs on ``device`` (``cuda...``): ``/dev/nvidiactl``,
    ``/dev/nvidia0``..., ``/dev/nvidia-uvm``, ``/dev/nvidia-caps``; none for ``cpu``."""
    return sorted(glob.glob("/dev/nvidia*")) if device.startswith("cuda") else []


class KernelBenchEnvConfig(SingleTurnEnvConfig):
    """SingleTurnEnvConfig plus the problems, the device, the comparison and the sandbox's limits."""

    group_size: int = 2
    max_token_length: int = 2048
    batch_size: int = 1
    steps_per_eval: int = 1
    total_steps: int = 1000
    use_wandb: bool = False
    level: int = Field(1, ge=1, le=4, description="KernelBench level (hub split level_N)")
    problem_id: Optional[int] = Field(None, description="train on this problem only (default: all)")
    dataset_path: Optional[str] = Field(None, description="local problems (code, problem_id, name)")
    eval_dataset_path: Optional[str] = Field(None, description="local evaluation problems")
    device: str = Field("cuda", description="where kernels run: 'cuda' (scoring) or 'cpu' (tests only)")
    correct_trials: int = Field(5, ge=1, description="seeded inputs the outputs are compared on")
    perf_trials: int = Field(100, ge=1, description="timed runs of each model (CUDA)")
    measure_performance: bool = Field(True, description="time the candidate against the reference (CUDA)")
    atol: float = Field(1e-2, ge=0.0, description="absolute tolerance of the comparison")
    rtol: float = Field(1e-2, ge=0.0, description="relative tolerance of the comparison")
    compile_reward: float = Field(0.3, description="reward of a candidate that builds but is wrong")
    speedup_weight: float = Field(1.0, ge=0.0, description="reward per unit of speed-up above 1")
    eval_timeout_seconds: float = Field(300.0, gt=0, description="wall-clock limit of one candidate's check")
    sandbox_memory_mb: int = Field(
        1 << 20, ge=64, description="address space per process in MiB (CUDA reserves a lot of it)"
    )
    sandbox_disk_mb: int = Field(4096, ge=64, description="private tmpfs for builds, MiB")
    sandbox_parallel: int = Field(1, ge=1, description="candidates checked at once (timings share the GPU)")
    sandbox_extra_paths: list[str] = Field(
        ["/usr/local/cuda"], description="host paths bound read-only in the sandbox (the CUDA toolkit)"
    )


class KernelBenchEnv(LocalServerDefaults, SingleTurnEnv):
    """KernelBench problems, scored by building and running the reply's ``ModelNew`` (see the module
    docstring)."""

    name = "kernelbench_parallel"
    env_config_cls = KernelBenchEnvConfig
    config: KernelBenchEnvConfig
    default_model = "Qwen/Qwen3-4B"
    default_server_settings = {"num_requests_for_eval": 64}

    def __init__(self, config: KernelBenchEnvConfig, server_configs, slurm=False, testing=False):
        super().__init__(config, server_configs, slurm, testing)
        self.kernel_runner: Optional[KernelRunner] = None
        self.results: list[KernelResult] = []

    @classmethod
    def default_env_config(cls) -> KernelBenchEnvConfig:
        return cls.env_config_cls(tokenizer_name=cls.default_model)

    # -- set-up -----------------------------------------------------------------------------------------
    def _rows(self, path: Optional[str]) -> list[dict[str, Any]]:
        cfg = self.config
        split = f"level_{cfg.level}"
        rows = load_rows(path, hub_split(HUB_NAME, split), REQUIRED_FIELDS, f"{HUB_NAME} ({split})")
        if cfg.problem_id is not None:
            rows = [r for r in rows if int(r["problem_id"]) == cfg.problem_id]
            if not rows:
                raise ValueError(f"problem_id {cfg.problem_id} is not in {path or HUB_NAME} ({split})")
        return rows

    def _make_runner(self) -> KernelRunner:
        cfg = self.config
        if cfg.device.startswith("cuda"):
            import torch

            if not torch.cuda.is_available():
                raise RuntimeError(
                    "KernelBench scoring needs a CUDA device and torch sees none here "
                    "(--env.device cpu checks pure-PyTorch candidates for correctness only, for testing)"
                )
        elif cfg.measure_performance:
            logger.warning(
                "%s: speed-up is measured on CUDA only; device %s checks correctness", self.name, cfg.device
            )
        limits = SandboxLimits(
            cpu_seconds=max(1, int(cfg.eval_timeout_seconds)),
            wall_seconds=cfg.eval_timeout_seconds,
            memory_mb=cfg.sandbox_memory_mb,
            file_size_mb=min(cfg.sandbox_disk_mb, 1024),
            disk_mb=cfg.sandbox_disk_mb,
            max_processes=512,
            max_open_files=4096,
        )
        sandbox = Sandbox(
            cfg.sandbox_parallel,
            limits,
            extra_ro_paths=cfg.sandbox_extra_paths,
            devices=gpu_device_nodes(cfg.device),
        )
        try:
            sandbox.check()
        except SandboxError as exc:
            raise SandboxError(f"KernelBench needs the sandbox, which cannot run here: {exc}") from None
        settings = RunnerSettings(
            cfg.device, cfg.correct_trials, cfg.perf_trials, cfg.measure_performance, cfg.atol, cfg.rtol
        )
        return KernelRunner(sandbox, limits, settings)

    async def setup(self) -> None:
        self.train = self._rows(self.config.dataset_path)
        self.test = self._rows(self.config.eval_dataset_path) if self.config.eval_dataset_path else self.train
        self.kernel_runner = self._make_runner()
        if not await self.kernel_runner.device_reachable():
            raise RuntimeError(
                f"KernelBench scoring needs {self.config.device} inside the sandbox, and programs there see no "
                "CUDA device (the sandbox does not pass the GPU's device files through)"
            )

    # -- the task ---------------------------------------------------------------------------------------
    def prompt_messages(self, item: dict[str, Any]) -> list[dict[str, str]]:
        user = (
            f"KernelBench level {item.get('level', self.config.level)}, problem {item['problem_id']} "
            f"({item['name']}). The reference architecture:\n\n```python\n{item['code'].strip()}\n```\n\n"
            "Write ModelNew: replace the PyTorch operators of Model with custom kernels for speed-ups, "
            "keeping the outputs the same."
        )
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]

    async def check_reply(self, reply: str, item: dict[str, Any]) -> KernelResult:
        """The harness's verdict on a reply (not compiled, with the parse problem, when it has no block)."""
        parsed = extract_model_new(reply)
        if parsed.code is None:
            return KernelResult(False, False, error=f"reply: {parsed.problem}")
        assert self.kernel_runner is not None, "setup() builds the runner"
        return await self.kernel_runner.evaluate(item["code"], parsed.code)

    async def collect_trajectories(self, item: dict[str, Any]):
        token = _TRAINING.set(True)
        try:
            return await super().collect_trajectories(item)
        finally:
            _TRAINING.reset(token)

    async def score_replies_async(self, replies: Sequence[str], item: dict[str, Any]) -> list[float]:
        results = await asyncio.gather(*(self.check_reply(r, item) for r in replies))
        if _TRAINING.get():
            self.results.extend(results)
        cfg = self.config
        return [kernel_reward(r, cfg.compile_reward, cfg.speedup_weight) for r in results]

    def eval_sample_fields(self, item: dict[str, Any]) -> dict[str, Any]:
        return {"problem_id": item["problem_id"], "name": item["name"]}

    def extra_eval_metrics(self, samples: Sequence[dict[str, Any]]) -> dict[str, float]:
        built = self.config.compile_reward if self.config.compile_reward > 0 else 1.0
        return {"eval/compiled_rate": mean([1.0 if s["score"] >= built else 0.0 for s in samples])}

    async def wandb_log(self, wandb_metrics: Optional[dict] = None) -> None:
        wandb_metrics = dict(wandb_metrics or {})
        if self.results:
            wandb_metrics["train/compiled_rate"] = mean([float(r.compiled) for r in self.results])
            wandb_metrics["train/correct_rate"] = mean([float(r.correct) for r in self.results])
            speedups = [r.speedup for r in self.results if r.speedup is not None]
            if speedups:
                wandb_metrics["train/mean_speedup"] = mean(speedups)
        self.results = []
        await super().wandb_log(wandb_metrics)


if __name__ == "__main__":
    KernelBenchEnv.cli()
