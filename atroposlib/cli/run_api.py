"""``run-api``: serve the trajectory API (``python -m atroposlib.cli.run_api`` works too).

Every :class:`~atroposlib.api.config.ApiConfig` field is a flag (``--max-queue-sequences``) and
a key of the ``--config`` YAML file; flags win over the file. Bad flags or values print one
line and exit with status 2; a port already in use or an unusable data directory exits with
status 1, before anything is written to disk.
"""

from __future__ import annotations

import argparse
import errno
import os
import socket
import sys
from pathlib import Path
from typing import Any, NoReturn

from pydantic import ValidationError

from atroposlib.api.config import API_KEY_ENV, CONFIG_ENV, ApiConfig

PROG = "run-api"


class _OneLineParser(argparse.ArgumentParser):
    """Reports usage errors on a single line (``run-api: error: ...``), exit status 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: error: {message}\n")


def build_parser() -> argparse.ArgumentParser:
    fields = ApiConfig.model_fields
    parser = _OneLineParser(prog=PROG, description="Serve the Atropos trajectory API.")
    add = parser.add_argument
    sup = argparse.SUPPRESS

    def doc(name: str) -> str:
        default = fields[name].get_default(call_default_factory=True)
        return f"{fields[name].description} (default: {default})"

    add("--config", type=Path, default=None, help="YAML file with ApiConfig fields.")
    add("--host", type=str, default=sup, help=doc("host"))
    add("--port", type=int, default=sup, help=doc("port"))
    add("--reload", action="store_true", default=sup, help=fields["reload"].description)
    add("--data-dir", dest="data_dir", type=Path, default=sup, help=doc("data_dir"))
    add("--store", choices=["sqlite", "memory"], default=sup, help=doc("store"))
    add("--sqlite-synchronous", dest="sqlite_synchronous", choices=["normal", "full"], default=sup,
        help=doc("sqlite_synchronous"))  # fmt: skip
    add("--api-key", dest="api_key", type=str, default=sup,
        help=f"{fields['api_key'].description} (default: ${API_KEY_ENV})")  # fmt: skip
    add("--allow-unauthenticated", dest="allow_unauthenticated", action="store_true", default=sup,
        help=fields["allow_unauthenticated"].description)  # fmt: skip
    for name in (
        "max_body_bytes",
        "max_inflated_bytes",
        "max_queue_sequences",
        "max_queue_bytes",
        "retry_after_seconds",
        "max_unacked_batches",
        "inspect_history",
    ):
        add("--" + name.replace("_", "-"), dest=name, type=int, default=sup, help=doc(name))
    add("--env-heartbeat-seconds", dest="env_heartbeat_seconds", type=float, default=sup,
        help=doc("env_heartbeat_seconds"))  # fmt: skip
    add("--log-level", dest="log_level", choices=["debug", "info", "warning", "error"], default=sup,
        help=doc("log_level"))  # fmt: skip
    add("--log-format", dest="log_format", choices=["text", "json"], default=sup, help=doc("log_format"))
    add(
        "--access-log",
        dest="access_log",
        action="store_true",
        default=sup,
        help=fields["access_log"].description,
    )
    return parser


def _fail(message: str, code: int = 2) -> NoReturn:
    sys.stderr.write(f"{PROG}: error: {message}\n")
    raise SystemExit(code)


def _load_yaml(path: Path) -> dict[str, Any]:
    import yaml

    try:
        data = yaml.safe_load(path.read_text())
    except OSError as exc:
        _fail(f"cannot read --config {path}: {exc.strerror or exc}")
    except yaml.YAMLError as exc:
        _fail(f"--config {path} is not valid YAML: {str(exc).splitlines()[0]}")
    if data is None:
        return {}
    if not isinstance(data, dict):
        _fail(f"--config {path} must be a mapping of ApiConfig fields")
    return data


def config_from_args(argv: list[str] | None = None) -> ApiConfig:
    """Parse ``argv`` (and ``--config``, ``$ATROPOS_API_KEY``) into a validated config."""
    args = vars(build_parser().parse_args(argv))
    path = args.pop("config")
    values: dict[str, Any] = _load_yaml(path) if path else {}
    values.update(args)
    if not values.get("api_key") and os.environ.get(API_KEY_ENV):
        values["api_key"] = os.environ[API_KEY_ENV]
    try:
        return ApiConfig(**values)
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first["loc"]) or "config"
        _fail(
            f"invalid {where.replace('_', '-') if where in ApiConfig.model_fields else where}: {first['msg']}"
        )
    except TypeError as exc:
        _fail(str(exc))


def bind_listening_socket(host: str, port: int) -> socket.socket:
    """A socket bound to ``host:port`` (as uvicorn binds it), for the server to listen on.

    Raises:
        SystemExit: status 1 with one line naming the port when another process holds it or the
            address cannot be bound.
    """
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    sock = socket.socket(family, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        if exc.errno == errno.EADDRINUSE:
            _fail(
                f"port {port} on {host} is already in use by another process; choose another with --port", 1
            )
        _fail(f"cannot listen on {host}:{port}: {exc.strerror or exc}", 1)
    sock.set_inheritable(True)
    return sock


def main(argv: list[str] | None = None) -> None:
    """Entry point of ``run-api``."""
    config = config_from_args(argv)
    problem = config.bind_problem()
    if problem:
        _fail(problem)
    # The port is taken before the store is opened, so a busy port leaves nothing on disk.
    sock = bind_listening_socket(config.host, config.port)

    import uvicorn

    from atroposlib.api.logs import setup_logging
    from atroposlib.api.store import StoreError

    setup_logging(config.log_level, config.log_format)
    common = dict(
        host=config.host,
        port=config.port,
        log_config=None,
        log_level=config.log_level,
        access_log=config.access_log,
        timeout_graceful_shutdown=10,
    )
    if config.reload:
        # The reloading supervisor binds the port itself, in its own process.
        sock.close()
        # The reloading supervisor imports the app in a fresh process: hand the config over.
        os.environ[CONFIG_ENV] = config.to_env_json()
        package_dir = Path(__file__).resolve().parents[1]
        uvicorn.run("atroposlib.api.server:app", reload=True, reload_dirs=[str(package_dir)], **common)
        return

    from atroposlib.api.server import create_app, open_store

    try:
        store = open_store(config)
    except StoreError as exc:
        sock.close()
        _fail(str(exc), code=1)
    uvicorn.Server(uvicorn.Config(create_app(config, store), **common)).run(sockets=[sock])


if __name__ == "__main__":
    main()
