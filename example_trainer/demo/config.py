"""The demo's settings (:class:`DemoConfig`) and its command line: one flag per field, same names with dashes."""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_core import PydanticUndefined

from example_trainer.demo.task import DemoTask, load_task

PROG = "python -m example_trainer.demo"


class DemoConfig(BaseModel):
    """Every setting of the demo; the command line uses the same names with dashes."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    # --- run ------------------------------------------------------------------------------------
    steps: int = Field(80, ge=1, description="GRPO optimizer steps")
    eval_size: int = Field(500, ge=1, description="held-out problems (the environment's eval split)")
    seed: int = Field(0, description="seed of the task, the warm start and the trainer")
    run_dir: str | None = Field(None, description="logs, checkpoints, summary (default runs/demo-<time>)")
    cache_dir: str | None = Field(
        None, description="warm-start cache (default $ATROPOS_CACHE_DIR/demo or ~/.cache/atroposlib/demo)"
    )
    model: str | None = Field(None, description="local model directory (default: the tiny local model)")
    keep_checkpoints: bool = Field(False, description="keep every step_N checkpoint, not only the final one")
    timeout: float = Field(1800.0, gt=0, description="give up (and stop everything) after this many seconds")

    # --- task -----------------------------------------------------------------------------------
    task: str = Field(
        "arithmetic",
        description="the task: arithmetic, or module:factory / path.py:factory building a "
        "example_trainer.demo.task.DemoTask from the task settings",
    )
    min_digits: int = Field(1, ge=1, le=6, description="fewest digits per operand")
    max_digits: int = Field(2, ge=1, le=6, description="most digits per operand")
    operations: list[Literal["+", "-", "*"]] = Field(default_factory=lambda: ["+"], description="operators")

    # --- supervised warm start --------------------------------------------------------------------
    sft_steps: int = Field(450, ge=0, description="warm-start steps (0: start GRPO from the base model)")
    sft_batch_size: int = Field(64, ge=1, description="warm-start examples per step")
    sft_lr: float = Field(1e-3, gt=0, description="warm-start learning rate (constant after the warmup)")
    sft_warmup_steps: int = Field(100, ge=0, description="warm-start linear warmup steps")

    # --- GRPO -----------------------------------------------------------------------------------
    group_size: int = Field(8, ge=2, description="rollouts per problem")
    batch_size: int = Field(256, ge=2, description="sequences per optimizer step")
    lr: float = Field(1e-4, gt=0, description="GRPO learning rate")
    temperature: float = Field(
        1.0, gt=0, description="sampling temperature of the rollouts (the trainer scores them at 1.0)"
    )
    clip_eps: float = Field(0.2, gt=0, lt=1, description="PPO clip range")
    max_answer_tokens: int = Field(8, ge=1, description="generation budget per reply")
    refresh_mode: Literal["reload", "restart"] = Field(
        "reload", description="refresh vLLM in place (reload) or by restarting it"
    )
    inference_backend: Literal["vllm", "hf"] = Field(
        "vllm",
        description="inference server: vllm, or hf (Hugging Face generate in one light process; "
        "faster for the tiny model on a few cores)",
    )
    inference_threads: int = Field(1, ge=1, description="torch threads of the hf inference server")
    env_workers: int = Field(
        32, ge=1, description="groups the environment generates concurrently (one request each)"
    )
    max_batches_offpolicy: int = Field(
        2,
        ge=1,
        description="batches the environment may have queued ahead of the trainer (it pauses beyond); "
        "each one more lets rollouts be one step staler",
    )
    vllm_startup_timeout: float = Field(
        600.0, gt=0, description="seconds to wait for the inference server's /health"
    )
    torch_threads: int = Field(
        1,
        ge=1,
        description="CPU threads per torch process (demo, trainer); small models run fastest with one "
        "while the other services share the cores",
    )

    # --- losses, staleness, distillation (the trainer's flags of the same names) ------------------
    loss_type: Literal["grpo", "dr_grpo", "dapo", "gspo", "cispo"] = Field("grpo", description="loss")
    clip_eps_low: float | None = Field(None, gt=0, lt=1, description="lower clip range (default: --clip-eps)")
    clip_eps_high: float | None = Field(None, gt=0, description="upper clip range (default: --clip-eps)")
    advantage: Literal["grpo", "rloo", "none"] = Field("grpo", description="group baseline")
    tis_cap: float | None = Field(
        None, ge=1, description="truncated importance sampling cap (off by default)"
    )
    max_staleness: int | None = Field(
        None,
        ge=0,
        description="the trainer trains no rollout more than N steps old; the environment waits for the "
        "trainer instead of generating older ones (off by default)",
    )
    env_max_staleness: int | None = Field(
        None,
        ge=0,
        description="the environment's own bound (default: the trainer's --max-staleness); a value above "
        "--max-batches-offpolicy leaves it generating as without a bound",
    )
    teacher_model: str | None = Field(
        None,
        description="on-policy distillation from this local model: it is served by "
        "example_trainer.inference.teacher_server and every group carries its top-k logprobs",
    )
    teacher_top_k: int = Field(4, ge=0, description="teacher logprobs per position besides the sampled token")
    distill_coef: float = Field(
        1.0, ge=0, description="weight of the distillation term (with --teacher-model)"
    )
    distill_kind: Literal["reverse", "forward"] = Field(
        "reverse", description="reverse KL on the student's tokens, or forward KL over the teacher's top-k"
    )
    rl_coef: float = Field(
        1.0, ge=0, description="weight of the RL loss (0 with --teacher-model: distillation alone)"
    )

    @field_validator("operations", mode="before")
    @classmethod
    def _split_operations(cls, value: Any) -> Any:
        if isinstance(value, str):
            return [op for op in value.replace(",", " ").split() if op]
        return value

    def task_settings(self) -> dict[str, Any]:
        """The task's settings, shared by the warm start, the environment and the evaluation."""
        return {
            "min_digits": self.min_digits,
            "max_digits": self.max_digits,
            "operations": list(self.operations),
            "seed": self.seed,
            "eval_size": self.eval_size,
        }

    def load_task(self) -> DemoTask:
        """The task of this run (:func:`example_trainer.demo.task.load_task`)."""
        return load_task(self.task, self.task_settings())

    def sft_settings(self) -> Any:
        """The warm start's supervised settings (:class:`~example_trainer.demo.sft_warmstart.SftSettings`)."""
        from example_trainer.demo.sft_warmstart import SftSettings

        # each warm-start setting is the ``sft_`` option of the same name
        prefixed = {
            name: getattr(self, f"sft_{name}") for name in ("steps", "batch_size", "lr", "warmup_steps")
        }
        return SftSettings(seed=self.seed, **prefixed)

    def resolved_run_dir(self) -> Path:
        if self.run_dir:
            return Path(self.run_dir)
        return Path("runs") / time.strftime("demo-%Y%m%d-%H%M%S")

    def resolved_cache_dir(self) -> Path:
        if self.cache_dir:
            return Path(self.cache_dir)
        from atroposlib.testing.tiny_model import default_cache_dir

        return default_cache_dir() / "demo"


