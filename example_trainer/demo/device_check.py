"""The device check: the real training path on one GPU, in a few minutes, with nothing from a model hub.

    bash scripts/device_check.sh                     # CUDA, Qwen2.5-0.5B's shape, 20 steps per mode
    bash scripts/device_check.sh --device cpu --shape tiny --steps 2   # the same path on a CPU, in seconds

1. Builds a randomly initialised model of Qwen2.5-0.5B's configuration (24 layers, width 896, 14 heads and 2
   key/value heads, 151,936-token vocabulary, tied embeddings) with the tiny local tokenizer, and gives it a
   short supervised warm start on the arithmetic task's training split (:mod:`example_trainer.demo.arithmetic_task`) (a random model never answers
   correctly, so GRPO would see only zero advantages and change nothing).
2. For each weight mode, starts ``run-api``, the trainer (in this process; it starts the inference server:
   vLLM where it is installed, else the repo's own ``hf`` server, which says so) and the arithmetic
   environment, and trains ``--steps`` GRPO steps:

   ``none-reload``     full weights, the server reloads each checkpoint in place (``--refresh-mode reload``)
   ``none-broadcast``  full weights broadcast into the server (``--refresh-mode broadcast``, no disk)
   ``shared_vllm``     the trainer trains the server's own tensors (CUDA IPC / CPU shared memory)
   ``lora_only``       LoRA adapters hot-swapped into the server

   After every refresh the server's logprobs of its greedy continuation of a fixed prompt are compared with
   the trained model's (they must agree within ``--tolerance``).
3. Prints one line per mode (steps/s, trainer tokens/s, refresh seconds, the largest logprob difference,
   peak GPU memory: the trainer's own and the whole device's) and writes ``summary.json`` in the run directory.
   Exit status 0 when every mode trained all its steps and every check agreed, 1 otherwise.
"""

from __future__ import annotations

import argparse
import json
import logging
import math
import os
import shutil
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

REPO_ROOT = Path(__file__).resolve().parents[2]
MODES = ("shared_vllm", "none-broadcast", "lora_only", "none-reload")
#: Qwen2.5-0.5B's architecture (its config.json), built locally with random weights.
QWEN25_05B = {
    "architectures": ["Qwen2ForCausalLM"], "hidden_size": 896, "intermediate_size": 4864,
    "num_hidden_layers": 24, "num_attention_heads": 14, "num_key_value_heads": 2, "vocab_size": 151936,
    "max_position_embeddings": 32768, "rope_theta": 1000000.0, "rms_norm_eps": 1e-6,
    "tie_word_embeddings": True, "hidden_act": "silu", "use_sliding_window": False, "max_window_layers": 21,
}  # fmt: skip
PROMPT_TEXT = "What is 3 + 4?"
logger = logging.getLogger("atropos-device-check")


class DeviceCheckConfig(BaseModel):
    """Settings of the device check; the command line uses the same names with dashes."""

    model_config = ConfigDict(extra="forbid")

    device: str = Field("cuda", description="cuda (or cuda:N) or cpu")
    shape: Literal["qwen2.5-0.5b", "tiny"] = Field("qwen2.5-0.5b", description="model architecture")
    modes: list[str] = Field(default_factory=lambda: list(MODES), description="weight modes to run")
    steps: int = Field(20, ge=1, description="GRPO steps per mode")
    backend: Literal["auto", "vllm", "hf"] = Field(
        "auto", description="inference server (auto: vllm if installed)"
    )
    group_size: int = Field(8, ge=2)
    batch_size: int = Field(64, ge=2, description="sequences per optimizer step")
    micro_batch: int = Field(16, ge=1, description="sequences per micro-batch")
    lr: float = Field(2e-6, gt=0)
    sft_steps: int = Field(100, ge=0, description="supervised warm-start steps")
    sft_lr: float = Field(3e-4, gt=0)
    max_answer_tokens: int = Field(8, ge=1)
    tolerance: float | None = Field(
        None, gt=0, description="largest logprob difference (default 1e-3 on CUDA, 1e-5 on cpu)"
    )
    run_dir: str | None = Field(None, description="default runs/device-check-<time>")
    mode_timeout: float = Field(300.0, gt=0, description="seconds per mode before it counts as failed")
    time_budget: float = Field(
        540.0, gt=0, description="seconds for the whole check: a mode is not started with under 30 s left"
    )
    seed: int = 0


