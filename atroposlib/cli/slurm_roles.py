"""Node roles of a SLURM allocation, for the sbatch scripts in ``scripts/slurm/`` (see SLURM.md).

``python -m atroposlib.cli.slurm_roles <command>``; the layout comes from the same variables as the
environments' ``--slurm`` discovery (:mod:`atroposlib.envs.server_handling.slurm_discovery`), so the
servers the scripts start are the servers the environments and the trainer look for:

* the allocation's nodes in ``scontrol show hostnames $SLURM_JOB_NODELIST`` order; the first
  ``$NUM_TRAINING_NODES`` train, the rest serve inference; the first node (the *head*) also runs the
  trajectory API (``$API_PORT``, 8000) and the environment workers;
* each inference node runs ``$GPUS_PER_NODE // $INFER_TP`` servers on ports 9000, 9001, ..., server ``i``
  on GPUs ``i*INFER_TP .. (i+1)*INFER_TP - 1``;
* a one-node allocation shares its node: the trainer takes the first ``$TRAINER_GPUS`` GPUs (default
  half), the inference servers the rest.

Commands (each prints to stdout; errors are one line on stderr and exit status 2):

The first server's port is ``$INFER_PORT`` (default 9000, what the environments' discovery expects).

* ``plan``: the layout as a table (the job log); ``plan --json`` as JSON.
* ``get NAME``: one value for a script: ``head``, ``api-url``, ``nnodes``, ``training-nodes``,
  ``inference-nodes`` (comma lists for ``srun --nodelist``), ``num-training-nodes``,
  ``num-inference-nodes``, ``trainer-gpus`` (for ``CUDA_VISIBLE_DEVICES``), ``trainer-procs-per-node``,
  ``server-urls`` (space separated), ``node-num`` (this node's index among the inference nodes).
* ``serve-inference --backend vllm|scripted --model M [-- extra server flags]``: start this node's inference
  servers (one process each, ``CUDA_VISIBLE_DEVICES`` set, one log file each under ``--log-dir``), pass
  SIGTERM/SIGINT on to them, and wait; if one server exits, stop the others and exit with its status.
* ``env-servers --model M``: the inference-server arguments for an environment worker, one per line:
  ``--slurm true`` with ``--openai.*`` template flags where the environments' own discovery finds every
  server (several nodes), otherwise ``--config FILE`` naming a YAML list of every server. With
  ``$INFERENCE_URLS`` (space/comma separated) or ``$INFERENCE_JOB_ID`` (a running inference-only job,
  all of whose nodes serve) the servers of another job are used.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, NoReturn, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from atroposlib.envs.server_handling.slurm_discovery import (
    FIRST_PORT,
    GPUS_PER_NODE,
    SlurmDiscoveryError,
    scontrol_hostnames,
)

PROG = "slurm_roles"


class LayoutError(ValueError):
    """The variables describe a layout that cannot run (the message names the variable)."""


class SlurmLayoutConfig(BaseModel):
    """The layout variables; each field is read from the upper-case environment variable of its name."""

    model_config = ConfigDict(extra="forbid")

    num_training_nodes: int = Field(
        1, ge=0, description="nodes running the trainer (the first ones); 0: an inference-only job"
    )
    infer_tp: int = Field(1, ge=1, description="tensor-parallel size of each inference server")
    gpus_per_node: int = Field(GPUS_PER_NODE, ge=1, description="GPUs of each node")
    trainer_gpus: Optional[int] = Field(
        None, ge=1, description="one-node allocations: GPUs of the node for the trainer (default half)"
    )
    trainer_procs_per_node: Optional[int] = Field(
        None, ge=1, description="trainer processes per training node (default: one per trainer GPU)"
    )
    api_port: int = Field(8000, ge=1, le=65535, description="port of the trajectory API on the head node")
    infer_port: int = Field(
        FIRST_PORT,
        ge=1,
        le=65535,
        description="port of each node's first inference server (the environments' --slurm discovery and "
        "the watcher expect 9000)",
    )

    @classmethod
    def from_environ(cls, environ: Optional[Mapping[str, str]] = None) -> SlurmLayoutConfig:
        """Read ``NUM_TRAINING_NODES``, ``INFER_TP``, ``GPUS_PER_NODE``, ``TRAINER_GPUS``,
        ``TRAINER_PROCS_PER_NODE``, ``API_PORT`` and ``INFER_PORT`` (unset or empty: the default).

        Raises :class:`LayoutError` naming the variable for a value that is not a valid integer.
        """
        env = os.environ if environ is None else environ
        values = {
            name: env[name.upper()] for name in cls.model_fields if env.get(name.upper()) not in (None, "")
        }
        try:
            return cls(**values)
        except ValidationError as exc:
            err = exc.errors()[0]
            name = str(err["loc"][0]).upper() if err.get("loc") else "layout"
            raise LayoutError(f"${name}={err.get('input')!r}: {err['msg']}") from None


@dataclass(frozen=True)
class InferenceServer:
    """One inference server: where it listens and which GPUs it uses."""

    node: str
    port: int
    gpus: tuple[int, ...]

    @property
    def url(self) -> str:
        """Its OpenAI-compatible base URL."""
        return f"http://{self.node}:{self.port}/v1"


@dataclass(frozen=True)
class Layout:
    """What runs where in one allocation."""

    nodes: list[str]
    training_nodes: list[str]
    inference_nodes: list[str]
    servers: list[InferenceServer]
    trainer_gpus: tuple[int, ...]  #: GPU indices of the trainer on each training node
    trainer_procs_per_node: int
    api_port: int
    infer_tp: int
    notes: list[str] = field(default_factory=list)

    @property
    def head(self) -> str:
        return self.nodes[0]

    @property
    def api_url(self) -> str:
        return f"http://{self.head}:{self.api_port}"

    def servers_on(self, node: str) -> list[InferenceServer]:
        return [s for s in self.servers if s.node == node]

    def node_num(self, node: str) -> int:
        """Index of ``node`` among the inference nodes (the watcher's ``--node_num``)."""
        try:
            return self.inference_nodes.index(node)
        except ValueError:
            raise LayoutError(f"{node} is not an inference node of this allocation") from None

    def describe(self) -> str:
        lines = [f"nodes ({len(self.nodes)}): {' '.join(self.nodes)}"]
        if self.training_nodes:
            lines += [
                f"head: {self.head} (trajectory API {self.api_url}, environment workers)",
                f"training nodes: {' '.join(self.training_nodes)} "
                f"({self.trainer_procs_per_node} process(es) per node, GPUs {_csv(self.trainer_gpus)})",
            ]
        lines += [
            f"inference nodes: {' '.join(self.inference_nodes)} "
            f"({len(self.servers)} server(s), tensor parallel {self.infer_tp})",
        ]
        lines += [f"  {s.url}  GPUs {_csv(s.gpus)}" for s in self.servers]
        return "\n".join(lines + self.notes)


def _csv(values: Sequence[Any]) -> str:
    return ",".join(str(v) for v in values)


def plan(nodes: Sequence[str], config: SlurmLayoutConfig) -> Layout:
    """The layout of an allocation of ``nodes`` (in ``scontrol show hostnames`` order).

    ``NUM_TRAINING_NODES=0`` describes an inference-only job: every node serves with all its GPUs.

    Raises :class:`LayoutError` when no node is left for inference, ``INFER_TP`` exceeds the GPUs
    available to inference, or ``TRAINER_GPUS`` leaves none.
    """
    nodes = list(nodes)
    if not nodes:
        raise LayoutError("the allocation has no nodes")
    gpus, tp = config.gpus_per_node, config.infer_tp
    notes: list[str] = []
    if config.num_training_nodes == 0 or len(nodes) > 1:
        n_train = config.num_training_nodes
        if n_train >= len(nodes):
            raise LayoutError(
                f"$NUM_TRAINING_NODES={n_train} leaves no inference node in a {len(nodes)}-node allocation"
            )
        if tp > gpus:
            raise LayoutError(f"$INFER_TP={tp} exceeds the {gpus} GPUs of a node ($GPUS_PER_NODE)")
        training, inference = nodes[:n_train], nodes[n_train:]
        servers = [
            InferenceServer(node, config.infer_port + i, tuple(range(i * tp, (i + 1) * tp)))
            for node in inference
            for i in range(gpus // tp)
        ]
        trainer: tuple[int, ...] = tuple(range(gpus)) if training else ()
        if config.trainer_gpus is not None:
            notes.append("note: TRAINER_GPUS only applies to one-node jobs (training nodes use every GPU)")
    else:
        trainer_gpus = config.trainer_gpus or max(1, gpus // 2)
        if trainer_gpus >= gpus:
            raise LayoutError(
                f"$TRAINER_GPUS={trainer_gpus} leaves no GPU for inference on a one-node allocation "
                f"of {gpus} GPU(s) ($GPUS_PER_NODE)"
            )
        free = gpus - trainer_gpus
        if tp > free:
            raise LayoutError(f"$INFER_TP={tp} exceeds the {free} GPU(s) left for inference on the one node")
        first = trainer_gpus
        servers = [
            InferenceServer(
                nodes[0], config.infer_port + i, tuple(range(first + i * tp, first + (i + 1) * tp))
            )
            for i in range(free // tp)
        ]
        training, inference, trainer = nodes, nodes, tuple(range(trainer_gpus))
        if config.num_training_nodes != 1:
            notes.append("note: one-node allocation; NUM_TRAINING_NODES is ignored")
    procs = config.trainer_procs_per_node or max(1, len(trainer))
    return Layout(
        nodes=nodes,
        training_nodes=list(training),
        inference_nodes=list(inference),
        servers=servers,
        trainer_gpus=trainer,
        trainer_procs_per_node=procs,
        api_port=config.api_port,
        infer_tp=tp,
        notes=notes,
    )


def current_layout(environ: Optional[Mapping[str, str]] = None, hostnames=scontrol_hostnames) -> Layout:
    """The layout of the job this process runs in (``$SLURM_JOB_NODELIST`` and the layout variables)."""
    env = os.environ if environ is None else environ
    nodelist = env.get("SLURM_JOB_NODELIST")
    if not nodelist:
        raise LayoutError("$SLURM_JOB_NODELIST is not set: run inside a SLURM job (sbatch/salloc)")
    return plan(hostnames(nodelist), SlurmLayoutConfig.from_environ(env))


def this_node(environ: Optional[Mapping[str, str]] = None) -> str:
    """The node this process runs on (``$SLURMD_NODENAME``, else the short host name)."""
    env = os.environ if environ is None else environ
    return env.get("SLURMD_NODENAME") or socket.gethostname().split(".")[0]


# --- values for the scripts --------------------------------------------------------------------------

_GETTERS = {
    "head": lambda lay, env: lay.head,
    "api-url": lambda lay, env: lay.api_url,
    "nnodes": lambda lay, env: str(len(lay.nodes)),
    "training-nodes": lambda lay, env: ",".join(lay.training_nodes),
    "inference-nodes": lambda lay, env: ",".join(lay.inference_nodes),
    "num-training-nodes": lambda lay, env: str(len(lay.training_nodes)),
    "num-inference-nodes": lambda lay, env: str(len(lay.inference_nodes)),
    "trainer-gpus": lambda lay, env: _csv(lay.trainer_gpus),
    "trainer-procs-per-node": lambda lay, env: str(lay.trainer_procs_per_node),
    "server-urls": lambda lay, env: " ".join(s.url for s in lay.servers),
    "node-num": lambda lay, env: str(lay.node_num(this_node(env))),
}


# --- inference servers on this node -------------------------------------------------------------------


def server_command(
    backend: str, model: str, server: InferenceServer, tp: int, extra: Sequence[str] = ()
) -> list[str]:
    """The command line of one inference server (``vllm``: ``example_trainer.inference.vllm_api_server``, which
    serves OpenAI routes, ``/generate`` and in-place weight refresh; ``scripted``: the scripted test server)."""
    if backend == "vllm":
        cmd = [sys.executable, "-m", "example_trainer.inference.vllm_api_server", "--model", model]
        cmd += ["--host", "0.0.0.0", "--port", str(server.port), "--tensor-parallel-size", str(tp)]
    elif backend == "scripted":
        cmd = [sys.executable, "-m", "atroposlib.testing.scripted_server", "--host", "0.0.0.0"]
        cmd += ["--port", str(server.port), "--tokenizer", model, "--model-name", model]
    else:
        raise LayoutError(f"unknown inference backend {backend!r} (expected vllm or scripted)")
    return cmd + list(extra)


def serve_inference(
    layout: Layout,
    node: str,
    backend: str,
    model: str,
    log_dir: Path,
    extra: Sequence[str] = (),
    poll_s: float = 0.5,
) -> int:
    """Run ``node``'s inference servers until SIGTERM/SIGINT (then stop them and return 0) or until one
    exits (then stop the others and return its status, 1 if it was 0)."""
    servers = layout.servers_on(node)
    if not servers:
        print(f"{PROG}: {node} runs no inference server in this layout", file=sys.stderr)
        return 0
    log_dir.mkdir(parents=True, exist_ok=True)
    stopping = {"signal": None}

    def on_signal(signum: int, frame: Any) -> None:
        stopping["signal"] = signum

    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, on_signal)
    procs: list[tuple[InferenceServer, subprocess.Popen]] = []
    for server in servers:
        env = {**os.environ, "CUDA_VISIBLE_DEVICES": _csv(server.gpus)}
        log_path = log_dir / f"inference_{node}_{server.port}.log"
        cmd = server_command(backend, model, server, layout.infer_tp, extra)
        with open(log_path, "ab") as log:
            procs.append((server, subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT)))
        print(f"{PROG}: {server.url} on GPUs {_csv(server.gpus)}: pid {procs[-1][1].pid}, log {log_path}")
        print(f"{PROG}:   {shlex.join(cmd)}", flush=True)
    status = 0
    while stopping["signal"] is None:
        dead = [(s, p) for s, p in procs if p.poll() is not None]
        if dead:
            server, proc = dead[0]
            status = proc.returncode or 1
            print(f"{PROG}: {server.url} exited with status {proc.returncode}; stopping", flush=True)
            break
        time.sleep(poll_s)
    for _, proc in procs:
        if proc.poll() is None:
            proc.send_signal(signal.SIGTERM)
    deadline = time.monotonic() + 60
    for _, proc in procs:
        try:
            proc.wait(timeout=max(0.1, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
    return status


# --- the environments' server arguments ---------------------------------------------------------------


def job_nodes(job_id: str, hostnames=scontrol_hostnames) -> list[str]:
    """The nodes of job ``job_id`` (``scontrol show job``); raises :class:`LayoutError` if it is unknown
    or not running."""
    try:
        out = subprocess.run(
            ["scontrol", "show", "job", "-o", str(job_id)], capture_output=True, text=True, timeout=30
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        raise LayoutError(f"scontrol show job {job_id} failed: {exc}") from None
    fields = dict(part.split("=", 1) for part in out.stdout.split() if "=" in part)
    if out.returncode != 0 or "NodeList" not in fields:
        raise LayoutError(
            f"$INFERENCE_JOB_ID={job_id}: no such job ({out.stderr.strip() or out.stdout.strip()})"
        )
    if fields.get("JobState") != "RUNNING" or fields["NodeList"] in ("", "(null)"):
        raise LayoutError(f"$INFERENCE_JOB_ID={job_id} is {fields.get('JobState', 'unknown')}, not RUNNING")
    return hostnames(fields["NodeList"])


def external_server_urls(
    environ: Optional[Mapping[str, str]] = None, hostnames=scontrol_hostnames
) -> Optional[list[str]]:
    """Servers of another job: ``$INFERENCE_URLS``, or every server of ``$INFERENCE_JOB_ID``'s nodes
    (``$GPUS_PER_NODE // $INFER_TP`` per node); None when neither is set."""
    env = os.environ if environ is None else environ
    urls = env.get("INFERENCE_URLS", "").replace(",", " ").split()
    if urls:
        bad = [u for u in urls if not u.startswith(("http://", "https://"))]
        if bad:
            raise LayoutError(f"$INFERENCE_URLS: {bad[0]!r} does not start with http:// or https://")
        return urls
    job_id = env.get("INFERENCE_JOB_ID")
    if not job_id:
        return None
    nodes = job_nodes(job_id, hostnames)
    config = SlurmLayoutConfig.from_environ(env)
    if config.infer_tp > config.gpus_per_node:
        raise LayoutError(f"$INFER_TP={config.infer_tp} exceeds the {config.gpus_per_node} GPUs of a node")
    return [
        f"http://{node}:{config.infer_port + i}/v1"
        for node in nodes
        for i in range(config.gpus_per_node // config.infer_tp)
    ]


def env_server_args(
    layout: Optional[Layout],
    urls: Optional[list[str]],
    model: str,
    server_type: str,
    config_path: Path,
) -> list[str]:
    """Arguments that give an environment worker its inference servers.

    ``urls`` (another job's servers) or a one-node ``layout`` -> a YAML list of every server in
    ``config_path`` (``--config``; a single server is given with ``--openai.*`` flags instead);
    a several-node ``layout`` on the standard ports -> ``--slurm true`` with ``--openai.*`` template flags,
    so the environment's own discovery finds the servers.
    """
    template = {"model_name": model, "server_type": server_type, "api_key": "x"}
    if urls is None:
        if layout is None:
            raise LayoutError(
                "no inference servers: run inside a job or set $INFERENCE_URLS / $INFERENCE_JOB_ID"
            )
        if len(layout.nodes) > 1 and layout.servers[0].port == FIRST_PORT:
            return ["--slurm", "true", *_openai_flags({**template, "base_url": layout.servers[0].url})]
        urls = [s.url for s in layout.servers]
    if len(urls) == 1:
        return ["--slurm", "false", *_openai_flags({**template, "base_url": urls[0]})]
    import yaml

    config_path.parent.mkdir(parents=True, exist_ok=True)
    config_path.write_text(yaml.safe_dump({"openai": [{**template, "base_url": u} for u in urls]}))
    return ["--slurm", "false", "--config", str(config_path)]


def _openai_flags(values: Mapping[str, str]) -> list[str]:
    return [part for key, value in values.items() for part in (f"--openai.{key}", value)]


# --- command line -------------------------------------------------------------------------------------


def _fail(message: str) -> NoReturn:
    print(f"{PROG}: error: {message}", file=sys.stderr)
    raise SystemExit(2)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog=f"python -m atroposlib.cli.{PROG}",
        description="Node roles of a SLURM allocation (scripts/slurm/, SLURM.md).",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plan", help="print the layout")
    p.add_argument("--json", action="store_true", help="as JSON")
    p = sub.add_parser("get", help="print one value of the layout")
    p.add_argument("name", choices=sorted(_GETTERS))
    p = sub.add_parser("serve-inference", help="run this node's inference servers")
    p.add_argument("--backend", choices=["vllm", "scripted"], default="vllm")
    p.add_argument("--model", required=True, help="model directory or hub id (tokenizer for scripted)")
    p.add_argument("--log-dir", type=Path, default=Path("logs"), help="one log file per server here")
    p.add_argument("extra", nargs=argparse.REMAINDER, help="-- then flags passed to every server")
    p = sub.add_parser("env-servers", help="an environment worker's inference-server arguments")
    p.add_argument("--model", required=True, help="model name the servers serve")
    p.add_argument("--server-type", default="vllm", help="the environments' server_type (default vllm)")
    p.add_argument(
        "--config-out", type=Path, default=Path("env_servers.yaml"), help="where a server list is written"
    )
    return parser


def main(argv: Optional[list[str]] = None) -> int:
    args = build_parser().parse_args(argv)
    try:
        if args.command == "env-servers":
            urls = external_server_urls()
            layout = current_layout() if urls is None else None
            for arg in env_server_args(layout, urls, args.model, args.server_type, args.config_out):
                print(arg)
            return 0
        layout = current_layout()
        if args.command == "plan":
            print(json.dumps(asdict(layout), indent=1) if args.json else layout.describe())
        elif args.command == "get":
            print(_GETTERS[args.name](layout, os.environ))
        elif args.command == "serve-inference":
            extra = args.extra[1:] if args.extra[:1] == ["--"] else args.extra
            return serve_inference(layout, this_node(), args.backend, args.model, args.log_dir, extra)
    except (LayoutError, SlurmDiscoveryError) as exc:
        _fail(str(exc))
    return 0


if __name__ == "__main__":
    sys.exit(main())
