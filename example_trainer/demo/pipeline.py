"""The one-command CPU demo: GRPO visibly teaches a tiny local model arithmetic.

``python -m example_trainer.demo`` (or ``bash scripts/demo.sh``, which installs first) runs, on loopback:

1. the tiny local Qwen2 model (built offline in seconds; nothing comes from a model hub);
2. a short supervised warm start on problems from the task's training split (``--task``, by default the
   arithmetic environment's; :mod:`example_trainer.demo.task`), or the
   cached result of an earlier run with the same settings;
3. held-out accuracy of the warm-started model (the environment's evaluation split, greedy decoding);
4. ``run-api`` (temporary data dir), the trainer (``python -m example_trainer.grpo``, which starts the
   inference server, vLLM or with ``--inference-backend hf`` a light Hugging Face ``generate`` server, and
   reloads it in place with the new weights after every step) and the arithmetic
   environment in ``serve`` mode, each as its own process, until the trainer has done ``--steps`` steps;
5. held-out accuracy of the final checkpoint, on the same problems with the same decoding;

and ends with exactly one line ``held-out accuracy: A0 -> A1 (N steps, T s)``. Every process is
stopped by its own pid, also on Ctrl-C (exit status 130) or a failure (exit status 1, with the tail
of the failing process's log). Logs, checkpoints, evaluation samples and ``summary.json`` (with the
timing breakdown) are kept in the run directory, whose path is printed first.
"""

from __future__ import annotations

import json
import logging
import math
import os
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from atroposlib.utils.processes import ServiceProcess, process_create_time, read_tail, wait_http_ok
from example_trainer.demo.config import PROG, DemoConfig, config_from_argv, describe_error
from example_trainer.demo.reporting import (
    Timings,
    append_accuracy,
    format_final_line,
    prune_checkpoints,
    read_new_records,
    read_rollout_stats,
    reward_line,
    rollout_summary,
)
from example_trainer.demo.task import REPO_ROOT, DemoTask

logger = logging.getLogger("atropos-demo")


# ---------------------------------------------------------------------------------------------
# the run
# ---------------------------------------------------------------------------------------------
class DemoFailed(RuntimeError):
    """A service failed; the message names it and carries the tail of its log."""


class Interrupted(Exception):
    """SIGINT or SIGTERM reached the demo."""


def free_port() -> int:
    from atroposlib.testing.api_process import free_port as _free

    return _free()


