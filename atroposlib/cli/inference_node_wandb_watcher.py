"""``inference-node-wandb-watcher``: log the health of one node's inference servers to W&B.

Runs on every inference node of a multi-node job. It waits until the trainer has registered with
the trajectory API (``GET /wandb_info`` has a project), joins that W&B project/group as run
``inf_node_<node_num>``, and then, every ``--interval`` seconds, probes
``http://<health-host>:<base-port + i>/health_generate`` for the node's ``8 // tp`` servers and
logs ``server/server_health_<node_num>_<i>`` (1.0 healthy, 0.0 not) at each new trainer step.

Every request has a timeout; an unreachable API is retried, not fatal. W&B runs offline when no
API key is configured. SIGTERM/SIGINT finish the W&B run and exit 0.
"""

from __future__ import annotations

import argparse
import netrc
import os
import threading
from collections.abc import Sequence
from typing import Any

import requests

from atroposlib.cli._tooling.client import ApiClient, AuthRejected, add_api_key_argument, resolve_api_key
from atroposlib.cli._tooling.errors import ToolError, run_cli
from atroposlib.cli._tooling.signals import stop_on_signals

PROG = "inference-node-wandb-watcher"
SERVERS_PER_NODE = 8  # GPUs per node; the node runs 8 // tp inference servers


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=PROG, description="Log inference-server health of one node to W&B")
    parser.add_argument(
        "--api_addr", required=True, help="trajectory API address, e.g. http://trainer-node:8000"
    )
    parser.add_argument("--tp", type=int, required=True, help="tensor parallel size of each inference server")
    parser.add_argument("--node_num", type=int, required=True, help="index of this inference node")
    parser.add_argument(
        "--base-port", type=int, default=9000, help="port of the node's first inference server"
    )
    parser.add_argument("--health-host", default="localhost", help="host the inference servers listen on")
    parser.add_argument("--interval", type=float, default=60.0, help="seconds between health checks")
    parser.add_argument(
        "--timeout", type=float, default=10.0, help="timeout of every HTTP request, in seconds"
    )
    add_api_key_argument(parser)
    return parser


def health_keys(node_num: int, tp: int) -> list[str]:
    """The W&B metric names for one node: ``server/server_health_<node>_<i>`` for i < 8 // tp."""
    return [f"server/server_health_{node_num}_{i}" for i in range(SERVERS_PER_NODE // tp)]


def probe(url: str, timeout: float) -> float:
    """1.0 if ``GET url`` answers 200 within ``timeout`` seconds, else 0.0."""
    try:
        return 1.0 if requests.get(url, timeout=timeout).status_code == 200 else 0.0
    except requests.RequestException:
        return 0.0


def wandb_has_key() -> bool:
    """Whether W&B credentials are configured (``$WANDB_API_KEY`` or a netrc entry)."""
    if os.environ.get("WANDB_API_KEY"):
        return True
    try:
        auth = netrc.netrc().authenticators("api.wandb.ai")
    except (FileNotFoundError, netrc.NetrcParseError, OSError):
        return False
    return bool(auth and auth[2])


def _wait_for_trainer(client: ApiClient, stop: threading.Event) -> dict[str, Any] | None:
    """Poll ``/wandb_info`` until the trainer registered a project; None if stopped first."""
    announced = False
    while not stop.is_set():
        try:
            info = client.wandb_info()
            if info.get("project") is not None:
                return info
        except AuthRejected:
            raise
        except ToolError:
            pass  # API not up yet: keep waiting
        if not announced:  # no API, or no trainer registered yet
            print("Waiting for init...", flush=True)
            announced = True
        stop.wait(1.0)
    return None


def watch(args: argparse.Namespace, stop: threading.Event) -> int:
    if args.tp < 1:
        raise ToolError("--tp must be >= 1")
    if args.interval <= 0 or args.timeout <= 0:
        raise ToolError("--interval and --timeout must be > 0")
    client = ApiClient(args.api_addr, resolve_api_key(args.api_key), read_timeout=args.timeout)
    info = _wait_for_trainer(client, stop)
    if info is None:
        return 0
    if not wandb_has_key() and not os.environ.get("WANDB_MODE"):
        os.environ["WANDB_MODE"] = "offline"
        print(
            f"{PROG}: no W&B API key configured: logging offline (sync later with `wandb sync`)", flush=True
        )
    import wandb

    try:
        run = wandb.init(project=info["project"], group=info.get("group"), name=f"inf_node_{args.node_num}")
    except Exception as exc:  # noqa: BLE001 - wandb raises many types; the user needs the reason
        raise ToolError(f"wandb.init failed: {exc}")
    keys = health_keys(args.node_num, args.tp)
    health = dict.fromkeys(keys, 0.0)
    last_step = -1
    try:
        while not stop.is_set():
            try:
                step = int(client.status().get("current_step", 0))
            except ToolError as exc:
                print(f"{PROG}: warning: {exc}", flush=True)
                step = last_step
            if step > last_step:
                run.log(dict(health), step=step)
                last_step = step
                print(f"step {step}: " + " ".join(f"{k}={v:g}" for k, v in health.items()), flush=True)
            if stop.wait(args.interval):
                break
            for i, key in enumerate(keys):
                health[key] = probe(
                    f"http://{args.health_host}:{args.base_port + i}/health_generate", args.timeout
                )
    finally:
        run.finish()
        client.close()
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)

    def body() -> int:
        with stop_on_signals(announce=PROG) as stop:
            return watch(args, stop)

    return run_cli(PROG, body)


if __name__ == "__main__":
    raise SystemExit(main())
