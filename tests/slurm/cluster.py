"""A one-node SLURM cluster on 127.0.0.1 for tests: munge, slurmctld and slurmd in a temporary directory.

Everything (key, sockets, state, spool, logs, ports) lives under the directory; ``SLURM_CONF`` points
the client commands at it. The daemons are stopped by their own pids.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

#: Commands the cluster and the tests need.
REQUIRED = ("munged", "slurmctld", "slurmd", "sbatch", "srun", "scontrol", "squeue", "scancel", "sinfo")
NODE = "localhost"


def missing_binaries() -> list[str]:
    return [name for name in REQUIRED if shutil.which(name) is None and not Path("/usr/sbin", name).exists()]


def _which(name: str) -> str:
    return shutil.which(name) or str(Path("/usr/sbin", name))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SLURM_CONF = """\
ClusterName=atropostest
SlurmctldHost={node}(127.0.0.1)
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
CredType=cred/munge
AuthInfo=socket={root}/munge/munge.socket
SlurmctldPort={ctld_port}
SlurmdPort={slurmd_port}
StateSaveLocation={root}/state
SlurmdSpoolDir={root}/spool
SlurmctldPidFile={root}/slurmctld.pid
SlurmdPidFile={root}/slurmd.pid
SlurmctldLogFile={root}/log/slurmctld.log
SlurmdLogFile={root}/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_Core
ReturnToService=2
MpiDefault=none
KillWait=30
InactiveLimit=0
NodeName={node} NodeAddr=127.0.0.1 CPUs={cpus} RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes={node} Default=YES MaxTime=INFINITE State=UP OverSubscribe=FORCE
"""


@dataclass
class SlurmCluster:
    root: Path
    env: dict[str, str] = field(default_factory=dict)
    pid_files: list[Path] = field(default_factory=list)

    @property
    def conf(self) -> Path:
        return self.root / "slurm.conf"

    def run(self, *args: str, timeout: float = 30, check: bool = True) -> subprocess.CompletedProcess:
        """Run a SLURM client command against this cluster."""
        return subprocess.run(
            list(args), env=self.env, capture_output=True, text=True, timeout=timeout, check=check
        )

    def start(self, timeout: float = 60.0) -> SlurmCluster:
        root = self.root
        for sub in ("munge", "state", "spool", "log"):
            (root / sub).mkdir(parents=True, exist_ok=True)
        key = root / "munge" / "munge.key"
        key.write_bytes(os.urandom(1024))
        key.chmod(0o600)
        (root / "munge").chmod(0o711)
        munge = root / "munge"
        subprocess.run(
            [
                _which("munged"), "--force", f"--socket={munge}/munge.socket", f"--key-file={key}",
                f"--log-file={munge}/munged.log", f"--pid-file={munge}/munged.pid",
                f"--seed-file={munge}/munged.seed",
            ],
            check=True, capture_output=True, timeout=30,
        )  # fmt: skip
        self.pid_files.append(munge / "munged.pid")
        self.conf.write_text(
            SLURM_CONF.format(
                root=root,
                node=NODE,
                ctld_port=_free_port(),
                slurmd_port=_free_port(),
                cpus=os.cpu_count() or 1,
            )
        )
        self.env = {**os.environ, "SLURM_CONF": str(self.conf)}
        subprocess.run([_which("slurmctld"), "-f", str(self.conf)], env=self.env, check=True, timeout=30)
        self.pid_files.append(root / "slurmctld.pid")
        subprocess.run(
            [_which("slurmd"), "-f", str(self.conf), "-N", NODE], env=self.env, check=True, timeout=30
        )
        self.pid_files.append(root / "slurmd.pid")
        deadline = time.monotonic() + timeout
        state = ""
        while time.monotonic() < deadline:
            out = self.run("sinfo", "--noheader", "--format=%T", check=False)
            state = out.stdout.strip()
            if state == "idle":
                return self
            time.sleep(0.5)
        raise RuntimeError(f"the test cluster's node is {state!r}, not idle:\n{self.log_tail()}")

    def log_tail(self, lines: int = 30) -> str:
        parts = []
        for name in ("log/slurmctld.log", "log/slurmd.log", "munge/munged.log"):
            path = self.root / name
            if path.exists():
                parts.append(
                    f"--- {name}\n" + "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
                )
        return "\n".join(parts)

    def stop(self) -> None:
        self.run("scancel", "--full", "--user=root", check=False)
        pids = []
        for path in reversed(self.pid_files):  # slurmd, slurmctld, munged
            try:
                pids.append(int(path.read_text().strip()))
            except (OSError, ValueError):
                continue
        for pid in pids:
            _terminate(pid)


def _terminate(pid: int, timeout: float = 15.0) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.2)
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