class Demo:
    """Runs the demo for one :class:`DemoConfig`; :meth:`run` returns the process exit status."""

    def __init__(self, config: DemoConfig, console: Any, task: DemoTask | None = None) -> None:
        self.config = config
        self.console = console
        self.run_dir = config.resolved_run_dir().resolve()
        self.logs = self.run_dir / "logs"
        self.ckpt_dir = self.run_dir / "checkpoints"
        self.timings = Timings()
        self.services: list[ServiceProcess] = []
        self.api: Any = None
        self.trainer: ServiceProcess | None = None
        self.env: ServiceProcess | None = None
        self.vllm_port = free_port()
        self.teacher: ServiceProcess | None = None
        self.teacher_port = free_port()
        self.summary: dict[str, Any] = {"config": config.model_dump()}
        self._tmp = tempfile.TemporaryDirectory(prefix="atropos-demo-api-")
        self._stopped = False
        self._vllm_ready = False
        self._task = task
        self.run_dir.mkdir(parents=True, exist_ok=True)

    # --- small helpers ------------------------------------------------------------------------
    def say(self, message: str) -> None:
        # Messages carry paths and log lines: no markup, no wrapping (copy-pasteable).
        self.console.print(message, markup=False, soft_wrap=True)

    @property
    def task(self) -> DemoTask:
        """The run's task (``--task``), loaded once."""
        if self._task is None:
            self._task = self.config.load_task()
        return self._task

    # --- phases ---------------------------------------------------------------------------------
    def prepare_model(self, progress: Any) -> Path:
        """Base model (tiny model unless ``--model``), then the warm start (trained or from the cache)."""
        from example_trainer.demo.sft_warmstart import warm_start

        cfg = self.config
        with self.timings.phase("base model"):
            if cfg.model:
                base = Path(cfg.model)
            else:
                from atroposlib.testing.tiny_model import build_tiny_model

                base = build_tiny_model()
        settings = cfg.sft_settings()
        task = progress.add_task("warm start (supervised)", total=max(cfg.sft_steps, 1))

        def on_step(step: int, loss: float) -> None:
            progress.update(task, completed=step + 1, description=f"warm start (loss {loss:.3f})")

        with self.timings.phase("warm start"):
            model_dir, cached = warm_start(
                base, self.task, settings, cfg.resolved_cache_dir(), on_step=on_step
            )
        progress.update(task, completed=max(cfg.sft_steps, 1), description="warm start")
        progress.remove_task(task)
        how = "loaded from the cache" if cached else f"trained ({cfg.sft_steps} steps)"
        self.say(f"warm start {how}: {model_dir}")
        self.summary.update(base_model=str(base), warm_model=str(model_dir), warm_start_cached=cached)
        return model_dir

    def evaluate(self, model_dir: Path, label: str) -> float:
        from example_trainer.demo.heldout_eval import evaluate_model_dir

        with self.timings.phase(f"eval {label}"):
            result = evaluate_model_dir(model_dir, self.task, max_new_tokens=self.config.max_answer_tokens)
        with open(self.run_dir / f"eval_{label}.jsonl", "w") as fh:
            for s in result.samples:
                fh.write(json.dumps(s.__dict__) + "\n")
        self.say(f"held-out accuracy {label} GRPO: {result.accuracy:.3f} ({result.correct}/{result.total})")
        return result.accuracy

    def start_api(self) -> None:
        from atroposlib.testing.api_process import ApiProcess

        with self.timings.phase("start run-api"):
            self.api = ApiProcess(
                port=free_port(),
                data_dir=Path(self._tmp.name),
                args=[],
                log_path=self.logs / "run-api.log",
            )
            self.logs.mkdir(parents=True, exist_ok=True)
            try:
                self.api.start(timeout=60)
            except RuntimeError as exc:
                raise DemoFailed(str(exc)) from exc

    def trainer_command(self, model_dir: Path) -> list[str]:
        cfg = self.config
        return [
            sys.executable, "-m", "example_trainer.grpo",
            "--model", str(model_dir),
            "--atropos-url", self.api.url,
            "--training-steps", str(cfg.steps),
            "--micro-batch-size", str(cfg.batch_size),
            "--gradient-accumulation-steps", "1",
            "--lr", str(cfg.lr),
            "--clip-eps", str(cfg.clip_eps),
            "--optimizer", "adamw",
            "--device", "cpu",
            "--seed", str(cfg.seed),
            "--seq-len", "256",
            "--save-path", str(self.ckpt_dir),
            "--checkpoint-interval", "0",
            "--refresh-interval", "1",
            "--refresh-mode", cfg.refresh_mode,
            "--vllm-port", str(self.vllm_port),
            "--dtype", "float32",
            "--max-model-len", "256",
            "--vllm-enforce-eager",
            "--vllm-startup-timeout", str(cfg.vllm_startup_timeout),
            "--inference-backend", cfg.inference_backend,
            "--inference-threads", str(cfg.inference_threads),
            "--log-dir", str(self.logs),
            "--plot-path", str(self.run_dir / "training_curves.png"),
            *self.loss_flags(),
        ]  # fmt: skip

    def loss_flags(self) -> list[str]:
        """The trainer's loss, staleness and distillation flags of this run."""
        cfg = self.config
        flags = ["--loss-type", cfg.loss_type, "--advantage", cfg.advantage, "--rl-coef", str(cfg.rl_coef)]
        for name in ("clip_eps_low", "clip_eps_high", "tis_cap", "max_staleness"):
            value = getattr(cfg, name)
            if value is not None:
                flags += ["--" + name.replace("_", "-"), str(value)]
        if cfg.teacher_model:
            flags += ["--distill-coef", str(cfg.distill_coef), "--distill-kind", cfg.distill_kind]
        return flags

    def env_command(self, model_dir: Path) -> list[str]:
        cfg = self.config
        teacher: list[str] = []
        if cfg.teacher_model:
            teacher = [
                "--teacher.base_url", f"http://127.0.0.1:{self.teacher_port}/v1",
                "--teacher.model_name", str(cfg.teacher_model),
                "--env.teacher_top_k", str(cfg.teacher_top_k),
                # a group whose scores are all equal still carries the teacher's signal
                "--env.ensure_scores_are_not_same", "false",
            ]  # fmt: skip
        if cfg.env_max_staleness is not None:
            teacher += ["--env.max_staleness", str(cfg.env_max_staleness)]
        return [
            sys.executable, str(self.env_script()), "serve",
            "--env.tokenizer_name", str(model_dir),
            "--env.rollout_server_url", self.api.url,
            "--env.group_size", str(cfg.group_size),
            "--env.batch_size", str(cfg.batch_size),
            # with a staleness bound the trainer may drop whole batches and need more: the demo stops the env
            "--env.total_steps", str(cfg.steps if cfg.max_staleness is None else 10**9),
            "--env.max_token_length", "256",
            "--env.steps_per_eval", "0",
            "--env.use_wandb", "false",
            "--env.max_batches_offpolicy", str(cfg.max_batches_offpolicy),
            "--env.max_num_workers", str(cfg.env_workers),
            "--env.shutdown_timeout", "5",
            *self.task.env_flags(),
            "--env.temperature", str(cfg.temperature),
            "--env.max_answer_tokens", str(cfg.max_answer_tokens),
            "--env.unsent_groups_path", str(self.run_dir / "unsent_groups.jsonl"),
            "--openai.base_url", f"http://127.0.0.1:{self.vllm_port}/v1",
            "--openai.model_name", str(model_dir),
            "--openai.server_type", "vllm",
            *teacher,
        ]  # fmt: skip

    def env_script(self) -> Path:
        """The environment to serve: the task's, or its teacher-distillation variant with ``--teacher-model``."""
        if not self.config.teacher_model:
            return self.task.env_script
        if self.task.distill_env_script is None:
            raise DemoFailed(f"the task {self.config.task!r} has no teacher-distillation environment")
        return self.task.distill_env_script

    def start_teacher(self, child_env: dict[str, str]) -> None:
        """The teacher's scoring server (``--teacher-model``), before the environment that asks it."""
        cfg = self.config
        cmd = [
            sys.executable, "-m", "example_trainer.inference.teacher_server", "--model", str(cfg.teacher_model),
            "--port", str(self.teacher_port), "--torch-threads", str(cfg.torch_threads),
        ]  # fmt: skip
        self.teacher = ServiceProcess("teacher", cmd, self.logs / "teacher.log", env=child_env, cwd=REPO_ROOT)
        self.teacher.start()
        self.services.append(self.teacher)
        if not wait_http_ok(f"http://127.0.0.1:{self.teacher_port}/health", 120.0, proc=self.teacher):
            raise DemoFailed(f"the teacher server did not start:\n{self.teacher.tail()}")

    def start_services(self, model_dir: Path) -> None:
        """run-api, then the trainer (it starts vLLM) and the environment."""
        self.start_api()
        child_env = {
            "WANDB_MODE": "offline",
            "WANDB_SILENT": "true",
            "HF_HUB_OFFLINE": "1",
            "TRANSFORMERS_OFFLINE": "1",
            "TOKENIZERS_PARALLELISM": "false",
            "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1"),
            "PYTHONUNBUFFERED": "1",
            "OMP_NUM_THREADS": str(self.config.torch_threads),
            "MKL_NUM_THREADS": str(self.config.torch_threads),
        }
        self._trainer_started = time.monotonic()
        self.trainer = ServiceProcess(
            "trainer",
            self.trainer_command(model_dir),
            self.logs / "trainer.log",
            env=child_env,
            cwd=REPO_ROOT,
        ).start()
        self.services.append(self.trainer)
        if self.config.teacher_model:
            self.start_teacher(child_env)
        self.env = ServiceProcess(
            "environment",
            self.env_command(model_dir),
            self.logs / "environment.log",
            env=child_env,
            cwd=REPO_ROOT,
        ).start()
        self.services.append(self.env)
        self.say(
            f"started run-api (pid {self.api.proc.pid}), trainer (pid {self.trainer.pid}; it starts "
            f"{'vLLM' if self.config.inference_backend == 'vllm' else 'the hf inference server'} on "
            f"port {self.vllm_port}) and environment (pid {self.env.pid}); logs in {self.logs}"
        )

    def _check_services(self) -> None:
        """Raise :class:`DemoFailed` if a service died before its time."""
        if self.api is not None and self.api.proc is not None and self.api.proc.poll() is not None:
            raise DemoFailed(f"run-api exited with {self.api.proc.returncode}:\n{self.api.log_tail()}")
        env = self.env
        if env is not None and not env.stop_requested and not env.alive() and env.returncode != 0:
            raise DemoFailed(f"the environment exited with {self.env.returncode}:\n{self.env.tail()}")
        teacher = self.teacher
        if teacher is not None and not teacher.stop_requested and not teacher.alive():
            raise DemoFailed(f"the teacher server exited with {teacher.returncode}:\n{teacher.tail()}")
        if self.trainer is not None and not self.trainer.alive() and self.trainer.returncode != 0:
            vllm_logs = sorted(self.logs.glob("vllm_*.log"))
            extra = f"\n--- {vllm_logs[-1]} ---\n{read_tail(vllm_logs[-1], 20)}" if vllm_logs else ""
            raise DemoFailed(
                f"the trainer exited with {self.trainer.returncode}:\n{self.trainer.tail()}{extra}"
            )

    def _deadline_check(self, started: float) -> None:
        if time.monotonic() - started > self.config.timeout:
            raise DemoFailed(f"gave up after --timeout {self.config.timeout:.0f} s (logs in {self.logs})")

    def wait_for_vllm(self, progress: Any, started: float) -> None:
        vllm = self.config.inference_backend == "vllm"
        task = progress.add_task(
            "starting vLLM (about a minute on CPU)" if vllm else "starting the hf inference server",
            total=None,
        )
        with self.timings.phase("vLLM start-up" if vllm else "hf server start-up"):
            url = f"http://127.0.0.1:{self.vllm_port}/health"
            while not wait_http_ok(url, 1.0, interval=0.5):
                self._check_services()
                self._deadline_check(started)
                for svc in self.services:
                    svc.record_descendants()
        self._vllm_ready = True
        self.summary["vllm_ready_after_launch_s"] = round(time.monotonic() - self._trainer_started, 2)
        progress.remove_task(task)

    def run_grpo(self, progress: Any, started: float) -> int:
        """Follow the trainer's metrics until it exits; returns the number of steps it completed."""
        cfg = self.config
        metrics_path = self.ckpt_dir / "metrics.jsonl"
        task = progress.add_task("GRPO", total=cfg.steps)
        step, offset, rewards, stale = 0, 0, [], 0
        env_log, env_offset, rollout_stats = self.logs / "environment.log", 0, []
        with self.timings.phase("GRPO"):
            while self.trainer is not None and self.trainer.alive():
                time.sleep(0.5)
                self._check_services()
                self._deadline_check(started)
                for svc in self.services:
                    svc.record_descendants()
                needed = cfg.steps + math.ceil(
                    stale / cfg.batch_size
                )  # batches dropped as stale are replaced
                if self.env is not None and self.env.alive() and self._api_step() >= needed:
                    # Every batch the trainer needs exists: stop generating (and free vLLM's
                    # connections, so that the trainer can stop vLLM at once when it is done).
                    self.env.stop(timeout=15)
                offset, records = read_new_records(metrics_path, offset)
                for rec in records:
                    stale = max(stale, int(rec.get("train/stale_sequences_total", 0)))
                    if "train/kept_reward_mean" in rec:
                        step = max(step, int(rec["step"]))
                        rewards.append(float(rec["train/kept_reward_mean"]))
                env_offset, new_stats = read_rollout_stats(env_log, env_offset)
                rollout_stats.extend(new_stats)
                if (records and rewards) or new_stats:
                    progress.update(task, completed=step, description=reward_line(rollout_stats, rewards))
                    if not cfg.keep_checkpoints:
                        prune_checkpoints(self.ckpt_dir, keep_after=step - 2)
            self._check_services()
        _, records = read_new_records(metrics_path, offset)
        for rec in records:
            if "train/kept_reward_mean" in rec:
                step = max(step, int(rec["step"]))
                rewards.append(float(rec["train/kept_reward_mean"]))
        rollout_stats.extend(read_rollout_stats(env_log, env_offset)[1])
        progress.update(task, completed=step)
        progress.remove_task(task)
        self.summary["kept_reward_mean"] = rewards
        self.summary["rollout_stats"] = rollout_stats
        if rollout_stats:
            self.say(rollout_summary(rollout_stats, rewards))
        return step

    def _api_step(self) -> int:
        """The API's step counter (batches formed so far); -1 when it cannot be read."""
        import requests

        try:
            return int(requests.get(f"{self.api.url}/status", timeout=2).json()["current_step"])
        except (requests.RequestException, ValueError, KeyError, TypeError):
            return -1

    def stop_services(self) -> None:
        """The environment, the trainer (it stops vLLM), then run-api; all by their own pids.

        Idempotent: a second call finds nothing left to stop."""
        if self._stopped:
            return
        self._stopped = True
        for svc in self.services:
            svc.record_descendants()
        processes = {svc.name: sorted(svc.known_processes().items()) for svc in self.services}
        if self.api is not None and self.api.proc is not None:
            ctime = process_create_time(self.api.proc.pid)
            processes["run-api"] = [(self.api.proc.pid, ctime)] if ctime is not None else []
        self.summary["processes"] = processes
        with self.timings.phase("shutdown"):
            # The environment first: vLLM (stopped by the trainer) then has no client connections
            # left to wait for. The trainer's first SIGTERM lets it finish its step and save a
            # checkpoint; the second aborts (e.g. while it waits for vLLM to start).
            if self.env is not None:
                self.env.stop(timeout=15)
            if self.teacher is not None:
                self.teacher.stop(timeout=15)
            if self.trainer is not None:
                # Before vLLM is up there is no step to finish: abort at once.
                self.trainer.stop(timeout=75, repeat_after=15 if self._vllm_ready else 1)
            if self.api is not None:
                self.api.stop()
            self._tmp.cleanup()

    def _plot(self, before: float, after: float, steps: int) -> None:
        """Redraw the trainer's PNG with the held-out accuracy before and after GRPO on it."""
        from example_trainer.grpo.reporting import plot_training_curves

        metrics = self.ckpt_dir / "metrics.jsonl"
        append_accuracy(metrics, [(0, before), (steps, after)])
        plot_training_curves(metrics, self.run_dir / "training_curves.png", max_step=steps)

    def run(self, progress: Any) -> tuple[float, float, int]:
        """All phases; returns (accuracy before, accuracy after, GRPO steps done)."""
        started = time.monotonic()
        model_dir = self.prepare_model(progress)
        try:
            self.start_services(model_dir)
            # The warm-started model is evaluated while vLLM boots (the services wait for it anyway).
            before = self.evaluate(model_dir, "before")
            self.wait_for_vllm(progress, started)
            steps = self.run_grpo(progress, started)
        finally:
            self.stop_services()
        final = self.ckpt_dir / "final_model"
        if steps < self.config.steps or not final.is_dir():
            raise DemoFailed(
                f"the trainer stopped after {steps} of {self.config.steps} steps:\n{self.trainer.tail()}"
            )
        after = self.evaluate(final, "after")
        self._plot(before, after, steps)
        if not self.config.keep_checkpoints:
            prune_checkpoints(self.ckpt_dir, keep_after=None)
        return before, after, steps