# ---------------------------------------------------------------------------------------------
# command line
# ---------------------------------------------------------------------------------------------
def build_parser() -> argparse.ArgumentParser:
    """Flags named after :class:`DemoConfig` fields (``--eval-size`` for ``eval_size``)."""
    parser = argparse.ArgumentParser(
        prog=PROG,
        description="One-command CPU demo: warm start, GRPO with vLLM and the arithmetic environment, "
        "held-out accuracy before and after.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    for name, info in DemoConfig.model_fields.items():
        flag = "--" + name.replace("_", "-")
        default = None if info.default is PydanticUndefined else info.default
        if info.default_factory is not None:
            default = info.default_factory()
        # A None default means "computed at run time" (the description says how): not shown as a value.
        shown = argparse.SUPPRESS if default is None else default
        kwargs: dict[str, Any] = {"dest": name, "default": shown, "help": info.description or " "}
        if info.annotation is bool:
            kwargs["action"] = argparse.BooleanOptionalAction
        elif name == "operations":
            kwargs["nargs"] = "+"
        elif info.annotation in (int, float):
            kwargs["type"] = info.annotation
        elif name == "refresh_mode":
            kwargs["choices"] = ["reload", "restart"]
        elif name == "inference_backend":
            kwargs["choices"] = ["vllm", "hf"]
        parser.add_argument(flag, **kwargs)
    return parser


def config_from_argv(argv: Sequence[str] | None = None) -> DemoConfig:
    """Parse and validate; raises ``ValidationError`` for bad values (argparse exits 2 on bad flags)."""
    args = build_parser().parse_args(argv)
    return DemoConfig(**vars(args))


def describe_error(exc: ValidationError) -> str:
    """One line naming the offending flag(s)."""
    parts = []
    for err in exc.errors():
        loc = [str(p) for p in err.get("loc", ()) if not isinstance(p, int)]
        flag = "--" + loc[0].replace("_", "-") if loc else "config"
        parts.append(f"{flag}: {err.get('msg', 'invalid value').removeprefix('Value error, ')}")
    return "; ".join(parts)