def resolve_backend(requested: str) -> tuple[str, str]:
    """(backend, note): vLLM when installed (and asked for), else the repo's hf server."""
    try:
        import vllm  # noqa: F401

        has_vllm = True
    except ImportError:
        has_vllm = False
    if requested == "vllm" and not has_vllm:
        raise SystemExit("device_check: --backend vllm, but vLLM is not installed here")
    if requested == "hf" or not has_vllm:
        note = "" if requested == "hf" else "vLLM is not installed here: using the repo's hf inference server"
        return "hf", note
    return "vllm", ""


# ----------------------------------------------------------------------------------------------
# the model
# ----------------------------------------------------------------------------------------------


def build_model(cfg: DeviceCheckConfig, out: Path) -> Path:
    """A random model of ``cfg.shape`` with the tiny tokenizer, warm-started on arithmetic, saved to ``out``."""
    import torch
    from transformers import AutoConfig, AutoModelForCausalLM, AutoTokenizer, Qwen2Config

    from atroposlib.testing.tiny_model import build_tiny_model

    tiny = build_tiny_model()
    tokenizer = AutoTokenizer.from_pretrained(tiny)
    if cfg.shape == "tiny":
        config = AutoConfig.from_pretrained(tiny)
    else:
        config = Qwen2Config(
            **QWEN25_05B, bos_token_id=tokenizer.bos_token_id, eos_token_id=tokenizer.eos_token_id
        )
    torch.manual_seed(cfg.seed)
    start = time.perf_counter()
    with torch.device(cfg.device):
        model = AutoModelForCausalLM.from_config(config).float()
    params = sum(p.numel() for p in model.parameters())
    losses = warm_start(model, tokenizer, cfg)
    model.save_pretrained(out, safe_serialization=True)
    tokenizer.save_pretrained(out)
    logger.info(
        "built a random %s model (%.0f M parameters) and warm-started it (%d steps, loss %.3f -> %.3f) in %.0f s",
        cfg.shape, params / 1e6, len(losses), losses[0] if losses else math.nan, losses[-1] if losses else math.nan,
        time.perf_counter() - start,
    )  # fmt: skip
    del model
    if cfg.device.startswith("cuda"):
        torch.cuda.empty_cache()
    return out


def task_settings() -> dict[str, Any]:
    return {"seed": 0, "min_digits": 1, "max_digits": 1, "operations": ["+"], "eval_size": 16}


def demo_task() -> Any:
    """The arithmetic task (:class:`~example_trainer.demo.task.DemoTask`) with :func:`task_settings`."""
    from example_trainer.demo.task import load_task

    return load_task("arithmetic", task_settings())


def warm_start(model: Any, tokenizer: Any, cfg: DeviceCheckConfig) -> list[float]:
    """A few supervised steps on the environment's training problems (answer format), on ``cfg.device``."""
    import torch

    from example_trainer.demo.sft_warmstart import collate, encode_example

    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    optimizer = torch.optim.AdamW(model.parameters(), lr=cfg.sft_lr, weight_decay=0.0)
    examples = demo_task().sft_examples(cfg.sft_steps * 64)
    losses = []
    model.train()
    for step in range(cfg.sft_steps):
        batch = [encode_example(tokenizer, m, a) for m, a in (next(examples) for _ in range(64))]
        ids, attention, labels = (t.to(cfg.device) for t in collate(batch, pad))
        for group in optimizer.param_groups:
            group["lr"] = cfg.sft_lr * min(1.0, (step + 1) / 10)
        loss = model(input_ids=ids, attention_mask=attention, labels=labels).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        losses.append(float(loss.detach()))
    del optimizer
    return losses


# ----------------------------------------------------------------------------------------------
# one mode
# ----------------------------------------------------------------------------------------------