def _raise_interrupted(signum: int, _frame: Any) -> None:
    # Once: the first signal starts the orderly shutdown; later ones are ignored so it can finish.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    raise Interrupted(signal.Signals(signum).name)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the demo; exit status 0 (done), 1 (a service failed), 2 (bad flags), 130 (interrupted)."""
    from rich.console import Console

    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    try:
        config = config_from_argv(argv)
    except ValidationError as exc:
        print(f"{PROG}: error: {describe_error(exc)}", file=sys.stderr)
        return 2
    try:
        task = config.load_task()
    except (ImportError, OSError, AttributeError, TypeError, ValueError) as exc:
        print(f"{PROG}: error: --task {config.task}: {exc}", file=sys.stderr)
        return 2
    if not task.env_script.is_file():
        print(
            f"{PROG}: error: {task.env_script} not found; run the demo from a clone of the repository",
            file=sys.stderr,
        )
        return 2
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
    import torch
    import transformers

    torch.set_num_threads(config.torch_threads)
    transformers.utils.logging.disable_progress_bar()  # the demo shows its own progress
    console = Console(stderr=True, highlight=False)
    t0 = time.perf_counter()
    signal.signal(signal.SIGINT, _raise_interrupted)
    signal.signal(signal.SIGTERM, _raise_interrupted)
    demo = Demo(config, console, task=task)
    print(f"run directory: {demo.run_dir}", flush=True)
    status, outcome = _run_with_progress(demo, console)
    return _finish(demo, status, outcome, time.perf_counter() - t0)


