"""The documented sbatch scripts on a real one-node SLURM, in the small CPU configuration of SLURM.md.

* ``atropos_run.sbatch``: API, scripted inference, an arithmetic environment and the trainer (torchrun) in
  one job; training steps happen; a plain ``scancel`` stops every role, leaves no process of the job, and
  the API's store (opened again afterwards) holds every group the environment saw acknowledged.
* ``atropos_inference.sbatch`` + ``atropos_env.sbatch``: the pieces, joining an API started by the test;
  the environment finds the inference job's server through ``INFERENCE_JOB_ID``; the ordered stop
  (``scancel --batch --signal=TERM``) ends both jobs cleanly.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import requests

from atroposlib.testing.api_process import free_port, launch_api
from example_trainer.grpo.reporting import read_metrics

pytestmark = pytest.mark.slurm

REPO = Path(__file__).resolve().parents[2]
SCRIPTS = REPO / "scripts" / "slurm"
API_KEY = "slurm-test-key"
GROUP_SIZE = 4
# The CPU configuration (SLURM.md, "A small CPU run"): tiny model, scripted inference, arithmetic env.
ENV_ARGS = (
    f"--env.group_size {GROUP_SIZE} --env.use_wandb false --env.max_token_length 256 --env.steps_per_eval 0 "
    "--env.total_steps 100000 --env.min_digits 1 --env.max_digits 1 --env.max_batches_offpolicy 2 "
    "--env.shutdown_timeout 5 --env.eval_size 4"
)
TRAINER_ARGS = (
    "--device cpu --optimizer adamw --batch-size 2 --gradient-accumulation-steps 2 --seq-len 256 "
    "--training-steps 100000 --checkpoint-interval 0 --lr 1e-4 --api-timeout 120"
)


def _cpu_env(cluster, run_dir: Path, model: Path, **extra: str) -> dict[str, str]:
    env = {
        **cluster.env,
        "ATROPOS_REPO": str(REPO),
        "RUN_DIR": str(run_dir),
        "PYTHON": sys.executable,
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{cluster.env['PATH']}",
        "PYTHONPATH": str(REPO),
        "MODEL": str(model),
        "INFER_BACKEND": "scripted",
        "GPUS_PER_NODE": "2",
        "TRAINER_GPUS": "1",
        "INFER_PORT": str(free_port()),
        "API_PORT": str(free_port()),
        "RDZV_PORT": str(free_port()),
        "ATROPOS_API_KEY": API_KEY,
        "OMP_NUM_THREADS": "1",
        "HF_HUB_OFFLINE": "1",
        "WANDB_MODE": "offline",
        "STOP_TIMEOUT": "60",
    }
    env.update(extra)
    return env


def _sbatch(cluster, script: str, env: dict[str, str], run_dir: Path) -> str:
    run_dir.mkdir(parents=True, exist_ok=True)
    out = subprocess.run(
        ["sbatch", "--parsable", "--nodes=1", f"--output={run_dir}/job.out", str(SCRIPTS / script)],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert out.returncode == 0, out.stderr
    return out.stdout.strip().split(";")[0]


def _start_trainer(api, tmp_path: Path) -> None:
    """Register a trainer (batches of 4 sequences) with ``api`` and ask for its first batch."""
    registration = {
        "wandb_group": "g", "wandb_project": "p", "batch_size": 4, "max_token_len": 256,
        "checkpoint_dir": str(tmp_path / "ckpt"), "save_checkpoint_interval": -1, "starting_step": 0,
        "num_steps": 1000,
    }  # fmt: skip
    requests.post(f"{api.url}/register", json=registration, headers=api.headers(), timeout=10)
    requests.get(f"{api.url}/batch", headers=api.headers(), timeout=10)


def _env_job(
    cluster, model: Path, run_dir: Path, api, infer_env: dict[str, str], infer_job: str, workers: int
) -> str:
    """Submit ``atropos_env.sbatch`` (arithmetic, ``workers`` processes) joining ``api`` and the inference job."""
    env = _cpu_env(
        cluster, run_dir, model, GPUS_PER_NODE="1", INFER_PORT=infer_env["INFER_PORT"], INFERENCE_JOB_ID=infer_job,
        ATROPOS_API_URL=api.url, ENV_SCRIPT="environments/arithmetic_server.py", ENV_ARGS=ENV_ARGS,
        NUM_ENV_WORKERS=str(workers),
    )  # fmt: skip
    return _sbatch(cluster, "atropos_env.sbatch", env, run_dir)


def _job_state(cluster, job_id: str) -> str | None:
    out = cluster.run("squeue", "--noheader", f"--jobs={job_id}", "--format=%T", check=False)
    return out.stdout.strip() or None


def _wait(
    what: str,
    condition: Callable[[], Any],
    timeout: float,
    diagnose: Callable[[], str],
    alive: Callable[[], bool] = lambda: True,
) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        if not alive():
            pytest.fail(f"the job ended while waiting for {what}\n{diagnose()}")
        time.sleep(1)
    pytest.fail(f"timed out after {timeout:.0f} s waiting for {what}\n{diagnose()}")


def _logs(run_dir: Path, lines: int = 25) -> str:
    parts = []
    for path in sorted(run_dir.rglob("*.log")) + sorted(run_dir.glob("job.out")):
        text = path.read_text(errors="replace").replace("\r", "\n").splitlines()
        parts.append(f"--- {path.relative_to(run_dir)}\n" + "\n".join(text[-lines:]))
    return "\n".join(parts)


def _job_processes(job_id: str) -> dict[int, str]:
    """pid -> command line of every process carrying ``SLURM_JOB_ID=<job_id>`` in its environment."""
    found = {}
    marker = f"SLURM_JOB_ID={job_id}".encode()
    for proc in Path("/proc").iterdir():
        if not proc.name.isdigit():
            continue
        try:
            if marker in (proc / "environ").read_bytes().split(b"\0"):
                found[int(proc.name)] = (proc / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except OSError:
            continue
    return found


def _stop_and_check_no_leftovers(cluster, job_id: str, run_dir: Path, *scancel_args: str) -> None:
    cluster.run("scancel", *scancel_args, job_id)
    _wait(f"job {job_id} to end", lambda: _job_state(cluster, job_id) is None, 90, lambda: _logs(run_dir))
    leftovers = _wait(
        f"the processes of job {job_id} to exit",
        lambda: not _job_processes(job_id) or None,
        15,
        lambda: f"leftover processes: {_job_processes(job_id)}\n{_logs(run_dir)}",
    )
    assert leftovers


def _groups_sent(log: Path) -> int:
    match = re.search(r"stopped: (\d+) groups sent", log.read_text(errors="replace"))
    assert match, f"{log.name} has no clean stop line:\n{log.read_text(errors='replace')[-2000:]}"
    return int(match[1])


def test_whole_run_trains_and_stops_cleanly_on_scancel(slurm_cluster, tiny_model_dir, tmp_path):
    run_dir = tmp_path / "run"
    env = _cpu_env(
        slurm_cluster, run_dir, tiny_model_dir, ENV_SCRIPT="environments/arithmetic_server.py",
        ENV_ARGS=ENV_ARGS, TRAINER_ARGS=TRAINER_ARGS,
    )  # fmt: skip
    job = _sbatch(slurm_cluster, "atropos_run.sbatch", env, run_dir)
    metrics_file = run_dir / "checkpoints" / "metrics.jsonl"

    def steps() -> int:
        if not metrics_file.exists():
            return 0
        return sum(1 for m in read_metrics(metrics_file).values() if "train/loss" in m)

    running = lambda: _job_state(slurm_cluster, job) is not None  # noqa: E731
    _wait("two training steps", lambda: steps() >= 2, 180, lambda: _logs(run_dir), running)
    roles = " ".join(_job_processes(job).values())
    for role in ("atroposlib.cli.run_api", "atroposlib.testing.scripted_server", "arithmetic_server.py"):
        assert role in roles, f"{role} is not running in job {job}"
    assert "example_trainer.grpo" in roles

    _stop_and_check_no_leftovers(slurm_cluster, job, run_dir)

    logs = run_dir / "logs"
    for role in ("api", "trainer", "inference", "env"):
        assert list(logs.glob(f"{role}_*.log")), f"no {role} log in {sorted(p.name for p in logs.iterdir())}"
    assert (logs / f"inference_localhost_{env['INFER_PORT']}.log").exists()
    sent = sum(_groups_sent(p) for p in logs.glob("env_*.log"))
    metrics = read_metrics(metrics_file)
    trained_steps = sorted(s for s, m in metrics.items() if "train/loss" in m)
    trained = sum(metrics[s]["train/num_sequences"] for s in trained_steps)
    assert trained_steps and trained > 0 and sent > 0
    # the trainer stopped cleanly: it checkpointed its last step
    last = trained_steps[-1]
    assert (run_dir / "checkpoints" / f"step_{last}" / "model.safetensors").exists(), _logs(run_dir)

    # Every group the API acknowledged was trained or is still in its store.
    with launch_api(data_dir=run_dir / "api_data", api_key=API_KEY) as api:
        health = requests.get(f"{api.url}/health", headers=api.headers(), timeout=10).json()
    stored = health["waiting_sequences"] + health["unacked_batches"] * 4
    assert trained + stored >= sent * GROUP_SIZE, (trained, health, sent)
    assert health["current_step"] >= last


def test_inference_and_env_jobs_join_an_existing_api(slurm_cluster, tiny_model_dir, tmp_path):
    with launch_api(data_dir=tmp_path / "api", api_key=API_KEY) as api:
        _start_trainer(api, tmp_path)

        infer_dir, env_dir = tmp_path / "inference", tmp_path / "env"
        infer_env = _cpu_env(slurm_cluster, infer_dir, tiny_model_dir, GPUS_PER_NODE="1")
        infer_job = _sbatch(slurm_cluster, "atropos_inference.sbatch", infer_env, infer_dir)
        server = f"http://127.0.0.1:{infer_env['INFER_PORT']}"

        def healthy() -> bool:
            try:
                return requests.get(f"{server}/health", timeout=2).status_code == 200
            except requests.RequestException:
                return False

        _wait(
            "the inference job's server", healthy, 120, lambda: _logs(infer_dir),
            lambda: _job_state(slurm_cluster, infer_job) is not None,
        )  # fmt: skip

        env_job = _env_job(slurm_cluster, tiny_model_dir, env_dir, api, infer_env, infer_job, workers=2)

        served: list[dict] = []

        def batch_served() -> bool:
            reply = requests.get(f"{api.url}/batch", headers=api.headers(), timeout=10).json()
            if reply.get("batch"):
                served.append(reply)
            return bool(served)

        _wait(
            "a batch from the env job", batch_served, 180, lambda: _logs(env_dir) + _logs(infer_dir),
            lambda: _job_state(slurm_cluster, env_job) is not None,
        )  # fmt: skip

        def connected() -> int:
            envs = requests.get(f"{api.url}/inspect/envs", headers=api.headers(), timeout=10).json()["envs"]
            return len([e for e in envs if e["connected"]])

        _wait("both env workers to register", lambda: connected() == 2, 60, lambda: _logs(env_dir))

        # the ordered stop of SLURM.md: the batch script stops its roles one after the other
        _stop_and_check_no_leftovers(slurm_cluster, env_job, env_dir, "--batch", "--signal=TERM")
        sent = sum(_groups_sent(p) for p in (env_dir / "logs").glob("env_*.log"))
        assert "stopping env" in (env_dir / "job.out").read_text()
        _stop_and_check_no_leftovers(slurm_cluster, infer_job, infer_dir, "--batch", "--signal=TERM")

        health = requests.get(f"{api.url}/health", headers=api.headers(), timeout=10).json()
        received = sum(len(b["batch"]) for b in served) * GROUP_SIZE + health["waiting_sequences"]
        assert received >= sent * GROUP_SIZE, (received, sent, health)


def _step_id(cluster, job_id: str, name: str) -> str | None:
    out = cluster.run("squeue", "--noheader", "--steps", f"--jobs={job_id}", "--format=%i %j", check=False)
    return next((line.split()[0] for line in out.stdout.splitlines() if line.split()[1:] == [name]), None)


def test_a_cancelled_env_step_loses_nothing_and_its_requeued_job_rejoins(
    slurm_cluster, tiny_model_dir, tmp_path
):
    """``scancel`` of the environment's job step (killed without notice), then ``scontrol requeue`` of its job:
    every group it reported sent is in the API, and the requeued job registers again and sends more."""
    with launch_api(data_dir=tmp_path / "api", api_key=API_KEY) as api:
        _start_trainer(api, tmp_path)

        infer_dir, env_dir = tmp_path / "inference", tmp_path / "env"
        infer_env = _cpu_env(slurm_cluster, infer_dir, tiny_model_dir, GPUS_PER_NODE="1")
        infer_job = _sbatch(slurm_cluster, "atropos_inference.sbatch", infer_env, infer_dir)
        env_job = _env_job(slurm_cluster, tiny_model_dir, env_dir, api, infer_env, infer_job, workers=1)

        served: list[int] = []

        def received_groups() -> int:
            """Groups the API took: served to the trainer (drained here, as a trainer would) or queued."""
            reply = requests.get(f"{api.url}/batch", headers=api.headers(), timeout=10).json()
            served.append(len(reply.get("batch") or []))
            health = requests.get(f"{api.url}/health", headers=api.headers(), timeout=10).json()
            return sum(served) + int(health["waiting_sequences"]) // GROUP_SIZE

        def registrations() -> int:
            return len(
                requests.get(f"{api.url}/inspect/envs", headers=api.headers(), timeout=10).json()["envs"]
            )

        logs = lambda: _logs(env_dir) + _logs(infer_dir)  # noqa: E731
        running = lambda: _job_state(slurm_cluster, env_job) is not None  # noqa: E731
        _wait("groups from the env job", lambda: received_groups() >= 3, 240, logs, running)
        step = _wait("the env job step", lambda: _step_id(slurm_cluster, env_job, "env"), 30, logs)

        slurm_cluster.run("scancel", step)
        _wait("the env job to end", lambda: not running(), 120, logs)
        (first_log,) = (env_dir / "logs").glob("env_*.log")
        # Killed without notice: what it had in flight was never acknowledged; what it reported sent is in the API.
        reported = [int(n) for n in re.findall(r"sent (\d+) groups", first_log.read_text(errors="replace"))]
        first_log.rename(first_log.with_suffix(".first"))
        assert received_groups() >= max(reported, default=0)
        before_requeue = received_groups()

        slurm_cluster.run("scontrol", "requeue", env_job)
        _wait("the requeued job to register again", lambda: registrations() >= 2, 300, logs)
        _wait(
            "groups from the requeued job",
            lambda: received_groups() >= before_requeue + 1, 240, logs, running,
        )  # fmt: skip
        _stop_and_check_no_leftovers(slurm_cluster, env_job, env_dir, "--batch", "--signal=TERM")
        sent_after = sum(_groups_sent(p) for p in (env_dir / "logs").glob("env_*.log"))
        _stop_and_check_no_leftovers(slurm_cluster, infer_job, infer_dir, "--batch", "--signal=TERM")
        assert received_groups() >= before_requeue + sent_after
