"""Environment loop overhead: rollouts/s an env achieves against an inference server with a fixed latency.

With an inference server that answers every request after ``--delay`` seconds and an env allowed
``--workers`` concurrent items (one request of ``n = --group-size`` per item), no env can exceed

    bound = workers * group_size / delay   rollouts per second.

This benchmark runs the same small environment on this package and on atroposlib 0.4.0 (from PyPI, in its
own virtualenv under ``~/.cache/atroposlib/bench-venv-0.4.0``, created on first use), each pinned to one CPU
core, against the same scripted inference server (``atroposlib.testing.scripted_server``) and a real
``run-api`` with a trainer thread that keeps pulling batches. It prints achieved rollouts/s, the fraction of
the bound, and the ratio between the two. Target: >= 95 % of the bound.

    python benchmarks/env_overhead.py [--delay 1.0] [--workers 32] [--group-size 4] [--duration 20]

The script is also the environment itself: ``--run-env SPEC`` starts it (in whichever interpreter runs it).
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import json
import os
import subprocess
import sys
import threading
import time
from pathlib import Path

ORIGINAL_VERSION = "0.4.0"
DEFAULT_VENV = Path.home() / ".cache" / "atroposlib" / f"bench-venv-{ORIGINAL_VERSION}"
PROMPT_TOKENS = 48
COMPLETION_TOKENS = 16


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# ----------------------------------------------------------------------------------------------------------
# The environment (runs in a child process, under either package)
# ----------------------------------------------------------------------------------------------------------
def run_env(spec: dict) -> None:
    """Serve a minimal env: one chat request of n=group_size per item, fixed-length token groups."""
    import asyncio
    import logging

    from atroposlib.envs.base import APIServerConfig, BaseEnv, BaseEnvConfig, ScoredDataGroup

    logging.basicConfig(level=logging.WARNING)
    group_size = spec["group_size"]

    class OverheadEnv(BaseEnv):
        name = "overhead"

        async def setup(self):
            self.counter = 0

        async def get_next_item(self):
            self.counter += 1
            return self.counter

        async def collect_trajectories(self, item):
            resp = await self.server.chat_completion(
                messages=[{"role": "user", "content": f"question {item}"}], n=group_size, max_tokens=8
            )
            group = ScoredDataGroup(tokens=[], masks=[], scores=[])
            for i, _choice in enumerate(resp.choices):
                prompt = [(item + j) % 1000 + 10 for j in range(PROMPT_TOKENS)]
                completion = [(item * 7 + i + j) % 1000 + 10 for j in range(COMPLETION_TOKENS)]
                group["tokens"].append(prompt + completion)
                group["masks"].append([-100] * PROMPT_TOKENS + completion)
                group["scores"].append(float(i))
            return group, []

        async def evaluate(self, *args, **kwargs):
            return None

    config = BaseEnvConfig(
        group_size=group_size,
        max_num_workers=spec["workers"],
        max_batches_offpolicy=1000,
        tokenizer_name=spec["tokenizer"],
        use_wandb=False,
        rollout_server_url=spec["api_url"],
        total_steps=10**9,
        steps_per_eval=10**9,
        wandb_name="overhead",
    )
    server = APIServerConfig(
        model_name="scripted",
        base_url=spec["inference_url"],
        api_key="x",
        num_max_requests_at_once=4096,
        timeout=600,
        health_check=False,
    )
    env = OverheadEnv(config, [server], slurm=False, testing=False)
    asyncio.run(env.env_manager())


def run_reference(spec: dict) -> None:
    """Inference calls only: ``workers`` tasks issuing the env's request back to back with the same OpenAI
    client, no env machinery. Prints ``{"requests": n, "cpu_s": s}`` for the measurement window as JSON."""
    import asyncio

    import openai

    async def main() -> None:
        client = openai.AsyncOpenAI(base_url=spec["inference_url"], api_key="x", timeout=600)
        done: list[float] = []
        stop = asyncio.Event()

        async def worker(k: int) -> None:
            item = k
            while not stop.is_set():
                await client.chat.completions.create(
                    model="scripted",
                    messages=[{"role": "user", "content": f"question {item}"}],
                    n=spec["group_size"],
                    max_tokens=8,
                )
                done.append(time.monotonic())
                item += spec["workers"]

        tasks = [asyncio.create_task(worker(k)) for k in range(spec["workers"])]
        await asyncio.sleep(spec["warmup"])
        start, cpu_start = time.monotonic(), time.process_time()
        await asyncio.sleep(spec["duration"])
        end, cpu_end = time.monotonic(), time.process_time()
        stop.set()
        await asyncio.gather(*tasks, return_exceptions=True)
        print(
            json.dumps({"requests": sum(1 for t in done if start <= t < end), "cpu_s": cpu_end - cpu_start})
        )

    asyncio.run(main())


# ----------------------------------------------------------------------------------------------------------
# The original package, in its own virtualenv
# ----------------------------------------------------------------------------------------------------------
def isolated_env() -> dict[str, str]:
    """The environment without ``PYTHONPATH`` (a venv then sees only its own packages)."""
    return {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}


def ensure_original(venv: Path) -> Path:
    """Python of a virtualenv with the full atroposlib 0.4.0 (env side included); created/completed once.

    Safe to run concurrently (a lock file serialises the setup); other benchmarks share the same venv.
    """
    python = venv / "bin" / "python"
    probe = [str(python), "-c", "import atroposlib.envs.base"]

    def ready() -> bool:
        # run outside this checkout so that its atroposlib does not shadow the installed original
        return (
            python.exists()
            and subprocess.run(probe, capture_output=True, cwd=venv.parent, env=isolated_env()).returncode
            == 0
        )

    if ready():
        return python
    venv.parent.mkdir(parents=True, exist_ok=True)
    with open(venv.parent / f"{venv.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if ready():
            return python
        log(f"installing atroposlib=={ORIGINAL_VERSION} into {venv} (first run only)...")
        if not python.exists():
            subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
        subprocess.run(
            [
                str(python),
                "-m",
                "pip",
                "install",
                "--quiet",
                "--disable-pip-version-check",
                f"atroposlib=={ORIGINAL_VERSION}",
            ],
            check=True,
            env=isolated_env(),
        )
        if not ready():
            raise RuntimeError(f"atroposlib {ORIGINAL_VERSION} is not importable from {python}")
    return python


# ----------------------------------------------------------------------------------------------------------
# Measurement
# ----------------------------------------------------------------------------------------------------------
class PullingTrainer:
    """Registers as the trainer and pulls batches continuously, recording when groups arrive."""

    def __init__(self, api_url: str, batch_size: int):
        import requests

        self.requests = requests
        self.url = api_url
        self.arrivals: list[tuple[float, int]] = []
        self._stop = threading.Event()
        requests.post(
            f"{api_url}/register",
            json={
                "wandb_group": "bench",
                "wandb_project": "bench",
                "batch_size": batch_size,
                "max_token_len": 4096,
                "checkpoint_dir": "",
                "save_checkpoint_interval": -1,
                "starting_step": 0,
                "num_steps": 10**9,
            },
            timeout=10,
        ).raise_for_status()
        self.pull()
        self._thread = threading.Thread(target=self._loop, daemon=True)
        self._thread.start()

    def pull(self) -> int:
        batch = self.requests.get(f"{self.url}/batch", timeout=30).json().get("batch")
        if batch:
            self.arrivals.append((time.monotonic(), len(batch)))
            return len(batch)
        return 0

    def _loop(self) -> None:
        while not self._stop.is_set():
            try:
                if not self.pull():
                    time.sleep(0.01)
            except Exception:
                time.sleep(0.1)

    def groups_between(self, start: float, end: float) -> int:
        return sum(n for t, n in list(self.arrivals) if start <= t < end)

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(10)


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far (Linux ``/proc``; 0.0 elsewhere)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _pin(core: int | None):
    if core is None or not hasattr(os, "sched_setaffinity"):
        return None
    return lambda: os.sched_setaffinity(0, {core})


def measure(label: str, python: str, args, inference_url: str, tokenizer: str, workdir: Path) -> dict:
    """Run one env implementation and return its throughput numbers."""
    from atroposlib.testing.api_process import launch_api
    from atroposlib.utils.processes import stop_process

    bound = args.workers * args.group_size / args.delay
    with launch_api(
        ["--store", "memory", "--max-queue-sequences", "0"], data_dir=workdir / f"api-{label}"
    ) as api:
        trainer = PullingTrainer(api.url, batch_size=args.group_size * 2)
        spec = {
            "group_size": args.group_size,
            "workers": args.workers,
            "tokenizer": tokenizer,
            "api_url": api.url,
            "inference_url": inference_url,
        }
        env_log = open(workdir / f"env-{label}.log", "wb")  # noqa: SIM115
        proc = subprocess.Popen(
            [python, os.path.abspath(__file__), "--run-env", json.dumps(spec)],
            stdout=env_log,
            stderr=subprocess.STDOUT,
            cwd=workdir,
            env=isolated_env(),
            preexec_fn=_pin(args.env_core),
            start_new_session=True,
        )
        try:
            deadline = time.monotonic() + 180
            while not trainer.arrivals:
                if proc.poll() is not None or time.monotonic() > deadline:
                    env_log.close()
                    tail = (workdir / f"env-{label}.log").read_text(errors="replace")[-3000:]
                    raise RuntimeError(f"{label} env produced nothing (exit {proc.poll()}):\n{tail}")
                time.sleep(0.05)
            start = time.monotonic() + args.warmup
            end = start + args.duration
            log(f"[{label}] producing; measuring for {args.duration:g} s after {args.warmup:g} s of warm-up")
            time.sleep(max(0.0, start - time.monotonic()))
            cpu_start = cpu_seconds(proc.pid)
            time.sleep(max(0.0, end - time.monotonic()))
            cpu_used = cpu_seconds(proc.pid) - cpu_start
            time.sleep(0.5)
            groups = trainer.groups_between(start, end)
        finally:
            stop_process(proc, 20)
            env_log.close()
            trainer.stop()
    rollouts = groups * args.group_size
    rollouts_per_s = rollouts / args.duration
    return {
        "label": label,
        "rollouts_per_s": rollouts_per_s,
        "bound": bound,
        "fraction": rollouts_per_s / bound,
        "cpu_ms_per_rollout": 1000.0 * cpu_used / rollouts if rollouts else float("nan"),
        "cpu_share": cpu_used / args.duration,
    }


def measure_reference(args, inference_url: str) -> dict:
    """The same inference calls without an env: what the client library and this machine allow."""
    spec = {
        "inference_url": inference_url,
        "workers": args.workers,
        "group_size": args.group_size,
        "warmup": min(args.warmup, 3.0),
        "duration": args.duration,
    }
    out = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--run-reference", json.dumps(spec)],
        capture_output=True,
        text=True,
        check=True,
        env=isolated_env(),
        preexec_fn=_pin(args.env_core),
        timeout=args.duration + 120,
    )
    data = json.loads(out.stdout.strip().splitlines()[-1])
    rollouts = data["requests"] * args.group_size
    bound = args.workers * args.group_size / args.delay
    return {
        "label": "inference calls only",
        "rollouts_per_s": rollouts / args.duration,
        "bound": bound,
        "fraction": rollouts / args.duration / bound,
        "cpu_ms_per_rollout": 1000.0 * data["cpu_s"] / rollouts if rollouts else float("nan"),
        "cpu_share": data["cpu_s"] / args.duration,
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--run-env", metavar="SPEC", help=argparse.SUPPRESS)
    parser.add_argument("--run-reference", metavar="SPEC", help=argparse.SUPPRESS)
    parser.add_argument("--delay", type=float, default=1.0, help="inference latency per request, seconds")
    parser.add_argument("--workers", type=int, default=32, help="max_num_workers of the env")
    parser.add_argument("--group-size", type=int, default=4)
    parser.add_argument("--duration", type=float, default=20.0, help="measurement window, seconds")
    parser.add_argument(
        "--warmup", type=float, default=6.0, help="seconds after the first group before measuring"
    )
    parser.add_argument(
        "--env-core", type=int, default=0, help="CPU core for the env process (-1: no pinning)"
    )
    parser.add_argument("--original-venv", type=Path, default=DEFAULT_VENV)
    parser.add_argument("--skip-original", action="store_true", help="measure only this package")
    parser.add_argument("--json", type=Path, help="also write the results to this file")
    args = parser.parse_args(argv)
    if args.run_env:
        run_env(json.loads(args.run_env))
        return 0
    if args.run_reference:
        run_reference(json.loads(args.run_reference))
        return 0
    if args.env_core < 0:
        args.env_core = None

    import tempfile

    from atroposlib.testing.scripted_server import launch_scripted_server
    from atroposlib.testing.tiny_model import build_tiny_model

    tokenizer = str(build_tiny_model())
    original_python = None if args.skip_original else str(ensure_original(args.original_venv))
    if args.env_core is not None and hasattr(os, "sched_setaffinity") and (os.cpu_count() or 1) > 1:
        # keep the API, the inference server and this process off the env's core
        others = set(range(os.cpu_count() or 1)) - {args.env_core}
        with contextlib.suppress(OSError):
            os.sched_setaffinity(0, others)
    results = []
    with tempfile.TemporaryDirectory(prefix="atropos-env-bench-") as tmp:
        workdir = Path(tmp)
        with launch_scripted_server(responses=["4"], delay_s=args.delay, in_subprocess=True) as inference:
            log("[inference calls only] measuring the client and machine ceiling")
            reference = measure_reference(args, inference.base_url)
            results.append(
                measure("this package", sys.executable, args, inference.base_url, tokenizer, workdir)
            )
            if original_python:
                results.append(
                    measure(
                        f"atroposlib {ORIGINAL_VERSION}",
                        original_python,
                        args,
                        inference.base_url,
                        tokenizer,
                        workdir,
                    )
                )
    bound = results[0]["bound"]
    results_and_reference = [reference, *results]
    print(
        f"\nenv loop overhead: delay {args.delay:g} s, {args.workers} workers, group size {args.group_size}, "
        f"bound {bound:.1f} rollouts/s, env on {'core ' + str(args.env_core) if args.env_core is not None else 'any core'}"
    )
    print(f"{'':<22}{'rollouts/s':>12}{'of bound':>10}{'env CPU ms/rollout':>20}{'env CPU use':>13}")
    for r in results_and_reference:
        print(
            f"{r['label']:<22}{r['rollouts_per_s']:>12.1f}{r['fraction']:>10.1%}"
            f"{r['cpu_ms_per_rollout']:>20.2f}{r['cpu_share']:>13.0%}"
        )
    if len(results) == 2 and results[1]["rollouts_per_s"] > 0:
        ours, orig = results
        print(
            f"{'ratio (ours/original)':<22}{ours['rollouts_per_s'] / orig['rollouts_per_s']:>11.2f}x{'':>10}"
            f"{ours['cpu_ms_per_rollout'] / orig['cpu_ms_per_rollout']:>19.2f}x"
        )
    target_met = results[0]["fraction"] >= 0.95
    print(f"target >= 95% of bound: {'met' if target_met else 'NOT met'}", end="")
    if reference["rollouts_per_s"] > 0:
        print(
            f" (this package reaches {results[0]['rollouts_per_s'] / reference['rollouts_per_s']:.1%} of what the bare client reaches here)"
        )
    else:
        print()
    if args.json:
        payload = {"args": {k: str(v) for k, v in vars(args).items()}, "results": results_and_reference}
        args.json.write_text(json.dumps(payload, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
