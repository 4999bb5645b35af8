"""Start and stop a real trajectory API (``run-api``) process for tests and tools.

The process listens on loopback only, is waited for through ``GET /info`` (the readiness probe)
and is stopped by its own pid, never by name or port.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from atroposlib.utils.processes import read_tail, start_service, stop_process, wait_until_ok


def free_port() -> int:
    """Return a TCP port that is free on 127.0.0.1 right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class ApiProcess:
    """A running ``python -m atroposlib.cli.run_api`` subprocess."""

    port: int
    data_dir: Path
    args: list[str]
    log_path: Path
    api_key: str | None = None
    proc: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.api_key}"} if self.api_key else {}

    def start(self, timeout: float = 90.0) -> ApiProcess:
        """Start the server and block until ``GET /info`` answers 200 (RuntimeError on failure)."""
        cmd = [
            sys.executable, "-m", "atroposlib.cli.run_api",
            "--host", "127.0.0.1", "--port", str(self.port),
            "--data-dir", str(self.data_dir), *self.args,
        ]  # fmt: skip
        env = dict(os.environ)
        if self.api_key:
            env["ATROPOS_API_KEY"] = self.api_key
        self.proc = start_service(cmd, self.log_path, env=env)
        wait_until_ok(
            self.proc, f"{self.url}/info", name="run-api", timeout=timeout, interval=0.05, headers=self.headers(),
            log_tail=self.log_tail, on_failure=self.stop,
        )  # fmt: skip
        return self

    def log_tail(self, n: int = 40) -> str:
        return read_tail(self.log_path, n)

    def kill9(self) -> None:
        """Kill the server with SIGKILL (simulates a crash) and reap it."""
        stop_process(self.proc, sig=signal.SIGKILL)

    def stop(self, timeout: float = 10.0) -> None:
        """Stop the server with SIGTERM (SIGKILL after ``timeout``) by its own pid."""
        stop_process(self.proc, timeout)


@contextlib.contextmanager
def launch_api(
    args: Sequence[str] = (),
    *,
    data_dir: str | Path | None = None,
    port: int | None = None,
    api_key: str | None = None,
    timeout: float = 90.0,
) -> Iterator[ApiProcess]:
    """Run a real trajectory API for the duration of the ``with`` block.

    ``data_dir`` defaults to a fresh temporary directory (removed afterwards); ``args`` are extra
    ``run-api`` flags such as ``["--store", "memory"]``.
    """
    with contextlib.ExitStack() as stack:
        if data_dir is None:
            data_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="atropos-api-"))
        data_dir = Path(data_dir)
        data_dir.mkdir(parents=True, exist_ok=True)
        api = ApiProcess(
            port=port or free_port(),
            data_dir=data_dir,
            args=list(args),
            log_path=data_dir / "run-api.log",
            api_key=api_key,
        )
        api.start(timeout=timeout)
        try:
            yield api
        finally:
            api.stop()
