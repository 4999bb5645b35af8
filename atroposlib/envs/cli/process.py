"""The offline run modes: ``process`` (groups to JSONL + HTML, no API) and ``evaluate`` (one evaluation).

:class:`ProcessRunner` and :class:`EvaluateRunner` hold an environment like the ``serve`` runner does, and use
that env's :class:`~atroposlib.envs.serve.runtime.EnvRunner` (``env.runner``) for what the modes share: its
:class:`~atroposlib.envs.serve.sending.GroupSender` (validation, counters, the JSONL file), its
:class:`~atroposlib.envs.serve.wandb_logging.WandbReporter` and its step counter. ``BaseEnv.process_manager``
and ``BaseEnv._run_evaluate`` run them.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from tqdm.auto import tqdm

from atroposlib.envs.serve.sending import describe_item
from atroposlib.envs.serve.setup_errors import run_setup
from atroposlib.envs.serve.wandb_logging import run_name
from atroposlib.envs.serve.workers import unpack_collect_result
from atroposlib.envs.server_handling.errors import ServerUnavailableError

if TYPE_CHECKING:
    from atroposlib.envs.serve.runtime import EnvRunner

# compat: environments log under the logger name of atroposlib 0.4.0 (``atroposlib.envs.base``).
logger = logging.getLogger("atroposlib.envs.base")


class ProcessModeError(RuntimeError):
    """``process`` stopped because items kept failing to produce an accepted group."""


def write_html_report(jsonl_path: str | Path) -> Path | None:
    """Render ``jsonl_path`` with :func:`atroposlib.frontend.jsonl2html.generate_html` into the sibling ``.html``.

    Returns the HTML path, or ``None`` (with an error logged) when rendering failed.
    """
    from atroposlib.frontend.jsonl2html import generate_html

    html_path = Path(jsonl_path).with_suffix(".html")
    try:
        generate_html(str(jsonl_path), str(html_path))
    except SystemExit as exc:  # the renderer exits on I/O errors
        logger.error("could not render %s to HTML (exit %s)", jsonl_path, exc.code)
        return None
    except Exception as exc:
        logger.error("could not render %s to HTML: %s", jsonl_path, exc)
        return None
    return html_path


class OfflineRunner:
    """What ``process`` and ``evaluate`` share: the env, its runner, and the inference-server watch."""

    def __init__(self, env: Any) -> None:
        self.env = env
        self.runner: EnvRunner = env.runner

    def bound_server_wait(self) -> None:
        """Make requests give up once no inference server has answered for ``server_unavailable_timeout`` s,
        and let ManagedServer sessions on OpenAI-type servers compute tokens from the messages."""
        server, config = self.env.server, self.env.config
        if hasattr(server, "unavailable_grace"):
            server.unavailable_grace = config.server_unavailable_timeout
        if hasattr(server, "tokens_from_messages"):
            server.tokens_from_messages = True

    def server_down(self, exc: BaseException | None = None) -> ServerUnavailableError | None:
        """The error to stop with when the inference servers are down (``exc`` or the manager's own check)."""
        if exc is None:
            check = getattr(self.env.server, "unavailable_error", None)
            exc = check() if check is not None else None
        if exc is None:
            return None
        timeout = self.env.config.server_unavailable_timeout
        return ServerUnavailableError(f"{exc} (gave up after --env.server_unavailable_timeout {timeout:g} s)")

    def start_wandb(self, name: str) -> None:
        """Start a wandb run named ``name`` when ``use_wandb`` (offline unless a key is available)."""
        if self.env.config.use_wandb:
            wandb = self.runner.wandb
            wandb.start_run(project=wandb.project, group=wandb.group, name=name)


class ProcessRunner(OfflineRunner):
    """``process``: ``n_groups`` accepted groups into ``data_path_to_save_groups`` (JSONL), rendered to HTML.

    ``n_groups`` defaults to the env's ``n_groups_to_process`` (set by the command line) else
    ``config.total_steps``; ``group_size`` to ``group_size_to_process`` else ``config.group_size``.
    """

    def __init__(self, env: Any, n_groups: Optional[int] = None, group_size: Optional[int] = None) -> None:
        super().__init__(env)
        if n_groups is None:
            n_groups = getattr(env, "n_groups_to_process", env.config.total_steps)
        if group_size is None:
            group_size = getattr(env, "group_size_to_process", env.config.group_size)
        self.target = int(n_groups)
        self.group_size = int(group_size)
        self.accepted = 0
        self.last_problem = "no group returned"

    async def _process_item(self, item: Any) -> int:
        """Collect, post-process and record one item through the env's hooks; returns the groups accepted."""
        env, sender = self.env, self.runner.sender
        env.config.group_size = self.group_size
        before = sender.groups_accepted_total
        try:
            to_postprocess, to_backlog = unpack_collect_result(await env.collect_trajectories(item))
            self.runner.pool.backlog.extend(to_backlog)
            if to_postprocess:
                to_postprocess = await env.postprocess_histories(to_postprocess)
            if to_postprocess:
                await env.handle_send_to_api(
                    to_postprocess, item, do_send_to_api=False, abort_on_any_max_length_exceeded=False
                )
        except ServerUnavailableError as exc:
            raise self.server_down(exc) from exc
        except Exception as exc:
            self.last_problem = f"{type(exc).__name__}: {exc}"
            logger.error("[%s] item %s failed: %s", env.env_label, describe_item(item), self.last_problem)
            logger.debug("traceback", exc_info=True)
        return sender.groups_accepted_total - before

    def _no_group(self, failures_in_row: int, discards_before: int) -> None:
        """An item produced no accepted group: stop when the servers are down or too many failed in a row."""
        down = self.server_down()
        if down is not None:
            raise down
        counts = self.runner.sender.discard_counts
        if sum(counts.values()) > discards_before:
            self.last_problem = (
                "group discarded (" + ", ".join(f"{k}={v}" for k, v in counts.items()) + " so far)"
            )
        if failures_in_row >= self.env.config.process_max_consecutive_failures:
            raise ProcessModeError(
                f"{failures_in_row} items in a row produced no usable group (last: {self.last_problem}); "
                f"stopping after {self.accepted} of {self.target} groups"
            )

    async def _produce(self, bar: Any) -> None:
        env, pool = self.env, self.runner.pool
        failures_in_row = 0
        while self.accepted < self.target:
            item = pool.backlog.pop(0) if pool.backlog else await env.get_next_item()
            if item is None:
                logger.info("[%s] get_next_item() returned None: no more items", env.env_label)
                return
            discards_before = sum(self.runner.sender.discard_counts.values())
            new = await self._process_item(item)
            if new <= 0:
                failures_in_row += 1
                self._no_group(failures_in_row, discards_before)
                continue
            failures_in_row = 0
            self.accepted += new
            self.runner.curr_step = self.accepted
            bar.update(min(new, max(0, self.target - bar.n)))
            try:
                await env.wandb_log()
            except Exception:
                logger.error("[%s] wandb_log failed", env.env_label, exc_info=True)

    async def run(self) -> None:
        """Produce the groups (the default ``process_manager``).

        Only accepted groups count (a progress bar shows them). Items come from the backlog first, then
        ``get_next_item()``; ``None`` from it ends the run early. Exceptions of ``collect_trajectories`` are
        logged and the next item is tried; after ``process_max_consecutive_failures`` items in a row without an
        accepted group the run stops with :class:`ProcessModeError`. When no inference server has answered
        for ``server_unavailable_timeout`` seconds the run stops with
        :class:`~atroposlib.envs.server_handling.errors.ServerUnavailableError`. The JSONL file is closed and
        the HTML written in every case. wandb runs offline unless a key is available.
        """
        env = self.env
        self.bound_server_wait()
        await run_setup(env)
        label = env.name or type(env).__name__
        self.start_wandb(run_name(label))
        self.runner.curr_step = 0
        self.accepted = 0
        bar = tqdm(total=self.target, desc=f"{label}: groups", unit="group", dynamic_ncols=True)
        try:
            await self._produce(bar)
        finally:
            bar.close()
            self._finish_outputs()
            await self.runner.close_inference_clients()

    def _finish_outputs(self) -> None:
        writer = self.runner.sender.jsonl_writer
        if writer is not None:
            writer.close()
        path = self.env.config.data_path_to_save_groups
        html = None
        if path and Path(path).exists():
            html = write_html_report(path)
        self.runner.wandb.finish_run()
        logger.info(
            "[%s] process: %d/%d groups written to %s%s; discarded %s",
            self.env.env_label,
            self.accepted,
            self.target,
            path,
            f" and {html}" if html else "",
            dict(self.runner.sender.discard_counts) or 0,
        )


class EvaluateRunner(OfflineRunner):
    """``evaluate``: the env's ``setup()`` then its ``evaluate()`` once."""

    async def run(self) -> None:
        """Run the evaluation. With ``use_wandb`` a run is started (offline without a key) and the env's
        ``wandb_log`` is called afterwards to flush the evaluation metrics it recorded. Raises
        :class:`~atroposlib.envs.server_handling.errors.ServerUnavailableError` when no inference server has
        answered for ``server_unavailable_timeout`` seconds."""
        env = self.env
        self.bound_server_wait()
        await run_setup(env)
        self.start_wandb(run_name(env.name or type(env).__name__))
        try:
            try:
                await env.evaluate()
            except ServerUnavailableError as exc:
                raise self.server_down(exc) from exc
            down = self.server_down()
            if down is not None:
                raise down
            if self.runner.wandb.active():
                try:
                    await env.wandb_log({})
                except Exception:
                    logger.error("[%s] wandb_log after evaluate failed", env.env_label, exc_info=True)
        finally:
            self.runner.wandb.finish_run()
            await self.runner.close_inference_clients()


__all__ = ["EvaluateRunner", "OfflineRunner", "ProcessModeError", "ProcessRunner", "write_html_report"]