def _run_with_progress(demo: Demo, console: Any) -> tuple[int, tuple[float, float, int] | None]:
    """Run the demo under a progress display; ``(exit status, (before, after, steps) or None)``. Every
    process is stopped, whatever happens."""
    from rich.progress import (
        BarColumn,
        MofNCompleteColumn,
        Progress,
        SpinnerColumn,
        TextColumn,
        TimeElapsedColumn,
    )

    columns = (
        SpinnerColumn(),
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    try:
        with Progress(*columns, console=console, transient=True) as progress:
            return 0, demo.run(progress)
    except Interrupted as exc:
        demo.say(f"{exc} received: every process was stopped; logs in {demo.logs}")
        return 130, None
    except DemoFailed as exc:
        console.print("[red]demo failed:[/red] ", end="")
        demo.say(str(exc))
        demo.say(f"logs in {demo.logs}")
        return 1, None
    except Exception as exc:  # noqa: BLE001 - one line for the user; every process is still stopped
        demo.say(f"demo failed: {type(exc).__name__}: {exc} (logs in {demo.logs})")
        return 1, None
    finally:
        demo.stop_services()


def _finish(demo: Demo, status: int, outcome: tuple[float, float, int] | None, elapsed: float) -> int:
    """Write ``summary.json``; on success print the timing breakdown and the final line. Returns ``status``."""
    demo.summary["timings_s"] = {k: round(v, 2) for k, v in demo.timings.phases.items()}
    demo.summary["total_s"] = round(elapsed, 2)
    if outcome is not None:
        before, after, steps = outcome
        demo.summary.update(accuracy_before=before, accuracy_after=after, steps=steps)
    demo.summary["exit_status"] = status
    with open(demo.run_dir / "summary.json", "w") as fh:
        json.dump(demo.summary, fh, indent=2)
    if outcome is None:
        return status
    breakdown = ", ".join(f"{k} {v:.0f} s" for k, v in demo.timings.phases.items())
    print(f"time: {breakdown}", flush=True)
    print(format_final_line(*outcome, elapsed), flush=True)
    return status


if __name__ == "__main__":
    sys.exit(main())
