"""The offline run modes: ``process`` (groups to JSONL + HTML, no API) and ``evaluate`` (one evaluation).

:class:`OfflineModesMixin` is part of :class:`~atroposlib.envs.base.BaseEnv`.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from tqdm.auto import tqdm

from atroposlib.envs.serve.sending import describe_item
from atroposlib.envs.serve.setup_errors import run_setup
from atroposlib.envs.serve.wandb_logging import run_name
from atroposlib.envs.serve.workers import unpack_collect_result
from atroposlib.envs.server_handling.errors import ServerUnavailableError

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


class OfflineModesMixin:
    """``process_manager`` and ``_run_evaluate``."""

    def _bound_server_wait(self) -> None:
        """Make requests give up once no inference server has answered for ``server_unavailable_timeout`` s,
        and let ManagedServer sessions on OpenAI-type servers compute tokens from the messages."""
        if hasattr(self.server, "unavailable_grace"):
            self.server.unavailable_grace = self.config.server_unavailable_timeout
        if hasattr(self.server, "tokens_from_messages"):
            self.server.tokens_from_messages = True

    def _server_down(self, exc: BaseException | None = None) -> ServerUnavailableError | None:
        """The error to stop with when the inference servers are down (``exc`` or the manager's own check)."""
        if exc is None:
            check = getattr(self.server, "unavailable_error", None)
            exc = check() if check is not None else None
        if exc is None:
            return None
        return ServerUnavailableError(
            f"{exc} (gave up after --env.server_unavailable_timeout {self.config.server_unavailable_timeout:g} s)"
        )

    async def process_manager(self) -> None:
        """Produce ``n_groups_to_process`` accepted groups into ``data_path_to_save_groups`` (JSONL) and render
        them to HTML beside it.

        Only accepted groups count (a progress bar shows them). Items come from the backlog first, then
        ``get_next_item()``; ``None`` from it ends the run early. Exceptions of ``collect_trajectories`` are
        logged and the next item is tried; after ``process_max_consecutive_failures`` items in a row without an
        accepted group the run stops with :class:`ProcessModeError`. When no inference server has answered
        for ``server_unavailable_timeout`` seconds the run stops with
        :class:`~atroposlib.envs.server_handling.errors.ServerUnavailableError`. The JSONL file is closed and
        the HTML written in every case. wandb runs offline unless a key is available.
        """
        self._bound_server_wait()
        await run_setup(self)
        target = int(getattr(self, "n_groups_to_process", self.config.total_steps))
        group_size = int(getattr(self, "group_size_to_process", self.config.group_size))
        label = self.name or type(self).__name__
        if self.config.use_wandb:
            self._start_wandb_run(project=self.wandb_project, group=self.wandb_group, name=run_name(label))
        self.curr_step = 0
        accepted = 0
        failures_in_row = 0
        limit = self.config.process_max_consecutive_failures
        last_problem = "no group returned"
        bar = tqdm(total=target, desc=f"{label}: groups", unit="group", dynamic_ncols=True)
        try:
            while accepted < target:
                item = self.backlog.pop(0) if self.backlog else await self.get_next_item()
                if item is None:
                    logger.info("[%s] get_next_item() returned None: no more items", self.env_label)
                    break
                self.config.group_size = group_size
                before = self.groups_accepted_total
                discards_before = sum(self.discard_counts.values())
                try:
                    to_postprocess, to_backlog = unpack_collect_result(await self.collect_trajectories(item))
                    self.backlog.extend(to_backlog)
                    if to_postprocess:
                        to_postprocess = await self.postprocess_histories(to_postprocess)
                    if to_postprocess:
                        await self.handle_send_to_api(
                            to_postprocess, item, do_send_to_api=False, abort_on_any_max_length_exceeded=False
                        )
                except ServerUnavailableError as exc:
                    raise self._server_down(exc) from exc
                except Exception as exc:
                    last_problem = f"{type(exc).__name__}: {exc}"
                    logger.error("[%s] item %s failed: %s", self.env_label, describe_item(item), last_problem)
                    logger.debug("traceback", exc_info=True)
                new = self.groups_accepted_total - before
                if new > 0:
                    failures_in_row = 0
                    accepted += new
                    self.curr_step = accepted
                    bar.update(min(new, max(0, target - bar.n)))
                    try:
                        await self.wandb_log()
                    except Exception:
                        logger.error("[%s] wandb_log failed", self.env_label, exc_info=True)
                else:
                    down = self._server_down()
                    if down is not None:
                        raise down
                    failures_in_row += 1
                    if sum(self.discard_counts.values()) > discards_before:
                        last_problem = (
                            "group discarded ("
                            + ", ".join(f"{k}={v}" for k, v in self.discard_counts.items())
                            + " so far)"
                        )
                    if failures_in_row >= limit:
                        raise ProcessModeError(
                            f"{failures_in_row} items in a row produced no usable group (last: {last_problem}); "
                            f"stopping after {accepted} of {target} groups"
                        )
        finally:
            bar.close()
            self._finish_process_outputs(accepted, target)
            await self._close_inference_clients()

    def _finish_process_outputs(self, accepted: int, target: int) -> None:
        if self.jsonl_writer is not None:
            self.jsonl_writer.close()
        path = self.config.data_path_to_save_groups
        html = None
        if path and Path(path).exists():
            html = write_html_report(path)
        self._finish_wandb_run()
        logger.info(
            "[%s] process: %d/%d groups written to %s%s; discarded %s",
            self.env_label,
            accepted,
            target,
            path,
            f" and {html}" if html else "",
            dict(self.discard_counts) or 0,
        )

    async def _run_evaluate(self, *_: Any, **__: Any) -> None:
        """Run ``setup()`` then ``evaluate()`` once. With ``use_wandb`` a run is started (offline without a key)
        and ``wandb_log`` is called afterwards to flush the evaluation metrics the env recorded. Raises
        :class:`~atroposlib.envs.server_handling.errors.ServerUnavailableError` when no inference server has
        answered for ``server_unavailable_timeout`` seconds."""
        self._bound_server_wait()
        await run_setup(self)
        if self.config.use_wandb:
            name = run_name(self.name or type(self).__name__)
            self._start_wandb_run(project=self.wandb_project, group=self.wandb_group, name=name)
        try:
            try:
                await self.evaluate()
            except ServerUnavailableError as exc:
                raise self._server_down(exc) from exc
            down = self._server_down()
            if down is not None:
                raise down
            if self._wandb_active():
                try:
                    await self.wandb_log({})
                except Exception:
                    logger.error("[%s] wandb_log after evaluate failed", self.env_label, exc_info=True)
        finally:
            self._finish_wandb_run()
            await self._close_inference_clients()


__all__ = ["OfflineModesMixin", "ProcessModeError", "write_html_report"]
