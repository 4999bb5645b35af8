"""Run the trainer's vLLM server as a subprocess and keep it serving the newest weights.

:class:`VllmManager` starts ``python -m example_trainer.inference.vllm_api_server`` in its own process group,
waits for ``GET /health``, logs it to a file per launch, and refreshes it after a checkpoint in
one of four ways (:data:`RefreshMode`):

``restart``       stop the server and start it again on the checkpoint directory, under the
                  first model's name (``--served-model-name``) so environments keep working;
``reload``        ``POST /bridge/update_weights``: the running engine reloads the checkpoint in
                  place (no restart; falls back to ``restart`` if the server cannot);
``lora``          hot-swap: load the adapter directory under a new name and make it the active
                  adapter (``/v1/load_lora_adapter``, then ``/lora/load``);
``lora_restart``  restart the server on the base model, then activate the adapter.

With ``backend="hf"`` the server is ``python -m example_trainer.inference.hf_generation`` instead (Hugging Face
``generate`` in one process, for small models on a CPU, or where vLLM is not installed): the same
``/health``, ``/generate``, ``/bridge/update_weights`` and LoRA routes (adapters merged into a copy of the
base weights), so every mode works the same way.

Only the manager's own process group is ever signalled (never by name, port or GPU), and the server
never outlives the trainer: it gets SIGTERM when the trainer dies, and a server recorded in
``<log_dir>/inference_<port>.pid`` whose trainer is gone is stopped before a new one starts on that port
(:mod:`example_trainer.inference.server_lifetime`), so ``--resume`` after a ``kill -9`` just works. A server
that dies is detected (a watcher thread and every call check it), reported with the tail of its
log and restarted (``max_crash_restarts`` times, once by default); a further death raises :class:`VllmDiedError`.

Each time the server (re)starts, its base URL is written to the servers file (``servers_file``, default
``<log_dir>/inference_servers.txt``; :mod:`atroposlib.envs.server_handling.servers_file`), which environments
started with ``--openai.servers_file`` follow. A restart whose port is still held by another process (a server
that has not exited, anything else listening there) starts the server on a free port instead, so environments
following the file find it there; only the first start refuses a port in use.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any, Literal

import requests
from pydantic import BaseModel, ConfigDict, Field, field_validator

from atroposlib.envs.server_handling.servers_file import write_servers_file
from atroposlib.utils.processes import (
    ServiceNotReady,
    read_tail,
    signal_group,
    start_service,
    stop_process,
    wait_until_ok,
)
from example_trainer.inference.server_lifetime import ServerPidFile, bound_to_parent
from example_trainer.inference.weight_refresh import (
    WeightUpdateError,
    WeightUpdateUnsupported,
    request_weight_update,
    validate_checkpoint_dir,
)

logger = logging.getLogger(__name__)

RefreshMode = Literal["restart", "reload", "lora", "lora_restart"]
#: Files whose presence means a directory carries its own tokenizer.
_TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "tokenizer.model", "vocab.json")


class VllmError(RuntimeError):
    """Base class of the manager's errors; messages include the tail of the server log."""


class VllmStartError(VllmError):
    """The server exited or did not become healthy in time."""


class VllmDiedError(VllmError):
    """The server died again after its one automatic restart."""


