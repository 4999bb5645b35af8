"""PyTorch optimizer coding: write a ``torch.optim.Optimizer`` subclass that trains a small network well.

Each item is a training task: ``architecture`` (``mnist``: ten classes of noisy 8x8 digit-like images,
an MLP 64-32-10; ``classification_small``: four classes a random teacher network assigns to 16 features,
an MLP 16-32-4; ``tabular``: a teacher network's regression target on 8 features, an MLP 8-32-1 with
mean-squared error) and a seed that draws its data and the model's initial weights. The model answers
with one Python code block defining one optimizer class (see :mod:`optimizer_reply` for what counts and
the rules: allowed imports, no torch optimizer inside, no reaching outside the module).

Scoring, inside the sandbox (:mod:`atroposlib.sandbox`, bubblewrap; :mod:`optimizer_harness`): the same
initial model is trained for ``max_epochs`` epochs on the same minibatches by the baseline
(``baseline_optimizer``, Adam at ``baseline_lr``) and by ``YourClass(model.parameters())``, whose
``step()`` is called after each backward; both are scored on a held-out set drawn afterwards. Reward
(:func:`optimizer_runner.optimizer_reward`): 0 for a malformed or hedged reply, a broken rule, a class
that fails to build or crashes, a training loss that stops being finite (diverged), parameters changed
outside ``step()`` or torch patched (cheats), a run past ``timeout`` seconds, or a held-out loss no lower
than the untrained model's; else ``compile_reward`` (0.2) + 0.8 x the candidate's loss reduction as a
share of the baseline's, capped at ``progress_cap`` (1.5): 1.0 when it matches the baseline. Evaluation
counts a reply as correct at 1.0 and adds ``eval/ran_rate`` and ``eval/beat_baseline_rate``; training
logs ``train/ran_rate``, ``train/cheat_rate`` and ``train/mean_progress``.

Data: the tasks are generated (``num_train_tasks`` seeds of ``architecture`` for training, others for
evaluation), or ``--env.dataset_path`` / ``--env.eval_dataset_path`` rows of ``architecture`` and ``seed``.

``python environments/community/pytorch_optimizer_coding/optimizer_benchmark_environmenr.py {serve,process,evaluate}``
"""

from __future__ import annotations

import asyncio
import contextvars
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar, Literal, Optional

from pydantic import Field

from atroposlib.envs.data_loading import DatasetError, check_rows, read_local_rows
from atroposlib.envs.declared_defaults import DeclaredDefaults
from atroposlib.envs.reply_fields import ReplyFields
from atroposlib.envs.reporting import mean
from atroposlib.envs.single_turn import SingleTurnEnv, SingleTurnEnvConfig
from atroposlib.sandbox import Sandbox, SandboxError, SandboxLimits

try:
    from environments.community.pytorch_optimizer_coding.optimizer_harness import SHAPES
    from environments.community.pytorch_optimizer_coding.optimizer_reply import (
        ALLOWED_IMPORTS,
        extract_optimizer,
    )
    from environments.community.pytorch_optimizer_coding.optimizer_runner import (
        BenchmarkResult,
        BenchmarkSettings,
        OptimizerRunner,
        optimizer_reward,
    )
except ModuleNotFoundError:  # run as a script: this folder is on the path
    from optimizer_harness import SHAPES
    from optimizer_reply import ALLOWED_IMPORTS, extract_optimizer
    from optimizer_runner import BenchmarkResult, BenchmarkSettings, OptimizerRunner, optimizer_reward

#: Set while a training group is scored, so that only training verdicts feed the ``train/...`` metrics.
_TRAINING = contextvars.ContextVar("optimizer_training", default=False)
ARCHITECTURES = tuple(SHAPES)
TASK_TEXT = {
    "mnist": "classify noisy 8x8 digit-like images (64 inputs, 10 classes) with an MLP 64-32-10 "
    "(ReLU), cross-entropy loss",
    "classification_small": "classify 16 real features into 4 classes with an MLP 16-32-4 (ReLU), "
    "cross-entropy loss",
    "tabular": "regress one target from 8 real features with an MLP 8-32-1 (ReLU), mean-squared error",
}
SYSTEM_PROMPT = (
    "You design PyTorch optimizers. You may think inside <think> </think> tags first. Then answer with "
    "exactly one ```python code block defining one class that subclasses torch.optim.Optimizer. It is "
    "built as YourOptimizer(model.parameters()), so every other constructor argument needs a default; "
    "step(closure=None) is called with no closure after each backward pass and must update the "
    "parameters in place. Write the update rule yourself: torch's own optimizers (SGD, Adam, ...) may not "
    f"be used. Import only from: {', '.join(sorted(ALLOWED_IMPORTS - {'__future__'}))}. Change parameters "
    "only inside step()."
)


