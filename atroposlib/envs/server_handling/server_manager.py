"""``ServerManager``: the environment's view of its inference fleet (``BaseEnv.server``).

It owns one :class:`APIServer` per inference server and routes each request to a healthy server
with the most free capacity relative to its size (so a server configured for twice the concurrency
takes twice the load; ties rotate). ``n`` larger than ``max_n_completions`` is split into parallel
requests whose choices are merged and renumbered. ``split="eval"`` requests use the evaluation
semaphores end to end. Waiting for capacity is event driven (no polling); while no server is
healthy, requests wait at most the servers' ``timeout`` (or :attr:`ServerManager.unavailable_grace`
seconds after the last server stopped answering, when set: ``process`` and ``evaluate`` set it) and
then fail with :class:`ServerUnavailableError`. Each server logs the wait when it starts and every
``unhealthy_report_interval`` seconds.

Config handling:

* a list of ``APIServerConfig`` -> one server each (each with the backend class of its own
  ``server_type``); with ``slurm=True`` the first config is cloned for every SLURM inference server;
* a single ``APIServerConfig`` -> used as given, or with ``slurm=True`` cloned like a list's first config
  (atroposlib 0.4.0 replaced it by localhost defaults);
* a plain ``ServerBaseline`` -> discovery: SLURM inference nodes when ``$SLURM_JOB_NODELIST`` is
  set, else ``http://localhost:9004..9007/v1``;
* a config with ``servers_file`` (``--openai.servers_file``) -> one server per base URL the file lists, each
  with that config's other settings; the file is followed while the environment runs (see
  :mod:`~atroposlib.envs.server_handling.servers_file`): servers that left it are retired (requests waiting
  for them go to the listed ones) and new ones are added. It takes precedence over SLURM discovery;
* ``testing=True`` -> one in-process :class:`ServerHarness`.

Proxy mode (``managed_server`` through the ManagedServer HTTP proxy) is used only when asked for:
``use_proxy=True``, a ``proxy_url`` argument, or ``$ATROPOS_USE_PROXY=1``; ``$ATROPOS_PROXY_URL``
alone only supplies the URL.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import inspect
import logging
import math
import os
import warnings
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any, Optional, Union

from openai.types.chat.chat_completion import ChatCompletion
from openai.types.completion import Completion
from pydantic import BaseModel, Field

from atroposlib.envs.server_handling.errors import ServerUnavailableError, describe_failure
from atroposlib.envs.server_handling.managed_server import DummyManagedServer, ManagedServer
from atroposlib.envs.server_handling.message_tokens import MessageTokenizedServer
from atroposlib.envs.server_handling.openai_compat import merge_choices
from atroposlib.envs.server_handling.openai_server import OpenAIServer
from atroposlib.envs.server_handling.server_baseline import (  # noqa: F401  (re-exported)
    APIServer,
    APIServerConfig,
    ReasoningConfig,
    ServerBaseline,
)
from atroposlib.envs.server_handling.server_harness import ServerHarness
from atroposlib.envs.server_handling.servers_file import ServersFile
from atroposlib.envs.server_handling.sglang_server import SGLangServer
from atroposlib.envs.server_handling.slurm_discovery import LOCAL_DEFAULT_URLS, slurm_inference_urls
from atroposlib.envs.server_handling.trl_vllm_server import TrlVllmServer
from atroposlib.envs.server_handling.vllm_server import VLLMServer

logger = logging.getLogger(__name__)

#: Backend class per ``server_type``.
SERVER_CLASSES: dict[str, type] = {
    "openai": OpenAIServer,
    "trl": TrlVllmServer,
    "sglang": SGLangServer,
    "vllm": VLLMServer,
}

_TRUTHY = {"1", "true", "yes", "on"}


class ServerManagerConfig(BaseModel):
    """Settings of the server manager (un-prefixed CLI flags)."""

    slurm: bool = Field(
        default=False, description="Whether the environment runs on SLURM (server discovery)."
    )
    testing: bool = Field(
        default=False, description="Use the in-process fake inference backend (ServerHarness)."
    )
    max_n_completions: int = Field(
        default=8,
        ge=1,
        description="Largest n sent in one request; larger n is split into parallel requests.",
    )
    proxy_url: Optional[str] = Field(
        default=None,
        description="URL of the ManagedServer OpenAI proxy; when set, managed_server() goes through it.",
    )
    tool_parser: Optional[str] = Field(
        default=None, description="vLLM tool parser name enabling tools= in ManagedServer chat completions."
    )


def _sem_free(sem: Any) -> float:
    if hasattr(sem, "available"):
        return float(sem.available())
    return float(getattr(sem, "_value", 0))


def _sem_limit(sem: Any) -> float:
    if hasattr(sem, "limit"):
        return float(sem.limit) or 1.0
    return float(getattr(sem, "max_val", 1) or 1)


class ServerManager:
    """Routes requests across inference servers. See the module docstring for the config rules."""

    def __init__(
        self,
        configs: Union[ServerBaseline, APIServerConfig, list[APIServerConfig]],
        server_class: type = APIServer,
        slurm: bool = False,
        testing: bool = False,
        max_n_completions: int = 8,
        reasoning_config: Optional[ReasoningConfig] = None,
        proxy_url: Optional[str] = None,
        use_proxy: bool = False,
        tool_parser: Optional[str] = None,
    ):
        self.max_n_completions = max(1, int(max_n_completions))
        self.reasoning_config = reasoning_config
        self.proxy_url = proxy_url or os.environ.get("ATROPOS_PROXY_URL")
        self.use_proxy = bool(
            use_proxy or proxy_url or os.environ.get("ATROPOS_USE_PROXY", "").strip().lower() in _TRUTHY
        )
        self.tool_parser = tool_parser
        #: ``managed_server()`` on an OpenAI-type server computes tokens from the messages (set by
        #: ``process`` and ``evaluate``; ``serve`` needs the server's own token ids).
        self.tokens_from_messages = False
        self._next = 0
        self._unavailable_grace: Optional[float] = None
        self._watched: set[int] = set()
        self._waiters: dict[bool, collections.deque] = {True: collections.deque(), False: collections.deque()}
        #: the followed servers file (``servers_file`` of the config), the config its servers are made from,
        #: the task that follows it, the servers that left it, and the last weight (given to new servers)
        self._servers_file: Optional[ServersFile] = None
        self._file_template: Optional[APIServerConfig] = None
        self._follow_task: Optional[asyncio.Task] = None
        self._retired: list[APIServer] = []
        self._weight: Optional[float] = None
        self._server_class = server_class
        #: seconds between two looks at the servers file
        self.servers_file_poll_interval = 1.0
        if testing:
            self.servers: list[APIServer] = [
                ServerHarness(config=self._harness_config(configs), reasoning_config=reasoning_config)
            ]
            return
        template = self._servers_file_template(configs)
        if template is not None:
            self._servers_file = ServersFile(template.servers_file)
            self._file_template = template
            configs, slurm = self._file_configs(self._servers_file.urls), False
        self.servers = [self._build_server(cfg, server_class) for cfg in self._expand_configs(configs, slurm)]

    # -- construction -------------------------------------------------------------------------------
    @staticmethod
    def _harness_config(configs: Any) -> APIServerConfig:
        first = configs[0] if isinstance(configs, (list, tuple)) and configs else configs
        values = first.model_dump() if isinstance(first, BaseModel) else {}
        values.update({"health_check": False})
        values.setdefault("model_name", "test_model")
        return APIServerConfig(**values)

    @staticmethod
    def _expand_configs(configs: Any, slurm: bool) -> list[APIServerConfig]:
        if isinstance(configs, APIServerConfig):
            configs = [configs]
        elif isinstance(configs, ServerBaseline):
            urls = slurm_inference_urls() if os.environ.get("SLURM_JOB_NODELIST") else None
            if urls is None:
                urls = list(LOCAL_DEFAULT_URLS)
            base = configs.model_dump()
            return [APIServerConfig(**{**base, "base_url": url, "api_key": "x"}) for url in urls]
        if isinstance(configs, dict):
            configs = [configs]
        if not isinstance(configs, (list, tuple)) or not configs:
            raise ValueError(
                "ServerManager needs an APIServerConfig, a non-empty list of them, or a ServerBaseline; "
                f"got {configs!r}"
            )
        resolved: list[APIServerConfig] = []
        for i, cfg in enumerate(configs):
            if isinstance(cfg, APIServerConfig):
                resolved.append(cfg)
            elif isinstance(cfg, BaseModel):
                resolved.append(APIServerConfig(**cfg.model_dump()))
            elif isinstance(cfg, dict):
                resolved.append(APIServerConfig(**cfg))
            else:
                raise TypeError(f"server config #{i} must be an APIServerConfig, got {type(cfg).__name__}")
        if slurm:
            urls = slurm_inference_urls()
            if urls is None:
                logger.info(
                    "Single-node SLURM allocation: using the %d configured server(s) as given", len(resolved)
                )
                return resolved
            template = resolved[0]
            return [template.model_copy(update={"base_url": url}, deep=True) for url in urls]
        return resolved

    @staticmethod
    def _servers_file_template(configs: Any) -> Optional[APIServerConfig]:
        """The config naming a servers file, or None; ValueError when a list of several configs names one."""
        items = list(configs) if isinstance(configs, (list, tuple)) else [configs]

        def named(cfg: Any) -> Optional[str]:
            return cfg.get("servers_file") if isinstance(cfg, dict) else getattr(cfg, "servers_file", None)

        if not any(named(cfg) for cfg in items):
            return None
        if len(items) > 1:
            raise ValueError(
                f"servers_file is set in a list of {len(items)} server configs; give one config with "
                "servers_file (its other settings apply to every server the file lists)"
            )
        cfg = items[0]
        if isinstance(cfg, APIServerConfig):
            return cfg
        return APIServerConfig(**(cfg.model_dump() if isinstance(cfg, BaseModel) else cfg))

    def _file_configs(self, urls: list[str]) -> list[APIServerConfig]:
        assert self._file_template is not None
        return [self._file_template.model_copy(update={"base_url": url}, deep=True) for url in urls]

    def _build_server(self, config: APIServerConfig, server_class: type) -> APIServer:
        cls = server_class
        if inspect.isabstract(server_class):
            cls = SERVER_CLASSES.get(config.server_type)
            if cls is None:
                raise ValueError(
                    f"Invalid server type: {config.server_type!r} (expected one of {sorted(SERVER_CLASSES)})"
                )
        return cls(config, reasoning_config=self.reasoning_config)

    # -- following the servers file --------------------------------------------------------------------
    @property
    def servers_file(self) -> Optional[Path]:
        """The servers file this manager follows (``servers_file`` of its config), or None."""
        return self._servers_file.path if self._servers_file is not None else None

    def follow_servers_file(self, force: bool = False) -> bool:
        """Apply a change of the servers file; True when the list of servers changed.

        Servers still listed are kept as they are; new ones are added (with this manager's weight and
        ``unavailable_grace``); those no longer listed are retired (:meth:`APIServer.retire`: requests waiting
        for them are sent to the listed servers). ``force`` reads the file even when its modification time
        and size are unchanged. Without a servers file, nothing happens.
        """
        if self._servers_file is None:
            return False
        urls = self._servers_file.poll(force=force)
        if urls is None:
            return False
        remaining: dict[str, list[APIServer]] = {}
        for server in self.servers:
            remaining.setdefault(server.config.base_url.rstrip("/"), []).append(server)
        servers: list[APIServer] = []
        for cfg in self._file_configs(urls):
            kept = remaining.get(cfg.base_url.rstrip("/"))
            server = kept.pop(0) if kept else None
            if server is None:
                server = self._build_server(cfg, self._server_class)
                server.unavailable_grace = self._unavailable_grace
                if self._weight is not None:
                    server.sem.update_weight(self._weight)
                    server.eval_sem.update_weight(self._weight)
            servers.append(server)
        self.servers, self._next = servers, 0
        gone = [server for group in remaining.values() for server in group]
        for server in gone:
            server.retire()
        self._retired.extend(gone)
        logger.warning(
            "inference servers in %s are now %s (retired: %s)",
            self._servers_file.path,
            ", ".join(urls),
            ", ".join(s.config.base_url for s in gone) or "none",
        )
        self._watch_servers()
        self._on_capacity_change()
        return True

    def _ensure_following(self) -> None:
        """Start following the servers file in this event loop (once; again after a loop change)."""
        if self._servers_file is None:
            return
        loop = asyncio.get_running_loop()
        task = self._follow_task
        if task is None or task.done() or task.get_loop() is not loop:
            self._follow_task = loop.create_task(self._follow_loop())

    async def _follow_loop(self) -> None:
        # A changed file is seen within a poll interval; while some server is not answering the file is read
        # every time, since a rewrite within the file system's timestamp resolution leaves the stamp as is.
        while True:
            await asyncio.sleep(self.servers_file_poll_interval)
            try:
                self.follow_servers_file(force=not all(s.server_healthy for s in self.servers))
            except Exception:  # following must never stop; the file's problems are logged by ServersFile
                logger.exception("could not apply the servers file %s", self.servers_file)

    # -- capacity and routing -------------------------------------------------------------------------
    @staticmethod
    def _free_slots(server: APIServer, is_training: bool) -> float:
        if is_training:
            # Evaluation requests occupy the same server, so they count against training capacity.
            eval_in_use = getattr(server.eval_sem, "in_use", 0)
            return max(0.0, _sem_free(server.sem) - eval_in_use)
        return _sem_free(server.eval_sem)

    def _select(self, is_training: bool) -> Optional[APIServer]:
        """The healthy server with the largest free share of its capacity (ties rotate), or None."""
        count = len(self.servers)
        best_index, best_score = None, -math.inf
        for k in range(count):
            index = (self._next + k) % count
            server = self.servers[index]
            if not server.server_healthy:
                continue
            free = self._free_slots(server, is_training)
            if free <= 0:
                continue
            score = free / _sem_limit(server.sem if is_training else server.eval_sem)
            if score > best_score:
                best_index, best_score = index, score
        if best_index is None:
            return None
        self._next = (best_index + 1) % count
        return self.servers[best_index]

    def _watch_servers(self) -> None:
        """Subscribe to slot releases, weight and health changes of every (possibly new) server."""
        for server in self.servers:
            if id(server) not in self._watched:
                server.add_listener(self._on_capacity_change)
                self._watched.add(id(server))

    def _on_capacity_change(self) -> None:
        """Wake as many queued requests (oldest first) as there are free slots on healthy servers."""
        for is_training, queue in self._waiters.items():
            if not queue:
                continue
            budget = sum(self._free_slots(s, is_training) for s in self.servers if s.server_healthy)
            while queue and budget >= 1:
                fut = queue.popleft()
                if not fut.done():
                    fut.set_result(None)
                    budget -= 1

    async def _wait_for_server(self, is_training: bool) -> APIServer:
        """A server with a free slot for the split, waiting (FIFO, event driven) when all are busy."""
        self._ensure_following()
        server = self._select(is_training)
        if server is not None:
            return server
        self._watch_servers()
        loop = asyncio.get_running_loop()
        queue = self._waiters[is_training]
        started = loop.time()
        while True:
            fut = loop.create_future()
            queue.append(fut)
            try:
                # Look again after queueing, so a release from here on wakes us.
                server = self._select(is_training)
                if server is not None:
                    return server
                timeout = 30.0  # only a safety net; releases and health changes wake us
                if not any(s.server_healthy for s in self.servers):
                    for s in self.servers:
                        if hasattr(s, "_ensure_started"):
                            s._ensure_started(False)
                    if self._unavailable_grace is not None:
                        remaining = self._unavailable_grace - (self._down_for() or 0.0)
                    else:
                        limit = max(float(getattr(s.config, "timeout", 1200)) for s in self.servers)
                        remaining = limit - (loop.time() - started)
                    if remaining <= 0:
                        raise ServerUnavailableError(self.unavailable_message())
                    timeout = min(timeout, remaining)
                else:
                    started = loop.time()
                await asyncio.wait({fut}, timeout=timeout)
            except BaseException:
                if fut.done() and not fut.cancelled():
                    self._on_capacity_change()  # pass our wake-up on to the next request
                raise
            finally:
                if not fut.done():
                    fut.cancel()
                    try:
                        queue.remove(fut)
                    except ValueError:
                        pass

    @property
    def unavailable_grace(self) -> Optional[float]:
        """Seconds requests wait once every server has stopped answering; None = the servers' ``timeout``.

        Setting it applies it to every server (requests already waiting on one server included).
        """
        return self._unavailable_grace

    @unavailable_grace.setter
    def unavailable_grace(self, seconds: Optional[float]) -> None:
        self._unavailable_grace = None if seconds is None else max(0.0, float(seconds))
        for server in self.servers:
            server.unavailable_grace = self._unavailable_grace

    def _down_for(self) -> Optional[float]:
        """Seconds since the last server stopped answering, or None while some server is healthy."""
        if not self.servers or any(s.server_healthy for s in self.servers):
            return None
        return min(s.unhealthy_for() if hasattr(s, "unhealthy_for") else 0.0 for s in self.servers)

    def unavailable_message(self) -> str:
        """One line naming every server that is not answering, for how long and why, and what to check."""
        parts = []
        for s in self.servers:
            if s.server_healthy:
                continue
            reason = getattr(s, "last_failure", None) or "health check failed"
            since = s.unhealthy_for() if hasattr(s, "unhealthy_for") else 0.0
            parts.append(f"{s._describe()} for {since:.0f} s ({reason})")
        where = (
            f"listed in {self.servers_file} (--openai.servers_file)"
            if self._servers_file is not None
            else "at its base_url (--openai.base_url)"
        )
        return (
            "no inference server is answering: "
            + "; ".join(parts)
            + f". Check that it is running and reachable {where}."
        )

    def unavailable_error(self) -> Optional[ServerUnavailableError]:
        """The error to stop with when :attr:`unavailable_grace` is set and no server has answered for
        that long; None otherwise."""
        down = self._down_for()
        if self._unavailable_grace is None or down is None or down < self._unavailable_grace:
            return None
        return ServerUnavailableError(self.unavailable_message())

    async def wait_for_sem(self, is_training: bool) -> None:
        """Wait until some healthy server has a free training (or evaluation) slot.

        Event driven: wakes on every slot release, weight change and health change. Raises
        :class:`ServerUnavailableError` if no server is healthy for longer than the servers' timeout.
        """
        await self._wait_for_server(is_training)

    async def update_weight(self, weight: float) -> None:
        """Set this environment's share on every server (and on servers added later from the servers file)."""
        self._weight = weight
        for server in self.servers:
            await server.update_weight(weight)

    def _get_server_base_url(self, server_idx: int = 0) -> Optional[str]:
        if not self.servers:
            return None
        return getattr(getattr(self.servers[server_idx], "config", None), "base_url", None)

    # -- requests ------------------------------------------------------------------------------------
    async def _route(self, method: str, kwargs: dict[str, Any]) -> Any:
        """Send one request to a server with a free slot. A request whose server is retired meanwhile (it left
        the servers file) is sent again to a server listed now."""
        is_training = kwargs.get("split", "train") == "train"
        while True:
            server = await self._wait_for_server(is_training)
            try:
                return await getattr(server, method)(**kwargs)
            except Exception as exc:
                if not getattr(server, "retired", False):
                    raise
                logger.info(
                    "%s left the servers file while a request waited for it (%s); sending it to a listed server",
                    server._describe(),
                    describe_failure(exc),
                )

    def _chunks(self, n: int) -> list[int]:
        sizes = [self.max_n_completions] * (n // self.max_n_completions)
        if n % self.max_n_completions:
            sizes.append(n % self.max_n_completions)
        return sizes

    async def chat_completion(self, **kwargs) -> ChatCompletion:
        """Route a chat completion (``n`` above ``max_n_completions`` is split; ``split`` honoured)."""
        n = int(kwargs.get("n") or 1)
        if n > self.max_n_completions:
            parts = await asyncio.gather(
                *[self.chat_completion(**{**kwargs, "n": c}) for c in self._chunks(n)]
            )
            return merge_choices(list(parts))
        return await self._route("chat_completion", kwargs)

    async def completion(self, **kwargs) -> Completion:
        """Route a text completion (``n`` splitting and ``split`` as for :meth:`chat_completion`)."""
        n = int(kwargs.get("n") or 1)
        if n > self.max_n_completions:
            parts = await asyncio.gather(*[self.completion(**{**kwargs, "n": c}) for c in self._chunks(n)])
            return merge_choices(list(parts))
        return await self._route("completion", kwargs)

    async def tokens_and_logprobs_completion(self, **kwargs) -> tuple[list, list, list, list]:
        """Route a token-level completion; split results are concatenated (prompt tokens of the first)."""
        n = int(kwargs.get("n") or 1)
        if n > self.max_n_completions:
            parts = await asyncio.gather(
                *[self.tokens_and_logprobs_completion(**{**kwargs, "n": c}) for c in self._chunks(n)]
            )
            outputs, logprobs, finishes = [], [], []
            for _, out, lps, fin in parts:
                outputs.extend(out)
                logprobs.extend(lps)
                finishes.extend(fin)
            return parts[0][0], outputs, logprobs, finishes
        return await self._route("tokens_and_logprobs_completion", kwargs)

    async def get_logprobs(self, **kwargs) -> dict[str, Any]:
        """Route a prompt-logprob request (see :meth:`APIServer.get_logprobs`)."""
        return await self._route("get_logprobs", kwargs)

    async def wandb_metrics(self, metrics_dict: Optional[dict] = None) -> dict:
        """Every server's request metrics, named ``server/server_{i}_...``."""
        metrics_dict = {} if metrics_dict is None else metrics_dict
        for i, server in enumerate(self.servers):
            await server.wandb_metrics(metrics_dict, f"server_{i}")
        return metrics_dict

    async def close(self) -> None:
        """Stop following the servers file, stop health checks and close connections of every server."""
        task, self._follow_task = self._follow_task, None
        if task is not None and not task.done():
            task.cancel()
            if task.get_loop() is asyncio.get_running_loop():
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
        retired, self._retired = self._retired, []
        for server in [*self.servers, *retired]:
            await server.close()

    # -- contexts ------------------------------------------------------------------------------------
    @asynccontextmanager
    async def dedicated_server(self) -> AsyncIterator[APIServer]:
        """Pick one server and hold one of its training slots for the block (prefix-cache affinity).

        Calls made on the yielded server take their own slots as usual.
        """
        server = await self._wait_for_server(True)
        async with server.sem:
            yield server

    def _server_by_url(self, base_url: str) -> APIServer:
        wanted = base_url.rstrip("/")
        for server in self.servers:
            url = getattr(getattr(server, "config", None), "base_url", None)
            if url and url.rstrip("/") == wanted:
                return server
        available = [getattr(s.config, "base_url", None) for s in self.servers]
        raise ValueError(f"no server with base_url {base_url!r}; configured: {available}")

    @asynccontextmanager
    async def managed_server(
        self,
        tokenizer: Any = None,
        base_url: Optional[str] = None,
        preserve_think_blocks: bool = False,
    ) -> AsyncIterator[Any]:
        """A :class:`ManagedServer` on one server for the block; its state is cleared on exit.

        ``base_url`` pins the session to that server. With an OpenAI-type server there are no token
        ids: with :attr:`tokens_from_messages` set (``process`` and ``evaluate`` set it) a
        :class:`~atroposlib.envs.server_handling.message_tokens.MessageTokenizedServer` computes them from
        the messages; otherwise ``NotImplementedError`` unless ``$ATROPOS_ALLOW_DUMMY_MANAGED_SERVER=1``
        (then a :class:`DummyManagedServer` with placeholder tokens). In proxy mode a
        :class:`~atroposlib.envs.server_handling.proxy_client.ProxyManagedServer` session is created
        on entry and deleted on exit.
        """
        if self.use_proxy:
            if not self.proxy_url:
                raise ValueError("proxy mode needs proxy_url (or $ATROPOS_PROXY_URL)")
            from atroposlib.envs.server_handling.proxy_client import create_proxy_session

            model_name = self.servers[0].config.model_name if self.servers else "unknown"
            proxied = await create_proxy_session(
                proxy_url=self.proxy_url,
                base_url=base_url,
                tool_parser=self.tool_parser or "hermes",
                model_name=model_name,
            )
            try:
                yield proxied
            finally:
                await proxied.cleanup()
            return

        server = self._server_by_url(base_url) if base_url else await self._wait_for_server(True)
        if isinstance(server, OpenAIServer) and self.tokens_from_messages:
            managed: Any = MessageTokenizedServer(server=server, tokenizer=tokenizer)
        elif isinstance(server, OpenAIServer):
            allow = os.environ.get("ATROPOS_ALLOW_DUMMY_MANAGED_SERVER", "").strip().lower() in _TRUTHY
            if not allow:
                raise NotImplementedError(
                    "OpenAI endpoints return no token ids or logprobs, which ManagedServer needs; use "
                    "server_type 'vllm' or 'sglang', or set ATROPOS_ALLOW_DUMMY_MANAGED_SERVER=1 to accept "
                    "placeholder tokens that are NOT suitable for training"
                )
            warnings.warn(
                "Using DummyManagedServer with an OpenAI endpoint: token ids and logprobs are placeholders.",
                stacklevel=3,
            )
            managed = DummyManagedServer(server=server, tokenizer=tokenizer)
        else:
            managed = ManagedServer(
                server=server,
                tokenizer=tokenizer,
                tool_parser=self.tool_parser,
                preserve_think_blocks=preserve_think_blocks,
            )
        try:
            yield managed
        finally:
            managed.reset()


__all__: Sequence[str] = (
    "APIServer",
    "APIServerConfig",
    "DummyManagedServer",
    "ManagedServer",
    "OpenAIServer",
    "ReasoningConfig",
    "SGLangServer",
    "SERVER_CLASSES",
    "ServerBaseline",
    "ServerHarness",
    "ServerManager",
    "ServerManagerConfig",
    "TrlVllmServer",
    "VLLMServer",
)
