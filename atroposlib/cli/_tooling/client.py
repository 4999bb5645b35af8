"""A small, read-mostly HTTP client for the trajectory API, used by the tools.

Every request has a timeout and sends ``Authorization: Bearer <key>`` when a key is configured
(``--api-key`` or the ``ATROPOS_API_KEY`` environment variable). Failures become :class:`ToolError`
with a message that says what to do, never a raw ``requests`` traceback.

Only :meth:`ApiClient.reset`, :meth:`ApiClient.register`, :meth:`ApiClient.get_batch` and
:meth:`ApiClient.ack_batch` change server state; the tools call them only behind explicit flags.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

import orjson
import requests

from atroposlib.cli._tooling.errors import ToolError

DEFAULT_API_URL = "http://localhost:8000"
API_KEY_ENV = "ATROPOS_API_KEY"


class EndpointMissing(ToolError):
    """The server answered 404 for an endpoint (e.g. an atroposlib 0.4.0 API without ``/inspect``)."""


class Unreachable(ToolError):
    """No answer from the server (connection refused, DNS failure, timeout)."""


class AuthRejected(ToolError):
    """The server refused the request with 401/403 (missing or wrong API key)."""


class TrainerNotRegistered(ToolError):
    """``GET /batch`` answered that no trainer has registered (nothing to consume)."""


def add_api_key_argument(parser: argparse.ArgumentParser) -> None:
    """``--api-key``: the bearer token, read through :func:`resolve_api_key`."""
    parser.add_argument("--api-key", default=None, help=f"bearer token for the API (default: ${API_KEY_ENV})")


def add_register_size_arguments(parser: argparse.ArgumentParser) -> None:
    """``--group-size`` and ``--max-token-len``: what a tool's ``--register`` sends to
    :meth:`ApiClient.register` (the batch size is derived from the group size)."""
    parser.add_argument(
        "--group-size", type=int, default=2, help="only used for the batch size sent by --register"
    )
    parser.add_argument("--max-token-len", type=int, default=2048, help="only used by --register")


def resolve_api_key(flag_value: str | None) -> str | None:
    """The key to send: the flag if given, else ``$ATROPOS_API_KEY``, else None (no header)."""
    key = flag_value if flag_value is not None else os.environ.get(API_KEY_ENV)
    return key or None


class ApiClient:
    """Synchronous client for one trajectory API.

    ``connect_timeout`` / ``read_timeout`` are seconds and apply to every request.
    """

    def __init__(
        self,
        base_url: str = DEFAULT_API_URL,
        api_key: str | None = None,
        *,
        connect_timeout: float = 5.0,
        read_timeout: float = 30.0,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.api_key = api_key
        self.timeout = (connect_timeout, read_timeout)
        self._session = requests.Session()
        if api_key:
            self._session.headers["Authorization"] = f"Bearer {api_key}"

    def close(self) -> None:
        self._session.close()

    def __enter__(self) -> ApiClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # -- transport ---------------------------------------------------------------------------
    def _request(self, method: str, path: str, **kwargs: Any) -> requests.Response:
        url = f"{self.base_url}{path}"
        try:
            resp = self._session.request(method, url, timeout=self.timeout, **kwargs)
        except requests.Timeout:
            raise Unreachable(
                f"the trajectory API at {self.base_url} did not answer {method} {path} "
                f"within {self.timeout[1]:g} s"
            )
        except requests.ConnectionError as exc:
            reason = _short_reason(exc)
            raise Unreachable(
                f"cannot reach the trajectory API at {self.base_url} ({reason}); "
                "is run-api running there? (see --api-url)"
            )
        except requests.RequestException as exc:
            raise ToolError(f"{method} {url} failed: {_short_reason(exc)}")
        if resp.status_code in (401, 403):
            raise AuthRejected(
                f"the trajectory API at {self.base_url} refused {method} {path} "
                f"(HTTP {resp.status_code}): pass --api-key or set {API_KEY_ENV}"
            )
        if resp.status_code == 404:
            raise EndpointMissing(f"the trajectory API at {self.base_url} has no {method} {path} (HTTP 404)")
        if resp.status_code >= 400:
            body = resp.text.strip().replace("\n", " ")[:200]
            raise ToolError(f"{method} {path} answered HTTP {resp.status_code}: {body}")
        return resp

    def _json(self, method: str, path: str, **kwargs: Any) -> Any:
        resp = self._request(method, path, **kwargs)
        try:
            return orjson.loads(resp.content)
        except orjson.JSONDecodeError:
            raise ToolError(f"{method} {path} did not return JSON: {resp.text[:120]!r}")

    # -- read-only ---------------------------------------------------------------------------
    def info(self) -> dict[str, Any]:
        """``GET /info``: ``{"batch_size", "max_token_len"}`` (-1 before a trainer registers)."""
        return self._json("GET", "/info")

    def status(self) -> dict[str, Any]:
        """``GET /status``: ``{"current_step", "queue_size"}``."""
        return self._json("GET", "/status")

    def wandb_info(self) -> dict[str, Any]:
        """``GET /wandb_info``: ``{"group", "project"}`` (nulls before a trainer registers)."""
        return self._json("GET", "/wandb_info")

    def inspect_recent(self, limit: int, env_id: int | None = None) -> dict[str, Any]:
        """``GET /inspect/recent``: recently received groups, newest first (read-only).

        Raises :class:`EndpointMissing` on servers without the inspection endpoints.
        """
        params: dict[str, Any] = {"limit": int(limit)}
        if env_id is not None:
            params["env_id"] = int(env_id)
        data = self._json("GET", "/inspect/recent", params=params)
        if not isinstance(data, dict) or not isinstance(data.get("groups"), list):
            raise ToolError("GET /inspect/recent returned an unexpected body (no 'groups' list)")
        return data

    def inspect_envs(self) -> list[dict[str, Any]]:
        """``GET /inspect/envs``: the registered environments (read-only)."""
        data = self._json("GET", "/inspect/envs")
        envs = data.get("envs") if isinstance(data, dict) else None
        return envs if isinstance(envs, list) else []

    def latest_example(self) -> dict[str, Any]:
        """``GET /latest_example``: the last group that entered the queue (read-only)."""
        return self._json("GET", "/latest_example")

    # -- state-changing (only behind explicit flags) -----------------------------------------
    def reset(self) -> str:
        """``GET /reset_data``: wipes the run's queue and registration. Only for ``--reset``."""
        return self._request("GET", "/reset_data").text

    def register(
        self,
        *,
        batch_size: int,
        max_token_len: int,
        num_steps: int,
        wandb_group: str = "test",
        wandb_project: str = "test",
        checkpoint_dir: str = "checkpoints",
        save_checkpoint_interval: int = 10,
        starting_step: int = 0,
    ) -> dict[str, Any]:
        """``POST /register`` as a trainer would, with these sizes. Only for ``--register``."""
        payload = {
            "wandb_group": wandb_group,
            "wandb_project": wandb_project,
            "batch_size": int(batch_size),
            "max_token_len": int(max_token_len),
            "checkpoint_dir": checkpoint_dir,
            "save_checkpoint_interval": int(save_checkpoint_interval),
            "starting_step": int(starting_step),
            "num_steps": int(num_steps),
        }
        return self._json("POST", "/register", json=payload)

    def get_batch(self) -> tuple[list[dict[str, Any]] | None, int | None]:
        """``GET /batch``: take the next batch (this consumes it). Only for ``--consume``.

        Returns ``(groups, batch_id)``; ``groups`` is None when no batch is ready. ``batch_id`` is None
        on servers that do not number batches. Raises ToolError when no trainer is registered.
        """
        data = self._json("GET", "/batch")
        if not isinstance(data, dict):
            raise ToolError("GET /batch returned an unexpected body")
        if data.get("status") == "error":
            raise TrainerNotRegistered(
                f"GET /batch: {data.get('message', 'error')} "
                "(start the trainer first, or pass --register to register in its place)"
            )
        batch = data.get("batch")
        batch_id = data.get("batch_id")
        return (batch if batch else None), (int(batch_id) if batch_id is not None else None)

    def ack_batch(self, batch_id: int) -> bool:
        """``POST /batch/ack``: mark a consumed batch as handled. False if the server has no such id."""
        try:
            self._json("POST", "/batch/ack", json={"batch_id": int(batch_id)})
        except EndpointMissing:
            return False
        return True


def _short_reason(exc: BaseException) -> str:
    """The innermost, human-readable cause of a requests exception (e.g. 'Connection refused')."""
    text = str(exc)
    for marker in ("Connection refused", "Name or service not known", "timed out", "No route to host"):
        if marker in text:
            return marker
    return text.splitlines()[0][:160] if text else type(exc).__name__