@dataclass(frozen=True)
class OptimizerTask:
    """One training task: the ``architecture`` and the ``seed`` of its data and initial weights."""

    architecture: str
    seed: int


def tasks_from_rows(rows: list[dict[str, Any]], source: str) -> list[OptimizerTask]:
    """Tasks of local rows (``architecture``, ``seed``); :class:`DatasetError` naming the row and field."""
    check_rows(rows, ["architecture", "seed"], source)
    tasks = []
    for index, row in enumerate(rows):
        if row["architecture"] not in ARCHITECTURES:
            raise DatasetError(
                f"{source}: row {index}: field 'architecture' must be one of {', '.join(ARCHITECTURES)}"
            )
        if not isinstance(row["seed"], int) or isinstance(row["seed"], bool):
            raise DatasetError(f"{source}: row {index}: field 'seed' must be a whole number")
        tasks.append(OptimizerTask(row["architecture"], row["seed"]))
    return tasks


class OptimizerBenchmarkEnvConfig(SingleTurnEnvConfig):
    """SingleTurnEnvConfig plus the task, the benchmark's training run, the reward and the sandbox."""

    ignored_original_keys: ClassVar[dict[str, str]] = {
        "novelty_threshold": "no novelty judge: the reward is the measured training against the baseline",
    }

    architecture: Literal["mnist", "classification_small", "tabular"] = Field(
        "mnist", description="training task of the generated items"
    )
    max_epochs: int = Field(2, ge=1, le=50, description="epochs each optimizer trains for")
    timeout: int = Field(300, ge=5, description="wall-clock seconds one candidate's benchmark may take")
    baseline_optimizer: Literal["adam", "sgd"] = Field("adam", description="optimizer compared against")
    baseline_lr: float = Field(1e-2, gt=0, description="the baseline's learning rate")
    task_batch_size: int = Field(64, ge=1, description="minibatch size of the training task")
    train_size: int = Field(2048, ge=16, description="training examples of a task")
    test_size: int = Field(1024, ge=16, description="held-out examples of a task")
    compile_reward: float = Field(
        0.2, ge=0.0, lt=1.0, description="reward of an optimizer that trains at all"
    )
    progress_cap: float = Field(
        1.5, ge=1.0, description="largest loss reduction relative to the baseline rewarded"
    )
    num_train_tasks: int = Field(256, ge=1, description="generated training seeds")
    num_eval_tasks: int = Field(8, ge=1, description="generated evaluation seeds (disjoint from training)")
    sandbox_memory_mb: int = Field(16384, ge=256, description="address space per process in MiB (torch)")
    sandbox_parallel: int = Field(2, ge=1, description="benchmarks run at once")
    dataset_path: Optional[str] = Field(None, description="local tasks (architecture, seed)")
    eval_dataset_path: Optional[str] = Field(None, description="local evaluation tasks")