class VllmManagerConfig(BaseModel):
    """Settings of :class:`VllmManager` (names follow the trainer's ``TrainingConfig``)."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    model_name: str | None = Field(
        None, description="name the server answers to (--served-model-name); default: the first model started"
    )
    tokenizer: str | None = Field(
        None, description="tokenizer source for checkpoints without tokenizer files; default: model_name"
    )
    vllm_host: str = "127.0.0.1"
    vllm_port: int = Field(9001, ge=1, le=65535)
    dtype: str = Field("auto", description="vLLM --dtype; 'auto' means float32 on CPU")
    max_model_len: int = Field(4096, ge=1)
    vllm_gpu: int | None = Field(None, ge=0, description="sets CUDA_VISIBLE_DEVICES for the server")
    vllm_gpu_memory_utilization: float | None = Field(
        None, gt=0, le=1, description="GPU machines only (on CPU vLLM reads it as a share of RAM)"
    )
    cpu_kvcache_space_gib: float = Field(1.0, gt=0, description="VLLM_CPU_KVCACHE_SPACE on CPU")
    refresh_mode: RefreshMode = "restart"
    max_lora_rank: int = Field(32, ge=1, description="vLLM --max-lora-rank (1, 8, 16, 32, 64, ...)")
    enforce_eager: bool = Field(False, description="skip torch.compile / CUDA graphs (faster start)")
    extra_args: list[str] = Field(default_factory=list, description="more vllm_api_server flags")
    log_dir: str = Field("./logs", description="server logs go to <log_dir>/vllm_<k>.log")
    startup_timeout: float = Field(600.0, gt=0, description="seconds to wait for /health")
    stop_timeout: float = Field(30.0, gt=0, description="seconds between SIGTERM and SIGKILL")
    request_timeout: float = Field(600.0, gt=0, description="seconds for weight/adapter update calls")
    max_crash_restarts: int = Field(1, ge=0, description="automatic restarts after the server dies")
    servers_file: str | None = Field(
        None,
        description="file the server's base URL is written to at each (re)start, for environments' "
        "--openai.servers_file; default <log_dir>/inference_servers.txt",
    )
    watch_interval: float | None = Field(2.0, gt=0, description="seconds between liveness checks; None: off")
    api_key: str | None = Field(None, description="the server's --api-key (sent as a bearer token)")
    backend: Literal["vllm", "hf"] = Field(
        "vllm",
        description="vllm (example_trainer.inference.vllm_api_server) or hf (example_trainer.inference.hf_generation: Hugging "
        "Face generate in one process, for small models on a CPU or without vLLM; adapters merged into the weights)",
    )
    inference_threads: int = Field(1, ge=1, description="torch threads of the hf server")
    hf_device: str = Field("cpu", description="torch device of the hf server (the trainer's, e.g. cuda:0)")
    shared_weights: bool = Field(
        False,
        description="serve from weights the trainer attaches to and trains in place (shared_vllm): "
        "ATROPOS_SHARED_WEIGHTS=1, no prefix cache, eager mode; hf: --shared-weights",
    )

    @field_validator("max_lora_rank")
    @classmethod
    def _check_rank(cls, value: int) -> int:
        if value not in VLLM_LORA_RANKS:
            raise ValueError(f"must be one of {VLLM_LORA_RANKS} (vLLM's --max-lora-rank values)")
        return value

    @classmethod
    def from_training_config(cls, cfg: Any) -> VllmManagerConfig:
        """Map the trainer's ``TrainingConfig`` (or any object with its field names) onto this config.

        ``weight_bridge_mode`` picks the mode: ``lora_only`` → ``lora``, ``lora_restart`` →
        ``lora_restart``, otherwise ``refresh_mode`` (``restart`` or ``reload``).
        """
        bridge = getattr(cfg, "weight_bridge_mode", "none")
        mode = {"lora_only": "lora", "lora_restart": "lora_restart"}.get(
            bridge, getattr(cfg, "refresh_mode", "restart")
        )
        if mode == "broadcast":  # the trainer broadcasts; a refresh from a checkpoint reloads in place
            mode = "reload"
        lora_r = int(getattr(cfg, "lora_r", 16))
        values: dict[str, Any] = {
            "model_name": getattr(cfg, "model_name", None),
            "vllm_port": getattr(cfg, "vllm_port", 9001),
            "dtype": getattr(cfg, "dtype", "auto"),
            "max_model_len": getattr(cfg, "max_model_len", 4096),
            "vllm_gpu": getattr(cfg, "vllm_gpu", None),
            "vllm_gpu_memory_utilization": getattr(cfg, "vllm_gpu_memory_utilization", None),
            "refresh_mode": mode,
            "max_lora_rank": lora_rank_limit(max(2 * lora_r, 32)),
            "log_dir": getattr(cfg, "log_dir", "./logs"),
            "shared_weights": bridge == "shared_vllm",
        }
        device = str(getattr(cfg, "device", "cpu"))
        values["hf_device"] = device if device.startswith("cuda") else "cpu"
        # Optional knobs a training config may carry under these names.
        optional = {
            "vllm_host": "vllm_host",
            "vllm_enforce_eager": "enforce_eager",
            "vllm_startup_timeout": "startup_timeout",
            "vllm_extra_args": "extra_args",
            "vllm_api_key": "api_key",
            "inference_backend": "backend",
            "inference_threads": "inference_threads",
            "inference_servers_file": "servers_file",
            "vllm_max_restarts": "max_crash_restarts",
        }
        for source, target in optional.items():
            value = getattr(cfg, source, None)
            if value is not None:
                values[target] = value
        return cls(**values)


#: The values vLLM accepts for ``--max-lora-rank``.
VLLM_LORA_RANKS = (1, 8, 16, 32, 64, 128, 256, 320, 512)


def lora_rank_limit(rank: int) -> int:
    """The smallest ``--max-lora-rank`` value vLLM accepts that is >= ``rank``.

    Raises:
        ValueError: ``rank`` exceeds vLLM's largest LoRA rank.
    """
    for allowed in VLLM_LORA_RANKS:
        if allowed >= rank:
            return allowed
    raise ValueError(f"LoRA rank {rank} exceeds vLLM's maximum {VLLM_LORA_RANKS[-1]}")


def cuda_available() -> bool:
    try:
        import torch

        return bool(torch.cuda.is_available())
    except ImportError:
        return False


def has_tokenizer(model_dir: str | Path) -> bool:
    """Whether ``model_dir`` is a local directory carrying tokenizer files."""
    path = Path(model_dir)
    return path.is_dir() and any((path / name).exists() for name in _TOKENIZER_FILES)


def port_in_use(host: str, port: int) -> bool:
    """True when something already accepts connections on ``host:port``."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.settimeout(0.5)
        return sock.connect_ex((host, port)) == 0


