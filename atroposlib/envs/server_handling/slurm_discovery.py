"""Find the inference servers of a SLURM allocation (see SLURM.md).

Layout (as in atroposlib 0.4.0): the allocation's nodes, in ``scontrol show hostnames`` order, are
training nodes first (``$NUM_TRAINING_NODES`` of them), then inference nodes. Each inference node
runs ``$GPUS_PER_NODE // $INFER_TP`` servers on ports 9000, 9001, ... (``$INFER_TP`` = tensor-parallel
size, default 1; ``$GPUS_PER_NODE`` default 8). A single-node allocation has no separate inference
nodes (``None`` is returned and the caller falls back to its local defaults). The sbatch scripts of
``scripts/slurm/`` start the servers by the same rules (``atroposlib.cli.slurm_roles``).
"""

from __future__ import annotations

import os
import shutil
import subprocess
from collections.abc import Callable, Mapping
from typing import Optional

GPUS_PER_NODE = 8
FIRST_PORT = 9000
LOCAL_DEFAULT_URLS = [f"http://localhost:{port}/v1" for port in range(9004, 9008)]


class SlurmDiscoveryError(RuntimeError):
    """The SLURM environment does not describe a usable layout (the message says what to set)."""


def scontrol_hostnames(nodelist: str) -> list[str]:
    """Expand a SLURM node list (``node[01-03]``) with ``scontrol show hostnames``."""
    if shutil.which("scontrol") is None:
        raise SlurmDiscoveryError(
            "scontrol is not on PATH; server discovery on SLURM needs the SLURM client tools"
        )
    try:
        out = subprocess.run(
            ["scontrol", "show", "hostnames", nodelist],
            capture_output=True,
            text=True,
            check=True,
            timeout=30,
        )
    except subprocess.CalledProcessError as exc:
        raise SlurmDiscoveryError(
            f"scontrol show hostnames {nodelist!r} failed ({exc.returncode}): {exc.stderr.strip()}"
        ) from exc
    except subprocess.TimeoutExpired as exc:
        raise SlurmDiscoveryError("scontrol show hostnames timed out") from exc
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


def _int_env(environ: Mapping[str, str], name: str, default: Optional[int] = None, minimum: int = 0) -> int:
    raw = environ.get(name)
    if raw is None or raw == "":
        if default is None:
            raise SlurmDiscoveryError(f"${name} is not set; it is required for SLURM server discovery")
        return default
    try:
        value = int(raw)
    except ValueError:
        raise SlurmDiscoveryError(f"${name} must be an integer, got {raw!r}") from None
    if value < minimum:
        raise SlurmDiscoveryError(f"${name} must be >= {minimum}, got {value}")
    return value


def gpus_per_node(environ: Optional[Mapping[str, str]] = None) -> int:
    """``$GPUS_PER_NODE`` (default 8): the GPUs of each inference node."""
    env = os.environ if environ is None else environ
    return _int_env(env, "GPUS_PER_NODE", default=GPUS_PER_NODE, minimum=1)


def infer_tp(environ: Optional[Mapping[str, str]] = None, gpus: int = GPUS_PER_NODE) -> int:
    """``$INFER_TP`` (default 1), checked against the node's ``gpus``."""
    env = os.environ if environ is None else environ
    tp = _int_env(env, "INFER_TP", default=1, minimum=1)
    if tp > gpus:
        raise SlurmDiscoveryError(f"$INFER_TP={tp} exceeds the {gpus} GPUs of a node")
    return tp


def node_server_urls(nodes: list[str], tp: int, gpus: int = GPUS_PER_NODE) -> list[str]:
    """``http://<node>:<9000+i>/v1`` for ``i < gpus // tp`` on every node, node by node."""
    return [f"http://{node}:{FIRST_PORT + i}/v1" for node in nodes for i in range(gpus // tp)]


def slurm_inference_urls(
    environ: Optional[Mapping[str, str]] = None,
    hostnames: Callable[[str], list[str]] = scontrol_hostnames,
) -> Optional[list[str]]:
    """Base URLs (``http://node:port/v1``) of the allocation's inference servers.

    Returns None for a single-node allocation. Raises :class:`SlurmDiscoveryError` when
    ``$SLURM_JOB_NODELIST`` is missing, ``$NUM_TRAINING_NODES`` is missing or leaves no inference
    node, or ``$INFER_TP`` is not an integer in 1..``$GPUS_PER_NODE``.
    """
    env = os.environ if environ is None else environ
    nodes = _allocation_nodes(env, hostnames)
    if len(nodes) < 2:
        return None
    training = _int_env(env, "NUM_TRAINING_NODES")
    if training >= len(nodes):
        raise SlurmDiscoveryError(
            f"$NUM_TRAINING_NODES={training} leaves no inference node in a {len(nodes)}-node allocation"
        )
    gpus = gpus_per_node(env)
    return node_server_urls(nodes[training:], infer_tp(env, gpus), gpus)


def trailing_nodes_inference_urls(
    count: int,
    environ: Optional[Mapping[str, str]] = None,
    hostnames: Callable[[str], list[str]] = scontrol_hostnames,
) -> list[str]:
    """Base URLs of the servers on the last ``count`` nodes of the allocation (the trainer's
    ``--num-inference-nodes``). Raises :class:`SlurmDiscoveryError` as :func:`slurm_inference_urls`
    does, or when the allocation has ``count`` nodes or fewer (the trainer needs one of its own)."""
    env = os.environ if environ is None else environ
    nodes = _allocation_nodes(env, hostnames)
    if count >= len(nodes):
        raise SlurmDiscoveryError(
            f"{count} inference node(s) leave no training node in a {len(nodes)}-node allocation"
        )
    gpus = gpus_per_node(env)
    return node_server_urls(nodes[len(nodes) - count :], infer_tp(env, gpus), gpus)


def _allocation_nodes(env: Mapping[str, str], hostnames: Callable[[str], list[str]]) -> list[str]:
    nodelist = env.get("SLURM_JOB_NODELIST")
    if not nodelist:
        raise SlurmDiscoveryError(
            "slurm is enabled but $SLURM_JOB_NODELIST is not set; run inside a SLURM job or pass --slurm false"
        )
    return hostnames(nodelist)