class SyncCheck:
    """The trainer's sync hook: server logprobs vs the model's, timing and device memory after each refresh."""

    def __init__(self, prompt_ids: list[int], device: str, save_path: Path) -> None:
        self.prompt = prompt_ids
        self.device = device
        self.save_path = save_path
        self.times: list[float] = []
        self.diffs: list[float] = []
        self.first_logprobs: list[float] = []
        self.device_peak = 0

    def __call__(self, step: int, model: Any, urls: list[str]) -> dict[str, float]:
        import torch

        from example_trainer.inference.served_logprobs import served_vs_model

        diff, _, served = served_vs_model(urls[0], model, self.prompt, max_tokens=6, device=self.device)
        self.diffs.append(diff)
        self.first_logprobs.append(served[0])
        # The server has loaded the newest checkpoint: older ones only fill the disk (a 0.5B model with
        # its optimizer state is 6 GB a step in the modes that refresh from checkpoints).
        olds = sorted(self.save_path.glob("step_*"), key=lambda p: int(p.name.split("_")[-1]))[:-1]
        for old in olds:
            shutil.rmtree(old, ignore_errors=True)
        self.times.append(time.perf_counter())
        if self.device.startswith("cuda"):
            free, total = torch.cuda.mem_get_info()
            self.device_peak = max(self.device_peak, total - free)
        return {"logprob_max_abs_diff": diff}


def trainer_settings(mode: str) -> dict[str, Any]:
    if mode == "none-reload":
        return {"weight_bridge_mode": "none", "refresh_mode": "reload"}
    if mode == "none-broadcast":
        return {"weight_bridge_mode": "none", "refresh_mode": "broadcast"}
    if mode == "shared_vllm":
        return {"weight_bridge_mode": "shared_vllm"}
    if mode == "lora_only":
        return {"weight_bridge_mode": "lora_only", "lora_r": 16, "lora_alpha": 32, "lora_dropout": 0.0}
    raise ValueError(f"unknown mode {mode!r} (one of {', '.join(MODES)})")


def env_command(cfg: DeviceCheckConfig, model_dir: Path, api_url: str, port: int, run: Path) -> list[str]:
    task = demo_task()
    return [
        sys.executable, str(task.env_script), "serve",
        "--env.tokenizer_name", str(model_dir), "--env.rollout_server_url", api_url,
        "--env.group_size", str(cfg.group_size), "--env.batch_size", str(cfg.batch_size),
        "--env.total_steps", str(cfg.steps + 4), "--env.max_token_length", "256", "--env.steps_per_eval", "0",
        "--env.use_wandb", "false", "--env.max_batches_offpolicy", "2", "--env.max_num_workers", "64",
        "--env.shutdown_timeout", "5", "--env.ensure_scores_are_not_same", "false",
        *task.env_flags(), "--env.temperature", "1.0",
        "--env.max_answer_tokens", str(cfg.max_answer_tokens),
        "--env.unsent_groups_path", str(run / "unsent_groups.jsonl"),
        "--openai.base_url", f"http://127.0.0.1:{port}/v1", "--openai.model_name", str(model_dir),
        "--openai.server_type", "vllm",
    ]  # fmt: skip


def run_mode(
    cfg: DeviceCheckConfig, mode: str, model_dir: Path, backend: str, root: Path, deadline: float
) -> dict[str, Any]:
    """Train ``cfg.steps`` steps in ``mode``; returns its summary (``ok`` False with ``error`` on failure)."""
    import torch
    from transformers import AutoTokenizer

    from atroposlib.testing.api_process import free_port, launch_api
    from example_trainer.demo.heldout_eval import chat_prompt_ids
    from example_trainer.grpo.loop import train

    run = root / mode
    shutil.rmtree(run, ignore_errors=True)
    (run / "logs").mkdir(parents=True)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    prompt = chat_prompt_ids(tokenizer, [{"role": "user", "content": PROMPT_TEXT}])
    check = SyncCheck(prompt, cfg.device, run / "ckpt")
    port = free_port()
    summary: dict[str, Any] = {"mode": mode, "backend": backend, "ok": False}
    deadline = min(deadline, time.monotonic() + cfg.mode_timeout)
    if cfg.device.startswith("cuda"):
        torch.cuda.reset_peak_memory_stats()
    history: list[dict[str, Any]] = []
    with launch_api(data_dir=run / "api") as api:
        config = mode_training_config(cfg, mode, model_dir, backend, api.url, port, run)
        env = _EnvironmentStarter(cfg, model_dir, api.url, port, run)
        started = time.perf_counter()
        try:
            result = train(config, should_stop=lambda: time.monotonic() > deadline, sync_hook=check)
            summary["steps"] = result.step
            summary["ok"] = result.step == cfg.steps and not result.stopped_early
            if not summary["ok"]:
                summary["error"] = f"trained {result.step} of {cfg.steps} steps in {cfg.mode_timeout:.0f} s"
            history = result.history
        except Exception as exc:  # noqa: BLE001 - reported per mode
            summary["error"] = f"{type(exc).__name__}: {exc}"
        finally:
            env.stop()
    summary["wall_s"] = time.perf_counter() - started
    summarise_mode(summary, history, check, cfg)
    return summary