def free_port(host: str) -> int:
    """A port on ``host`` that nothing listens on now (the kernel's choice)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _wait_port_free(host: str, port: int, timeout: float) -> None:
    """Wait up to ``timeout`` seconds for ``host:port`` to stop accepting connections."""
    deadline = time.monotonic() + timeout
    while port_in_use(host, port) and time.monotonic() < deadline:
        time.sleep(0.1)


class VllmManager:
    """Own one vLLM server subprocess for the trainer.

    ``VllmManager(config)`` accepts a :class:`VllmManagerConfig` or the trainer's
    ``TrainingConfig`` (see :meth:`VllmManagerConfig.from_training_config`). Methods are
    thread-safe; nothing is started until :meth:`start`.
    """

    def __init__(self, config: Any) -> None:
        self.config = (
            config
            if isinstance(config, VllmManagerConfig)
            else VllmManagerConfig.from_training_config(config)
        )
        self._lock = threading.RLock()
        self._proc: subprocess.Popen[bytes] | None = None
        self._launches = 0
        self._crash_restarts = 0
        self._log_path: Path | None = None
        self._model_path: str | None = None  #: what the running server loaded (weights)
        self._base_model: str | None = None  #: the first model started (LoRA base, tokenizer default)
        self._served_name: str | None = None
        self._adapter: tuple[str, str] | None = None  #: (adapter_dir, name) to re-activate after restarts
        self._died: VllmDiedError | None = None
        self._stopping = False
        self._stopped = False
        self._serving = False  #: the current process became healthy (so its exit is a crash)
        self._watcher: threading.Thread | None = None
        self._watch_stop = threading.Event()
        #: the port the server listens on: ``vllm_port``, or a free one after a restart found it held
        self._port = self.config.vllm_port

    # --- properties ----------------------------------------------------------------------------
    @property
    def root_url(self) -> str:
        """``http://host:port`` (the Atropos routes)."""
        return f"http://{self.config.vllm_host}:{self._port}"

    @property
    def base_url(self) -> str:
        """OpenAI-compatible base URL ``http://host:port/v1`` for environments."""
        return f"{self.root_url}/v1"

    @property
    def port(self) -> int:
        """The port the server listens on (``vllm_port`` unless a restart found it held)."""
        return self._port

    @property
    def servers_file(self) -> Path:
        """The file the server's base URL is written to at each (re)start (for ``--openai.servers_file``)."""
        return Path(self.config.servers_file or Path(self.config.log_dir) / "inference_servers.txt")

    @property
    def log_path(self) -> Path | None:
        """Log file of the current (or last) server launch."""
        return self._log_path

    @property
    def served_model_name(self) -> str | None:
        return self._served_name

    @property
    def pid(self) -> int | None:
        return self._proc.pid if self._proc is not None else None

    def exited(self) -> bool:
        """Whether the server process was started and has exited (without restarting it)."""
        return self._proc is not None and self._proc.poll() is not None

    @property
    def launches(self) -> int:
        """How many times a server process was started."""
        return self._launches

    # --- lifecycle -----------------------------------------------------------------------------
    def start(self, model_path: str) -> None:
        """Start the server on ``model_path`` and block until ``/health`` answers 200.

        Raises:
            VllmStartError: the port is taken by another process, or the server exited or did
                not become healthy within ``startup_timeout`` (message has the log tail).
        """
        with self._lock:
            if self._base_model is None:
                self._base_model = model_path
                self._served_name = self.config.model_name or model_path
            if self._proc is not None and self._proc.poll() is None:
                self._terminate()
            self._stopped = False
            self._launch(model_path)
            if self.config.watch_interval and self._watcher is None:
                self._watch_stop.clear()
                self._watcher = threading.Thread(target=self._watch, name="vllm-watch", daemon=True)
                self._watcher.start()

    def stop(self) -> None:
        """Terminate the server's process group (SIGTERM, then SIGKILL after ``stop_timeout``)."""
        self._watch_stop.set()
        with self._lock:
            self._stopped = True
            self._terminate()
        if self._watcher is not None and self._watcher is not threading.current_thread():
            self._watcher.join(timeout=5)
        self._watcher = None

    def __enter__(self) -> VllmManager:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def is_healthy(self, timeout: float = 2.0) -> bool:
        """Whether the process runs and ``GET /health`` answers 200."""
        if self._proc is None or self._proc.poll() is not None:
            return False
        try:
            return requests.get(f"{self.root_url}/health", timeout=timeout).status_code == 200
        except requests.RequestException:
            return False

    def ensure_running(self) -> None:
        """Restart a dead server once (reporting its log tail); raise if that budget is spent.

        Raises:
            VllmDiedError: the server died and may not be restarted again.
            VllmError: :meth:`start` was never called, or :meth:`stop` was.
        """
        with self._lock:
            if self._note_death():
                self._launch(self._model_path or "")
                if self._adapter is not None:
                    self._activate_adapter(*self._adapter)

    def _note_death(self) -> bool:
        """True if the server died (logged, restart budget charged); raise when it is spent."""
        if self._died is not None:
            raise self._died
        if self._proc is None or self._model_path is None:
            raise VllmError("the vLLM server was never started")
        if self._stopped:
            raise VllmError("the vLLM server was stopped")
        if self._proc.poll() is None:
            return False
        code = self._proc.returncode
        tail = read_tail(self._log_path) if self._log_path else ""
        if self._crash_restarts >= self.config.max_crash_restarts:
            self._died = VllmDiedError(
                f"vLLM exited with code {code} after {self._crash_restarts} automatic restart(s); "
                f"log {self._log_path}:\n{tail}"
            )
            raise self._died
        self._crash_restarts += 1
        logger.error("vLLM exited with code %s; restarting it. Log %s:\n%s", code, self._log_path, tail)
        return True

    # --- refresh -------------------------------------------------------------------------------
    def refresh(self, checkpoint_dir: str, step: int) -> float:
        """Make the server serve ``checkpoint_dir`` (a model, or an adapter in the LoRA modes).

        Returns:
            Seconds taken, from the call to the server serving the new weights.

        Raises:
            FileNotFoundError / CheckpointError: the checkpoint cannot be served.
            VllmError: the server could not be (re)started or refused the update.
        """
        start = time.perf_counter()
        with self._lock:
            mode = self.config.refresh_mode
            if mode in ("restart", "lora_restart"):
                self._note_death()  # a dead server is simply started on the new weights
            else:
                self.ensure_running()
            if mode == "restart":
                self._relaunch(str(validate_checkpoint_dir(checkpoint_dir)))
            elif mode == "reload":
                self._reload(checkpoint_dir)
            elif mode == "lora":
                self.load_lora(checkpoint_dir, f"step_{step}")
            else:  # lora_restart: a fresh server on the base model, then the adapter
                self._relaunch(self._base_model or checkpoint_dir)
                self.load_lora(checkpoint_dir, "training_adapter")
        return time.perf_counter() - start

    def load_lora(self, adapter_dir: str, name: str) -> float:
        """Hot-swap: load adapter ``adapter_dir`` as ``name`` and make it the active adapter.

        The adapter is registered through vLLM's ``/v1/load_lora_adapter`` (then addressable as
        ``model=name``), then ``/lora/load`` makes it the adapter that ``/generate`` and OpenAI
        requests naming the base model use. If the first route is unavailable, ``/lora/load``
        alone loads it. Returns the seconds taken.

        Raises:
            FileNotFoundError: ``adapter_dir`` does not exist.
            VllmError: the server refused the adapter (message says why).
        """
        path = Path(adapter_dir).expanduser().resolve()
        if not path.is_dir():
            raise FileNotFoundError(f"adapter directory not found: {adapter_dir}")
        start = time.perf_counter()
        with self._lock:
            self.ensure_running()
            self._activate_adapter(str(path), name)
            self._adapter = (str(path), name)
        return time.perf_counter() - start

    # --- internals -----------------------------------------------------------------------------
    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.config.api_key}"} if self.config.api_key else {}

    def _is_lora_mode(self) -> bool:
        return self.config.refresh_mode in ("lora", "lora_restart")

    def command(self, model_path: str) -> list[str]:
        """The server command line for ``model_path``."""
        cfg = self.config
        if cfg.backend == "hf":
            cmd = [
                sys.executable, "-m", "example_trainer.inference.hf_generation",
                "--model", model_path,
                "--served-model-name", self._served_name or model_path,
                "--host", cfg.vllm_host, "--port", str(self._port),
                "--max-model-len", str(cfg.max_model_len),
                "--torch-threads", str(cfg.inference_threads),
                "--device", cfg.hf_device,
            ]  # fmt: skip
            if cfg.hf_device.startswith("cuda") and cfg.dtype in ("bfloat16", "float16", "float32"):
                cmd += ["--dtype", cfg.dtype]
            if cfg.shared_weights:
                cmd.append("--shared-weights")
            if not has_tokenizer(model_path):
                cmd += ["--tokenizer", self._tokenizer_source(model_path)]
            if cfg.api_key:
                cmd += ["--api-key", cfg.api_key]
            return cmd
        on_gpu = cuda_available()
        dtype = cfg.dtype
        if not on_gpu and dtype in ("auto", "bfloat16", "float16"):
            dtype = "float32"  # vLLM-cpu: float32 keeps logprobs equal to the trainer's
        cmd = [
            sys.executable, "-m", "example_trainer.inference.vllm_api_server",
            "--model", model_path,
            "--served-model-name", self._served_name or model_path,
            "--host", cfg.vllm_host, "--port", str(self._port),
            "--dtype", dtype, "--max-model-len", str(cfg.max_model_len),
        ]  # fmt: skip
        if not has_tokenizer(model_path):
            cmd += ["--tokenizer", self._tokenizer_source(model_path)]
        if on_gpu and cfg.vllm_gpu_memory_utilization is not None:
            cmd += ["--gpu-memory-utilization", str(cfg.vllm_gpu_memory_utilization)]
        if self._is_lora_mode():
            cmd += ["--enable-lora", "--max-lora-rank", str(cfg.max_lora_rank)]
        if cfg.enforce_eager or cfg.shared_weights:
            cmd.append("--enforce-eager")  # compiled graphs may bake the weights in
        if cfg.shared_weights:
            cmd.append("--no-enable-prefix-caching")  # cached keys/values would outlive an optimizer step
        if cfg.api_key:
            cmd += ["--api-key", cfg.api_key]
        return cmd + list(cfg.extra_args)

    def _tokenizer_source(self, model_path: str) -> str:
        """Where a checkpoint without tokenizer files gets its tokenizer."""
        if self.config.tokenizer:
            return self.config.tokenizer
        if self._base_model and has_tokenizer(self._base_model):
            return self._base_model
        return self.config.model_name or self._base_model or model_path

    def _environment(self) -> dict[str, str]:
        env = dict(os.environ)
        env.setdefault("VLLM_CPU_KVCACHE_SPACE", f"{self.config.cpu_kvcache_space_gib:g}")
        env.setdefault("LOGDIR", str(Path(self.config.log_dir).resolve()))
        if self.config.vllm_gpu is not None:
            env["CUDA_VISIBLE_DEVICES"] = str(self.config.vllm_gpu)
        if self.config.shared_weights:
            env["ATROPOS_SHARED_WEIGHTS"] = "1"
        if self._is_lora_mode():
            env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
        return env

    @property
    def pid_file(self) -> ServerPidFile:
        """The record of this port's server (:mod:`example_trainer.inference.server_lifetime`), beside its logs."""
        return ServerPidFile(Path(self.config.log_dir) / f"inference_{self._port}.pid")

    def _claim_port(self) -> None:
        """Make sure the server's port is free: a first start refuses a held port, a restart moves to a free one."""
        cfg = self.config
        # A server left running by an earlier trainer on this port that was killed outright: stop it.
        if self.pid_file.stop_stale(cfg.stop_timeout) is not None:
            _wait_port_free(cfg.vllm_host, self._port, timeout=10.0)
        if not port_in_use(cfg.vllm_host, self._port):
            return
        if self._launches == 0:
            raise VllmStartError(
                f"port {self._port} on {cfg.vllm_host} is already in use by another process; "
                "stop it or choose another --vllm-port"
            )
        held, self._port = self._port, free_port(cfg.vllm_host)
        logger.warning(
            "port %d is still held by another process; starting the inference server on port %d "
            "(written to %s for environments that follow it)", held, self._port, self.servers_file,
        )  # fmt: skip

    def _launch(self, model_path: str) -> None:
        cfg = self.config
        self._claim_port()
        self._log_path = Path(cfg.log_dir) / f"vllm_{self._launches}.log"
        cmd = self.command(model_path)
        logger.info("starting vLLM on %s (log %s)", model_path, self._log_path)
        # The server gets SIGTERM if the trainer dies without stopping it (server_lifetime).
        self._proc = start_service(bound_to_parent(cmd), self._log_path, env=self._environment(), shown=cmd)
        self.pid_file.record(self._proc.pid, cfg.vllm_host, self._port)
        self._launches += 1
        self._model_path = model_path
        self._serving = False
        self._wait_healthy()
        self._serving = True
        write_servers_file(self.servers_file, [self.base_url])

    def _wait_healthy(self) -> None:
        assert self._proc is not None
        try:
            wait_until_ok(
                self._proc,
                f"{self.root_url}/health",
                name="vLLM",
                timeout=self.config.startup_timeout,
                interval=0.5,
                on_failure=self._terminate,
            )
        except ServiceNotReady as exc:
            if exc.returncode is None:
                problem = f"vLLM did not become healthy within {self.config.startup_timeout:.0f} s"
            else:
                problem = f"vLLM exited with code {exc.returncode} while starting"
            raise VllmStartError(f"{problem}; log {self._log_path}:\n{read_tail(self._log_path)}") from None

    def _terminate(self) -> None:
        proc = self._proc
        if proc is None or proc.poll() is not None:
            return
        self._stopping = True
        try:
            if stop_process(proc, self.config.stop_timeout, process_group=True) == -signal.SIGKILL:
                logger.warning("vLLM did not exit %.0f s after SIGTERM; killed it", self.config.stop_timeout)
            # Engine workers run in the same process group; make sure none outlive the server.
            signal_group(proc.pid, signal.SIGKILL)
            self.pid_file.clear(proc.pid)
        finally:
            self._stopping = False

    def _relaunch(self, model_path: str) -> None:
        self._terminate()
        self._adapter = None
        self._launch(model_path)

    def _reload(self, checkpoint_dir: str) -> None:
        path = validate_checkpoint_dir(checkpoint_dir)
        try:
            request_weight_update(
                self.root_url, path, timeout=self.config.request_timeout, api_key=self.config.api_key
            )
        except WeightUpdateUnsupported:
            logger.warning("the server has no in-place weight update; restarting it on %s instead", path)
            self._relaunch(str(path))
            return
        except WeightUpdateError as exc:
            raise VllmError(f"{exc} (log {self._log_path})") from exc
        except requests.RequestException as exc:
            # A server that died while loading is restarted on the new weights (its one restart).
            time.sleep(1.0)
            if self._proc is not None and self._proc.poll() is not None:
                self._model_path = str(path)
                self.ensure_running()
                return
            raise VllmError(f"weight update request failed: {exc} (log {self._log_path})") from exc
        self._model_path = str(path)

    def _activate_adapter(self, path: str, name: str) -> None:
        timeout = self.config.request_timeout
        try:
            resp = requests.post(
                f"{self.root_url}/v1/load_lora_adapter",
                json={"lora_name": name, "lora_path": path, "load_inplace": True},
                headers=self._headers(),
                timeout=timeout,
            )
            if resp.status_code != 200:
                logger.info("/v1/load_lora_adapter answered %s; loading through /lora/load", resp.status_code)
            resp = requests.post(
                f"{self.root_url}/lora/load",
                json={"adapter_path": path, "adapter_name": name},
                headers=self._headers(),
                timeout=timeout,
            )
        except requests.RequestException as exc:
            raise VllmError(f"could not reach vLLM to load adapter {path}: {exc}") from exc
        if resp.status_code != 200:
            raise VllmError(f"vLLM refused adapter {path} (HTTP {resp.status_code}): {resp.text[:500]}")

    def _watch(self) -> None:
        interval = self.config.watch_interval or 2.0
        while not self._watch_stop.wait(interval):
            proc = self._proc
            if proc is None or proc.poll() is None or self._stopping or self._died is not None:
                continue
            if not self._serving:
                continue  # a failed start was already reported to the caller of start/refresh
            if not self._lock.acquire(timeout=interval):
                continue  # a refresh/start is in progress; it checks liveness itself
            try:
                if self._watch_stop.is_set() or self._stopping:
                    return
                self.ensure_running()
            except VllmError as exc:
                logger.error("%s", exc)
            finally:
                self._lock.release()


def main(argv: Sequence[str] | None = None) -> None:  # pragma: no cover - convenience entry point
    """``python -m example_trainer.inference.vllm_manager MODEL``: start a managed server until Ctrl-C."""
    import argparse

    parser = argparse.ArgumentParser(description="Run the trainer's vLLM server under the manager.")
    parser.add_argument("model")
    parser.add_argument("--vllm-port", type=int, default=9001)
    parser.add_argument("--log-dir", default="./logs")
    args = parser.parse_args(argv)
    manager = VllmManager(VllmManagerConfig(vllm_port=args.vllm_port, log_dir=args.log_dir))
    try:
        manager.start(args.model)
        print(f"serving {args.model} at {manager.base_url} (log {manager.log_path})", flush=True)
        while True:
            time.sleep(1)
            manager.ensure_running()
    except KeyboardInterrupt:
        pass
    finally:
        manager.stop()


if __name__ == "__main__":  # pragma: no cover
    main()