class OptimizerBenchmarkEnvironment(DeclaredDefaults, ReplyFields, SingleTurnEnv):
    """Rewards optimizer classes by how well they train a task's model against the baseline."""

    name = "pytorch_optimizer_coding"
    default_env_values = dict(group_size=8, total_steps=1000, batch_size=16, steps_per_eval=100)
    default_model = "NousResearch/DeepHermes-3-Llama-3-8B-Preview"
    env_config_cls = OptimizerBenchmarkEnvConfig
    config: OptimizerBenchmarkEnvConfig

    def __init__(self, config: OptimizerBenchmarkEnvConfig, server_configs, slurm=False, testing=False):
        super().__init__(config, server_configs, slurm, testing)
        self.architecture = config.architecture
        self.benchmarker: Optional[OptimizerRunner] = None
        self.results: list[BenchmarkResult] = []

    def _make_runner(self) -> OptimizerRunner:
        cfg = self.config
        limits = SandboxLimits(
            cpu_seconds=cfg.timeout,
            wall_seconds=float(cfg.timeout),
            memory_mb=cfg.sandbox_memory_mb,
            max_processes=256,
            max_open_files=1024,
        )
        sandbox = Sandbox(cfg.sandbox_parallel, limits)
        try:
            sandbox.check()
        except SandboxError as exc:
            raise SandboxError(
                f"{self.name} runs optimizers in the sandbox, which cannot run here: {exc}"
            ) from None
        settings = BenchmarkSettings(
            cfg.max_epochs, cfg.task_batch_size, cfg.train_size, cfg.test_size, cfg.baseline_optimizer,
            cfg.baseline_lr,
        )  # fmt: skip
        return OptimizerRunner(sandbox, limits, settings)

    def _tasks(self, path: Optional[str], seeds: range) -> list[OptimizerTask]:
        if path:
            return tasks_from_rows(read_local_rows(path), path)
        return [OptimizerTask(self.config.architecture, seed) for seed in seeds]

    async def setup(self) -> None:
        cfg = self.config
        self.train = self._tasks(cfg.dataset_path, range(cfg.num_train_tasks))
        eval_seeds = range(1_000_000, 1_000_000 + cfg.num_eval_tasks)
        self.test = self._tasks(cfg.eval_dataset_path, eval_seeds)
        if not self.train or not self.test:
            raise DatasetError(f"{cfg.dataset_path if not self.train else cfg.eval_dataset_path}: no tasks")
        self.benchmarker = self._make_runner()

    def prompt_messages(self, item: OptimizerTask) -> list[dict[str, str]]:
        cfg = self.config
        baseline = {"adam": "Adam", "sgd": "SGD"}[cfg.baseline_optimizer]
        user = (
            f"Task: {TASK_TEXT[item.architecture]}. {cfg.train_size} training examples, minibatches of "
            f"{cfg.task_batch_size}, {cfg.max_epochs} epochs; the score is the loss on held-out data. "
            f"Your optimizer is compared with {baseline} (lr={cfg.baseline_lr:g}) on the same model, data "
            "and initial weights. Write an optimizer that trains this model faster and better."
        )
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]

    async def check_reply(self, reply: str, item: OptimizerTask) -> BenchmarkResult:
        """The benchmark of a reply (not run, with the reason, when the reply breaks a rule)."""
        parsed = extract_optimizer(reply)
        if parsed.code is None or parsed.class_name is None:
            return BenchmarkResult(False, error=f"reply: {parsed.problem}")
        assert self.benchmarker is not None, "setup() builds the runner"
        return await self.benchmarker.benchmark(parsed.code, parsed.class_name, item.architecture, item.seed)

    def reward(self, result: BenchmarkResult) -> float:
        return optimizer_reward(result, self.config.compile_reward, self.config.progress_cap)

    async def collect_trajectories(self, item: OptimizerTask):
        token = _TRAINING.set(True)
        try:
            return await super().collect_trajectories(item)
        finally:
            _TRAINING.reset(token)

    async def score_replies_async(self, replies: Sequence[str], item: OptimizerTask) -> list[float]:
        results = await asyncio.gather(*(self.check_reply(r, item) for r in replies))
        if _TRAINING.get():
            self.results.extend(results)
        return [self.reward(r) for r in results]

    def eval_sample_fields(self, item: OptimizerTask) -> dict[str, Any]:
        return {"architecture": item.architecture, "seed": item.seed}

    def reply_fields(self, reply: str, item: OptimizerTask) -> dict[str, Any]:
        parsed = extract_optimizer(reply)
        return {"optimizer_class": parsed.class_name, "reply_problem": parsed.problem}

    def extra_eval_metrics(self, samples: Sequence[dict[str, Any]]) -> dict[str, float]:
        return {
            "eval/ran_rate": mean([1.0 if s["score"] > 0 else 0.0 for s in samples]),
            "eval/beat_baseline_rate": mean([1.0 if s["score"] > 1.0 else 0.0 for s in samples]),
        }

    async def wandb_log(self, wandb_metrics: Optional[dict] = None) -> None:
        wandb_metrics = dict(wandb_metrics or {})
        if self.results:
            wandb_metrics["train/ran_rate"] = mean([float(r.trained) for r in self.results])
            wandb_metrics["train/cheat_rate"] = mean([float(r.cheat is not None) for r in self.results])
            wandb_metrics["train/mean_progress"] = mean([min(r.progress, 10.0) for r in self.results])
        self.results = []
        await super().wandb_log(wandb_metrics)


if __name__ == "__main__":
    OptimizerBenchmarkEnvironment.cli()