def mode_training_config(
    cfg: DeviceCheckConfig, mode: str, model_dir: Path, backend: str, api_url: str, port: int, run: Path
) -> Any:
    """The trainer's settings for ``mode``: one refresh (and one sync check) after every step."""
    from example_trainer.grpo.config import TrainingConfig

    return TrainingConfig(
        model_name=str(model_dir), atropos_url=api_url, save_path=str(run / "ckpt"), device=cfg.device,
        optimizer="adamw", lr=cfg.lr, micro_batch_size=cfg.micro_batch,
        gradient_accumulation_steps=max(1, cfg.batch_size // cfg.micro_batch), seq_len=256,
        training_steps=cfg.steps, checkpoint_interval=0, refresh_interval=1, vllm_port=port,
        dtype="float32", train_dtype="float32", max_model_len=512, vllm_enforce_eager=True,
        vllm_gpu_memory_utilization=0.3, inference_backend=backend, log_dir=str(run / "logs"),
        vllm_startup_timeout=cfg.mode_timeout, seed=cfg.seed, gradient_checkpointing=False,
        **trainer_settings(mode),
    )  # fmt: skip


class _EnvironmentStarter:
    """Starts the environment, in a thread, once the inference server answers ``/health``."""

    def __init__(self, cfg: DeviceCheckConfig, model_dir: Path, api_url: str, port: int, run: Path) -> None:
        self.command = env_command(cfg, model_dir, api_url, port, run)
        self.health = f"http://127.0.0.1:{port}/health"
        self.log = run / "logs" / "env.log"
        self.proc: Any = None
        self.stopping = threading.Event()
        self.thread = threading.Thread(target=self._start_when_ready, daemon=True)
        self.thread.start()

    def _start_when_ready(self) -> None:
        from atroposlib.utils.processes import ServiceProcess, wait_http_ok

        while not self.stopping.is_set() and not wait_http_ok(self.health, timeout=1.0):
            pass
        if not self.stopping.is_set():
            self.proc = ServiceProcess(
                "environment",
                self.command,
                self.log,
                env={"WANDB_MODE": "offline", "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1"},
                cwd=REPO_ROOT,
            ).start()

    def stop(self) -> None:
        self.stopping.set()
        self.thread.join(timeout=10)
        if self.proc is not None:
            self.proc.stop(timeout=15)


def summarise_mode(
    summary: dict[str, Any], history: Sequence[dict[str, Any]], check: Any, cfg: DeviceCheckConfig
) -> None:
    """Add the mode's throughput, refresh time, rewards and sync-check results to ``summary``; a logprob
    difference over the tolerance fails the mode."""
    import torch

    train_s = sum(r.get("train/step_time_s", 0.0) for r in history)
    tokens = sum(r.get("train/tokens_per_s", 0.0) * r.get("train/step_time_s", 0.0) for r in history)
    if len(check.times) >= 2:
        summary["steps_per_s"] = (len(check.times) - 1) / (check.times[-1] - check.times[0])
    summary["trainer_tokens_per_s"] = tokens / train_s if train_s else None
    refresh = [r["train/refresh_s"] for r in history if "train/refresh_s" in r]
    summary["refresh_s_mean"] = sum(refresh) / len(refresh) if refresh else 0.0
    rewards = [
        r.get("train/kept_reward_mean") for r in history if r.get("train/kept_reward_mean") is not None
    ]
    summary["reward_first_last"] = [rewards[0], rewards[-1]] if rewards else None
    summary["checks"] = len(check.diffs)
    firsts = check.first_logprobs
    summary["served_logprob_change"] = max(firsts) - min(firsts) if firsts else None
    summary["logprob_max_abs_diff"] = max(check.diffs) if check.diffs else None
    if cfg.device.startswith("cuda"):
        summary["trainer_peak_gib"] = torch.cuda.max_memory_allocated() / 2**30
        summary["device_peak_gib"] = check.device_peak / 2**30
    tolerance = cfg.tolerance or (1e-5 if cfg.device == "cpu" else 1e-3)
    if summary["ok"] and (len(check.diffs) != cfg.steps or max(check.diffs) > tolerance):
        summary["ok"] = False
        summary["error"] = (
            f"server and trainer logprobs differ by up to {max(check.diffs):.2e} (> {tolerance:g})"
        )


def format_line(s: dict[str, Any]) -> str:
    def num(key: str, fmt: str) -> str:
        value = s.get(key)
        return format(value, fmt) if isinstance(value, int | float) else "-"

    line = (
        f"{s['mode']:<15} {'ok' if s['ok'] else 'FAILED':<6} steps/s {num('steps_per_s', '.2f')}  "
        f"trainer tok/s {num('trainer_tokens_per_s', '.0f')}  refresh {num('refresh_s_mean', '.3f')} s  "
        f"max |dlogp| {num('logprob_max_abs_diff', '.1e')} ({s.get('checks', 0)} checks; served logprob "
        f"moved {num('served_logprob_change', '.1e')})  reward {s.get('reward_first_last')}"
    )
    if "trainer_peak_gib" in s:
        line += f"  peak GPU: trainer {num('trainer_peak_gib', '.2f')} GiB, device {num('device_peak_gib', '.2f')} GiB"
    if s.get("error"):
        line += f"  [{s['error']}]"
    return line


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="device_check", description=__doc__.split("\n\n")[0])
    for name, info in DeviceCheckConfig.model_fields.items():
        flag = "--" + name.replace("_", "-")
        if name == "modes":
            parser.add_argument(flag, nargs="+", choices=MODES, default=None, help=info.description)
        else:
            parser.add_argument(flag, default=None, help=info.description)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    os.environ.setdefault("WANDB_MODE", "offline")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    args = build_parser().parse_args(argv)
    cfg = DeviceCheckConfig(**{k: v for k, v in vars(args).items() if v is not None})
    import torch

    if cfg.device.startswith("cuda") and not torch.cuda.is_available():
        print("device_check: CUDA is not available here (use --device cpu for the CPU path)", file=sys.stderr)
        return 2
    backend, note = resolve_backend(cfg.backend)
    root = Path(cfg.run_dir or REPO_ROOT / "runs" / f"device-check-{time.strftime('%Y%m%d-%H%M%S')}")
    root.mkdir(parents=True, exist_ok=True)
    card = torch.cuda.get_device_name(cfg.device) if cfg.device.startswith("cuda") else "cpu"
    print(f"device check on {card}; torch {torch.__version__}; run directory {root}", flush=True)
    if note:
        print(f"NOTE: {note}", flush=True)
    deadline = time.monotonic() + cfg.time_budget
    model_dir = build_model(cfg, root / "model")
    summaries = []
    for mode in cfg.modes:
        if time.monotonic() > deadline - 30:
            summaries.append({"mode": mode, "ok": False, "error": "not run: the time budget is spent"})
            print(format_line(summaries[-1]), flush=True)
            continue
        print(f"--- {mode} ({cfg.steps} steps, {backend} inference server)", flush=True)
        summary = run_mode(cfg, mode, model_dir, backend, root, deadline)
        summaries.append(summary)
        print(format_line(summary), flush=True)
    (root / "summary.json").write_text(
        json.dumps(
            {
                "device": card,
                "backend": backend,
                "note": note,
                "config": cfg.model_dump(),
                "modes": summaries,
            },
            indent=1,
        )
    )
    print("=== device check summary")
    for summary in summaries:
        print(format_line(summary))
    return 0 if all(s["ok"] for s in summaries) else 1


if __name__ == "__main__":
    raise SystemExit(main())
