"""Fault injection on the real training loop, on CPU: every part is killed mid-run and training goes on.

    python benchmarks/faults.py [--steps 40] [--stop-seconds 20] [--workdir DIR]

It starts what the CPU demo starts, each as its own process: ``run-api`` with its durable store, two
arithmetic environments in ``serve`` mode, and the trainer (``python -m example_trainer.grpo --resume latest``),
which starts the hf inference server. The tiny local model gets the CPU demo's supervised warm start first
(cached), on the demo's task (one- and two-digit sums), so that some rollouts are right and the steps have
something to train. The trainer reaches the API through :class:`~benchmarks.batch_gate.BatchGate`, which hands
out batches only up to the step the next fault waits for. Faults are injected by trained step:

=====================  ==========================================================================
``env_kill``           ``kill -9`` of the first environment, then it is started again
``inference_move``     the inference server is restarted on a new port: ``kill -9`` of it while a dummy listener
                       takes its port, so the trainer starts it on a free port and rewrites its servers file;
                       the environments (started with ``--openai.servers_file``, not a fixed base URL) follow
``inference_kill``     ``kill -9`` of the inference server (the trainer restarts it)
``trainer_kill``       ``kill -9`` of the trainer's process group right after an uncheckpointed step,
                       then the same command again (``--resume latest``)
``api_kill``           ``kill -9`` of ``run-api``, then it is started again on the same port and store
``env_stop``           ``SIGSTOP`` of the second environment for ``--stop-seconds``, then ``SIGCONT``
=====================  ==========================================================================

and then checks, printed as a table: the run reaches its step count; every batch (and every group, by the
API's group id) is trained exactly once in the run as finally trained; nothing served is left unacknowledged;
after the trainer's restart the step, batch, loss and learning rate of the replayed step equal those of the
killed run; the environments logged the inference server's outage and its return, and both followed the server
to its new port; the trainer kept training while an environment was stopped; held-out accuracy (replies sampled
at the training temperature) rose. It also reports the seconds from each fault's restart to the next trained
step, and greedy held-out accuracy. ``run_faults`` returns the same as a :class:`FaultReport` (``tests/example_trainer/test_fault_run.py`` runs it in CI).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import socket
import sqlite3
import sys
import tempfile
import time
import urllib.request
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

REPO_ROOT = Path(__file__).resolve().parent.parent
if str(REPO_ROOT) not in sys.path:
    sys.path.insert(0, str(REPO_ROOT))

from atroposlib.envs.server_handling.servers_file import read_servers_file  # noqa: E402
from atroposlib.testing.api_process import ApiProcess, free_port  # noqa: E402
from atroposlib.utils.processes import ServiceProcess  # noqa: E402
from benchmarks.batch_gate import BatchGate  # noqa: E402
from example_trainer.demo.config import DemoConfig  # noqa: E402
from example_trainer.inference.server_lifetime import ServerPidFile  # noqa: E402

ENV_SCRIPT = REPO_ROOT / "environments" / "arithmetic_server.py"
#: The CPU demo's settings (its task, warm start and cache), with a smaller held-out split.
DEMO = DemoConfig(eval_size=200)
#: The task of both environments, the warm start and the held-out evaluation.
TASK = DEMO.task_settings()
CHILD_ENV = {
    "WANDB_MODE": "offline", "WANDB_SILENT": "true", "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
    "TOKENIZERS_PARALLELISM": "false", "PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
}  # fmt: skip


#: A statistic of the trained step that depends on the weights before it and its batch (zero when the batch
#: has no learning signal): equal after a resume only if the weights were restored.
PROBE = "train/grad_norm"


class FaultRunFailed(RuntimeError):
    """A part did not come back; the message carries the tail of its log."""


@dataclass
class Fault:
    """One injected fault: its name, the trained steps when it was injected, and (Unix seconds, the clock of
    the trainer's ``metrics.jsonl``) when it was injected, when the part was started again and when the next
    step was trained; ``recovery_s`` is from the restart to that step."""

    name: str
    at_step: int
    injected_at: float
    restarted_at: float | None = None
    next_step_at: float | None = None
    note: str = ""

    @property
    def recovery_s(self) -> float | None:
        if self.restarted_at is None or self.next_step_at is None:
            return None
        return max(0.0, self.next_step_at - self.restarted_at)


@dataclass
class FaultReport:
    steps: int
    trained_steps: int = 0
    trainer_exit: int | None = None
    faults: list[Fault] = field(default_factory=list)
    checks: dict[str, tuple[bool, str]] = field(default_factory=dict)
    history: list[dict[str, Any]] = field(default_factory=list)  #: the run as finally trained, by step
    measures: dict[str, str] = field(default_factory=dict)  #: reported, not checked (too few steps on CPU)

    @property
    def ok(self) -> bool:
        return all(passed for passed, _ in self.checks.values())

    def table(self) -> str:
        rows = [("fault", "at step", "recovery s", "note")]
        for f in self.faults:
            rec = "-" if f.recovery_s is None else f"{f.recovery_s:.1f}"
            rows.append((f.name, str(f.at_step), rec, f.note))
        rows.append(("", "", "", ""))
        rows.append(("check", "holds", "", "measured"))
        rows += [(name, "yes" if ok else "NO", "", detail) for name, (ok, detail) in self.checks.items()]
        rows += [(name, "(measured)", "", value) for name, value in self.measures.items()]
        widths = [max(len(r[i]) for r in rows) for i in range(3)]
        return "\n".join(
            f"{r[0]:<{widths[0]}}  {r[1]:<{widths[1]}}  {r[2]:<{widths[2]}}  {r[3]}".rstrip() for r in rows
        )


class FaultRun:
    """The loop's processes under ``workdir`` and the faults injected into them."""

    def __init__(
        self, workdir: Path, steps: int, stop_seconds: float, model_dir: Path, move_inference: bool = True
    ) -> None:
        self.workdir = workdir
        self.include_move = move_inference
        self.logs = workdir / "logs"
        self.ckpt = workdir / "checkpoints"
        self.logs.mkdir(parents=True, exist_ok=True)
        self.steps, self.stop_seconds, self.model_dir = steps, stop_seconds, model_dir
        #: the API stops waiting for a silent env after this long (well within the stop)
        self.heartbeat_seconds = max(2.0, stop_seconds / 4)
        self.api = ApiProcess(
            port=free_port(),
            data_dir=workdir / "api",
            args=["--env-heartbeat-seconds", str(self.heartbeat_seconds)],
            log_path=self.logs / "run-api.log",
        )
        #: the trainer reaches the API through this gate, which hands out batches only up to the step a fault
        #: waits for (a trainer with batches queued trains several steps per second)
        self.gate = BatchGate(self.api.url)
        self.inference_port = free_port()
        #: the trainer writes its server's address here; the environments follow it
        self.servers_file = self.logs / "inference_servers.txt"
        self.moved_from: int | None = None  #: the port the inference server was moved away from
        self.batch_size, self.group_size = 128, 8
        self.envs = {
            name: ServiceProcess(
                name,
                self.env_command("--env.unsent_groups_path", str(self.logs / f"{name}_unsent.jsonl"), *extra),
                self.logs / f"{name}.log",
                CHILD_ENV,
                REPO_ROOT,
            )
            for name, extra in (("env_a", ()), ("env_b", ()))
        }  # fmt: skip
        self.trainer = self._new_trainer()
        self.report = FaultReport(steps=steps)
        self.batch_groups: dict[int, list[int]] = {}  #: batch id -> group ids, as seen in the API's store
        self.killed_history: list[dict[str, Any]] = []

    # --- commands ---------------------------------------------------------------------------------
    def trainer_command(self) -> list[str]:
        return [
            sys.executable, "-m", "example_trainer.grpo", "--model", str(self.model_dir),
            "--atropos-url", self.gate.url, "--training-steps", str(self.steps),
            "--batch-size", str(self.batch_size), "--gradient-accumulation-steps", "1", "--lr", "2e-4",
            "--warmup-steps", "6", "--optimizer", "adamw", "--device", "cpu", "--seed", "0",
            "--seq-len", "256", "--save-path", str(self.ckpt), "--checkpoint-interval", "2",
            "--refresh-interval", "1", "--refresh-mode", "broadcast", "--inference-backend", "hf",
            "--vllm-port", str(self.inference_port), "--max-model-len", "256", "--vllm-startup-timeout", "120",
            "--log-dir", str(self.logs), "--resume", "latest", "--vllm-max-restarts", "2",
            "--inference-servers-file", str(self.servers_file),
        ]  # fmt: skip

    def env_command(self, *extra: str) -> list[str]:
        return [
            sys.executable, str(ENV_SCRIPT), "serve",
            "--env.tokenizer_name", str(self.model_dir), "--env.rollout_server_url", self.api.url,
            "--env.group_size", str(self.group_size), "--env.batch_size", str(self.batch_size),
            "--env.total_steps", str(self.steps), "--env.max_token_length", "256", "--env.steps_per_eval", "0",
            "--env.use_wandb", "false", "--env.max_batches_offpolicy", "2", "--env.max_num_workers", "16",
            "--env.shutdown_timeout", "5", "--env.seed", str(TASK["seed"]),
            "--env.operations", json.dumps(TASK["operations"]), "--env.min_digits", str(TASK["min_digits"]),
            "--env.max_digits", str(TASK["max_digits"]), "--env.eval_size", str(TASK["eval_size"]),
            "--env.max_answer_tokens", "8", "--env.ensure_scores_are_not_same", "true",
            "--openai.servers_file", str(self.servers_file),
            "--openai.model_name", str(self.model_dir), "--openai.server_type", "vllm", *extra,
        ]  # fmt: skip

    def _new_trainer(self) -> ServiceProcess:
        return ServiceProcess(
            "trainer", self.trainer_command(), self.logs / "trainer.log", CHILD_ENV, REPO_ROOT
        )

    # --- observation ------------------------------------------------------------------------------
    def records(self) -> list[dict[str, Any]]:
        """Every training record the trainer wrote, in order (a resumed run appends)."""
        path = self.ckpt / "metrics.jsonl"
        if not path.is_file():
            return []
        out = []
        for line in path.read_text().splitlines():
            with contextlib.suppress(ValueError):
                record = json.loads(line)
                if "train/loss" in record:
                    out.append(record)
        return out

    def effective(self) -> dict[int, dict[str, Any]]:
        """The run as finally trained: for each step, its last record."""
        return {r["step"]: r for r in self.records()}

    def trained(self) -> int:
        return max(self.effective(), default=0)

    def watch_store(self) -> None:
        """Note each batch's group ids while it is in the API's store (it is deleted once acknowledged)."""
        db = self.api.data_dir / "trajectory_api.sqlite3"
        if not db.is_file():
            return
        with contextlib.suppress(sqlite3.Error):
            conn = sqlite3.connect(f"file:{db}?mode=ro", uri=True, timeout=0.5)
            try:
                for bid, gids in conn.execute("SELECT bid, gids FROM batches"):
                    self.batch_groups.setdefault(int(bid), json.loads(gids))
            finally:
                conn.close()

    def check_alive(self) -> None:
        if self.api.proc is not None and self.api.proc.poll() is not None:
            raise FaultRunFailed(f"run-api exited:\n{self.api.log_tail()}")
        for env in self.envs.values():
            if env.proc is not None and env.proc.poll() not in (None, 0):
                raise FaultRunFailed(f"{env.name} exited with {env.returncode}:\n{env.tail()}")
        if not self.trainer.alive() and self.trainer.returncode != 0:
            raise FaultRunFailed(
                f"the trainer exited with {self.trainer.returncode}:\n{self.trainer.tail(60)}"
            )

    def wait(self, condition: Callable[[], bool], timeout: float, what: str) -> None:
        deadline = time.monotonic() + timeout
        while not condition():
            self.check_alive()
            self.watch_store()
            if time.monotonic() > deadline:
                raise FaultRunFailed(f"timed out waiting for {what}:\n{self.trainer.tail(30)}")
            time.sleep(0.1)

    def next_step_after(self, fault: Fault, timeout: float = 240.0) -> None:
        """Let the trainer train one more step, wait for the first step trained after ``fault``'s restart and
        note its time."""
        since = fault.restarted_at or time.time()
        self.gate.allow(self.trained() + 1)
        self.wait(
            lambda: any(r["time"] > since for r in self.records()) or not self.trainer.alive(),
            timeout, f"a step after {fault.name}",
        )  # fmt: skip
        fault.next_step_at = min((r["time"] for r in self.records() if r["time"] > since), default=None)

    # --- the faults -------------------------------------------------------------------------------
    def fault(self, name: str) -> Fault:
        f = Fault(name=name, at_step=self.trained(), injected_at=time.time())
        self.report.faults.append(f)
        return f

    def kill_env(self) -> None:
        env = self.envs["env_a"]
        f = self.fault("env_kill")
        os.killpg(env.pid, signal.SIGKILL)
        env.proc.wait(10)
        env.start()
        f.restarted_at = time.time()
        self.next_step_after(f)

    def serving_port(self) -> int:
        """The port of the trainer's inference server, as its servers file says now."""
        return int(read_servers_file(self.servers_file)[0].rsplit(":", 1)[1].split("/", 1)[0])

    def server_pid(self) -> int:
        record = ServerPidFile(self.logs / f"inference_{self.serving_port()}.pid").read()
        if record is None:
            raise FaultRunFailed("no inference server recorded by the trainer")
        return int(record["server_pid"])

    def move_inference(self) -> None:
        old, pid = self.serving_port(), self.server_pid()
        f = self.fault("inference_move")
        # The trainer is paused while its server dies and another process takes the port, so that its restart
        # (not a race with it) finds the port held.
        os.killpg(self.trainer.pid, signal.SIGSTOP)
        try:
            os.killpg(pid, signal.SIGKILL)
            holder = hold_port(old, timeout=30)
        finally:
            os.killpg(self.trainer.pid, signal.SIGCONT)
        with holder:  # released once training goes on (a restarted trainer starts its server on --vllm-port)
            self.wait(lambda: self.serving_port() != old, 240, "the inference server on a new port")
            f.restarted_at = time.time()
            self.moved_from = old
            self.next_step_after(f)
        started = f.restarted_at - f.injected_at
        f.note = f"port {old} held; serving on {self.serving_port()} {started:.0f} s after the kill"

    def kill_inference(self) -> None:
        pid = self.server_pid()
        f = self.fault("inference_kill")
        os.killpg(pid, signal.SIGKILL)
        # The trainer notices and restarts it; it is back once a new server answers on the serving port.
        self.wait(lambda: self.server_answers(other_than=pid), 240, "the inference server to be restarted")
        f.restarted_at = time.time()
        self.next_step_after(f)
        restarts = self.trainer.log_path.read_text().count("restarting it")
        f.note = f"trainer restarted it ({restarts}x) {f.restarted_at - f.injected_at:.0f} s after the kill"

    def server_answers(self, other_than: int) -> bool:
        """A server other than pid ``other_than`` is recorded and answers ``/health``."""
        with contextlib.suppress(FaultRunFailed, OSError, ValueError, IndexError):
            if self.server_pid() != other_than:
                url = f"http://127.0.0.1:{self.serving_port()}/health"
                with urllib.request.urlopen(url, timeout=2) as resp:
                    return resp.status == 200
        return False

    def kill_trainer(self) -> None:
        # Right after an uncheckpointed (odd) step, held there by the gate, so that the resumed trainer replays
        # it; preferably one whose batch had a learning signal (a nonzero gradient), so that equal losses say
        # something.
        step = self.trained() | 1
        while True:
            self.gate.allow(step)
            self.wait(lambda step=step: self.trained() >= step, 300, f"step {step}")
            if self.effective()[step].get(PROBE, 0.0) > 0 or step >= self.steps - 5:
                break
            step += 2
        f = self.fault("trainer_kill")
        self.killed_history = list(self.records())
        os.killpg(self.trainer.pid, signal.SIGKILL)
        self.trainer.proc.wait(10)
        self.gate.restart_at(step)  # resumed from the checkpoint of step - 1
        self.trainer = self._new_trainer().start()
        f.restarted_at = time.time()
        self.next_step_after(f, timeout=300)
        f.note = f"resumed from step {f.at_step - 1}"

    def kill_api(self) -> None:
        f = self.fault("api_kill")
        self.api.kill9()
        self.api.start(timeout=180)
        f.restarted_at = time.time()
        self.next_step_after(f)

    def stop_env(self) -> None:
        env = self.envs["env_b"]
        f = self.fault("env_stop")
        self.gate.allow(self.steps)
        os.killpg(env.pid, signal.SIGSTOP)
        before = self.trained()
        try:
            deadline = time.monotonic() + self.stop_seconds
            while time.monotonic() < deadline:
                self.watch_store()
                time.sleep(0.2)
        finally:
            os.killpg(env.pid, signal.SIGCONT)
        f.restarted_at = time.time()
        f.note = (
            f"{self.trained() - before} step(s) trained while it was stopped ({self.stop_seconds:.0f} s; "
            f"the API's heartbeat is {self.heartbeat_seconds:.0f} s)"
        )
        self.next_step_after(f)

    # --- the run ----------------------------------------------------------------------------------
    def run(self) -> FaultReport:
        schedule = [(1, self.kill_env), (2, self.move_inference), (3, self.kill_inference),
                    (4, self.kill_trainer), (7, self.kill_api), (8, self.stop_env)]  # fmt: skip
        if not self.include_move:
            schedule = [(at, action) for at, action in schedule if action != self.move_inference]
        self.api.start(timeout=180)
        self.gate.start()
        self.trainer.start()
        self.wait(self.servers_file.is_file, 300, "the trainer's servers file")
        for env in self.envs.values():
            env.start()
        for at, action in schedule:
            self.gate.allow(at)
            self.wait(lambda at=at: self.trained() >= at, 300, f"step {at}")
            action()
        self.gate.allow(self.steps)
        self.wait(lambda: not self.trainer.alive(), 300, "the trainer to finish")
        self.report.trainer_exit = self.trainer.returncode
        self.report.trained_steps = self.trained()
        self.report.history = [r for _, r in sorted(self.effective().items())]
        self.check()
        return self.report

    def stop(self) -> None:
        for env in self.envs.values():
            if env.proc is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(env.pid, signal.SIGCONT)
                env.stop(timeout=10)
        self.trainer.stop(timeout=20)
        self.gate.stop()
        self.api.stop()

    # --- the checks -------------------------------------------------------------------------------
    def check(self) -> None:
        r = self.report
        checks = r.checks
        checks["reaches its step count"] = (
            r.trainer_exit == 0 and r.trained_steps == self.steps,
            f"exit {r.trainer_exit}, {r.trained_steps}/{self.steps} steps",
        )
        bids = [h.get("train/batch_id") for h in r.history]
        checks["each batch trained once"] = (
            None not in bids and len(set(bids)) == len(bids) == self.steps,
            f"{len(set(b for b in bids if b is not None))} distinct batch ids in {len(bids)} steps",
        )
        gids = [g for b in bids if b in self.batch_groups for g in self.batch_groups[b]]
        seen = sum(b in self.batch_groups for b in bids)
        checks["each group trained once"] = (
            len(gids) == len(set(gids)) and seen > 0,
            f"{len(gids)} groups of {seen}/{len(bids)} batches seen in the store, {len(set(gids))} distinct",
        )
        self.watch_store()
        unacked = self._unacknowledged()
        checks["nothing left unacknowledged"] = (unacked == 0, f"{unacked} served batch(es) not acknowledged")
        checks.update(self._resume_checks())
        checks.update(self._outage_checks())

    def _unacknowledged(self) -> int:
        with contextlib.closing(sqlite3.connect(str(self.api.data_dir / "trajectory_api.sqlite3"))) as conn:
            return int(conn.execute("SELECT count(*) FROM batches WHERE state=1").fetchone()[0])

    def _resume_checks(self) -> dict[str, tuple[bool, str]]:
        kill = next((f for f in self.report.faults if f.name == "trainer_kill"), None)
        if kill is None:
            return {"trainer resumes where it stopped": (False, "the trainer was not killed")}
        replayed = kill.at_step
        before = {r["step"]: r for r in self.killed_history}.get(replayed)
        after = self.effective().get(replayed)
        log = self.trainer.log_path.read_text()
        resumed_from = f"(step {replayed - 1})" in log
        same = (
            before is not None and after is not None
            and before["train/batch_id"] == after["train/batch_id"]
            and abs(before["train/loss"] - after["train/loss"]) <= 1e-5 * max(1.0, abs(before["train/loss"]))
            and before.get("train/lr") == after.get("train/lr")
            and abs(before[PROBE] - after[PROBE]) <= 1e-5 * max(1.0, before[PROBE])
        )  # fmt: skip
        detail = (
            f"checkpoint step {replayed - 1}; step {replayed}: batch {before and before['train/batch_id']} -> "
            f"{after and after['train/batch_id']}, loss {before and round(before['train/loss'], 6)} -> "
            f"{after and round(after['train/loss'], 6)}, lr {before and before.get('train/lr')} -> "
            f"{after and after.get('train/lr')}, {PROBE} {before and f'{before[PROBE]:.3g}'} -> "
            f"{after and f'{after[PROBE]:.3g}'}"
        )
        if before is not None and before[PROBE] == 0:
            detail += " (a batch without learning signal: only its id and the lr say something)"
        return {"trainer resumes where it stopped": (resumed_from and same, detail)}

    def _outage_checks(self) -> dict[str, tuple[bool, str]]:
        texts = {name: env.log_path.read_text(errors="replace") for name, env in self.envs.items()}
        waited = [n for n, t in texts.items() if "is not answering" in t]

        def recovered(text: str) -> bool:
            # The server answered again, or the env followed the servers file to the servers listed now (a
            # server that moved away never answers again at its old address).
            after = text[text.index("is not answering") :]
            return "is answering again" in after or " are now http" in after

        back = [n for n in waited if recovered(texts[n])]
        stop = next((f for f in self.report.faults if f.name == "env_stop"), None)
        kept_training = stop is not None and not stop.note.startswith("0 ")
        moved = self.moved_from
        followed = [n for n, t in texts.items() if moved and f"(retired: http://127.0.0.1:{moved}/v1)" in t]
        checks = {}
        if self.include_move:
            checks["envs follow the server to its new port"] = (
                moved is not None and sorted(followed) == sorted(texts),
                f"port {moved} given up; followed by {followed or 'none'}",
            )
        return checks | {
            "envs wait for the inference server": (
                bool(waited) and set(waited) <= set(back),
                f"outage logged by {waited or 'none'}, recovery by {back or 'none'}",
            ),
            "a stopped env does not hold the trainer": (kept_training, stop.note if stop else "not run"),
        }


def hold_port(port: int, timeout: float) -> socket.socket:
    """Listen on ``port`` (retrying until its last owner has released it): the port stays held."""
    deadline = time.monotonic() + timeout
    while True:
        sock = socket.socket()
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # the dead server's connections may linger
        try:
            sock.bind(("127.0.0.1", port))
            sock.listen()
            return sock
        except OSError:
            sock.close()
            if time.monotonic() > deadline:
                raise FaultRunFailed(f"port {port} was not released by the killed inference server") from None
            time.sleep(0.05)


def warm_model() -> Path:
    """The tiny local model after the CPU demo's supervised warm start on :data:`TASK` (its cache entry)."""
    from atroposlib.testing.tiny_model import build_tiny_model
    from example_trainer.demo.sft_warmstart import warm_start

    model_dir, _ = warm_start(build_tiny_model(), TASK, DEMO.sft_settings(), DEMO.resolved_cache_dir())
    return Path(model_dir)


#: Replies sampled per held-out problem (at the environments' temperature, 1.0) for the accuracy check.
HELDOUT_SAMPLES = 8


def heldout_accuracies(model_dir: Path) -> tuple[float, float]:
    """(sampled, greedy) accuracy on :data:`TASK`'s held-out split (never among the environments' training
    problems): the mean over :data:`HELDOUT_SAMPLES` seeded replies per problem at temperature 1.0, and the
    greedy reply's; the model is loaded once."""
    from environments.arithmetic_server import ArithmeticTask
    from example_trainer.demo.heldout_eval import evaluate_heldout, load_causal_lm

    model, tokenizer = load_causal_lm(model_dir)
    task = ArithmeticTask(**TASK)
    sampled = evaluate_heldout(model, tokenizer, task, max_new_tokens=8, samples=HELDOUT_SAMPLES)
    greedy = evaluate_heldout(model, tokenizer, task, max_new_tokens=8)
    return sampled.accuracy, greedy.accuracy


def run_faults(
    workdir: Path, steps: int = 40, stop_seconds: float = 20.0, move_inference: bool = True
) -> FaultReport:
    """Run the fault schedule on a fresh loop under ``workdir`` (``inference_move`` only with
    ``move_inference``); every process is stopped at the end."""
    model = warm_model()
    run = FaultRun(Path(workdir), steps, stop_seconds, model, move_inference)
    try:
        report = run.run()
    finally:
        run.stop()
    final = run.ckpt / "final_model"
    before, greedy_before = heldout_accuracies(model)
    after, greedy_after = heldout_accuracies(final) if final.is_dir() else (0.0, 0.0)
    report.checks["held-out accuracy rises"] = (
        after > before,
        f"{before:.3f} -> {after:.3f} ({TASK['eval_size']} problems x {HELDOUT_SAMPLES} sampled replies)",
    )
    if final.is_dir():
        report.measures["held-out accuracy, greedy"] = (
            f"{greedy_before:.3f} -> {greedy_after:.3f} ({TASK['eval_size']} problems)"
        )
    rewards = [h.get("train/kept_reward_mean", 0.0) for h in report.history]
    half = max(1, len(rewards) // 2)
    report.measures["batch reward"] = (
        f"first {half} steps {sum(rewards[:half]) / half:.3f}, last {half} {sum(rewards[-half:]) / half:.3f}"
    )
    return report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--steps", type=int, default=40)
    parser.add_argument("--stop-seconds", type=float, default=20.0)
    parser.add_argument("--workdir", default=None)
    parser.add_argument(
        "--no-move", action="store_true", help="leave out inference_move (the server restarted on a new port)"
    )
    args = parser.parse_args(argv)
    workdir = Path(args.workdir or tempfile.mkdtemp(prefix="atropos-faults-"))
    print(f"run directory: {workdir}", flush=True)
    started = time.monotonic()
    try:
        report = run_faults(workdir, args.steps, args.stop_seconds, move_inference=not args.no_move)
    except FaultRunFailed as exc:
        print(f"fault run failed: {exc}", file=sys.stderr)
        return 1
    print(report.table())
    print(f"total {time.monotonic() - started:.0f} s; logs in {workdir / 'logs'}")
    return 0 if report.ok else 1


if __name__ == "__main__":
    sys.exit(main())
