"""``EvalEnv``: the environment every benchmark of ``environments/eval_environments/`` declares itself on.

A benchmark is a :class:`EvalEnv` subclass that declares its data (:meth:`EvalEnv.hub_set`, or the config's
``dataset_name`` / ``subset`` / ``eval_split``), turns each row into an :class:`~atroposlib.evals.items.EvalItem`
(:meth:`EvalEnv.make_item`) and scores a reply (:meth:`EvalEnv.score`). The core does the rest:

* ``setup``: the rows (hub, or ``--env.dataset_path`` file/directory; one-line errors naming file, row and
  field), the items, ``--env.eval_limit``;
* ``evaluate``: the system prompt (``thinking_mode`` / ``custom_thinking_prompt`` / ``custom_system_prompt``
  joined as atroposlib 0.4.0 joined them), ``pass_at_n_samples`` replies per item at ``eval_temperature`` and ``eval_max_tokens``
  (0: the server's default), at most ``max_eval_workers`` items at once, a retry of failed requests and of
  replies shorter than ``min_response_length`` (``max_retries``, ``retry_delay``), a progress bar, and with
  ``resume`` the replies already scored in ``data_dir_to_save_evals`` reused instead of asked again;
* the report: ``metrics.json`` (lighteval's shape, with a subtask per breakdown value) and ``samples.jsonl``
  (every prompt, reply, extracted answer and score) under ``data_dir_to_save_evals``; metrics as
  :mod:`atroposlib.evals.report` computes them; a summary table on stdout; wandb when enabled.

Run it as any environment: ``python benchmark.py evaluate --openai.base_url ... --openai.model_name ...
--env.data_dir_to_save_evals DIR``.
"""

from __future__ import annotations

import asyncio
import inspect
import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Optional

from pydantic import Field

from atroposlib.envs.base import APIServerConfig, BaseEnv, BaseEnvConfig
from atroposlib.envs.data_loading import DatasetError
from atroposlib.envs.server_handling.errors import ServerUnavailableError
from atroposlib.evals.data import HubSet, Row, RowError, load_eval_rows
from atroposlib.evals.items import EvalItem, Messages, Reply, Score
from atroposlib.evals.journal import JOURNAL_NAME, Journal, item_key
from atroposlib.evals.report import aggregate, headline

logger = logging.getLogger(__name__)


@dataclass
class _Pass:
    """One evaluation pass over the items: its inputs and what it has gathered so far."""

    journal: Optional[Journal]
    done: dict[str, list[dict[str, Any]]]  #: journal records of a resumed run, by item key
    generation: dict[str, Any]
    semaphore: asyncio.Semaphore
    progress: Any
    results: dict[int, list[dict[str, Any]]] = field(default_factory=dict)  #: by item position
    failed: list[str] = field(default_factory=list)  #: ids of the items that raised
    reused: int = 0  #: items taken from the journal


class EvalConfig(BaseEnvConfig):
    """The settings every benchmark shares (compat: the field names of atroposlib 0.4.0's evaluations)."""

    thinking_mode: bool = Field(
        default=True,
        description="Reasoning mode: the reasoning parameters are sent and custom_thinking_prompt leads the "
        "system prompt; a <think> block in a reply is never read as its answer.",
    )
    custom_thinking_prompt: Optional[str] = Field(
        default=None, description="System prompt used in thinking mode (before custom_system_prompt)."
    )
    custom_system_prompt: Optional[str] = Field(
        default=None, description="System prompt (after the thinking prompt in thinking mode)."
    )
    dataset_name: str = Field(default="", description="Hugging Face data set of the benchmark.")
    eval_split: str = Field(default="test", description="Split of the data set to evaluate on.")
    dataset_path: Optional[str] = Field(
        default=None,
        description="Local file (JSONL, JSON, Parquet, CSV) in the hub set's schema, or a directory of "
        "per-subset files named after the subsets, used instead of the hub.",
    )
    eval_limit: Optional[int] = Field(default=None, ge=1, description="Evaluate the first N items only.")
    eval_temperature: float = Field(default=0.6, ge=0.0, description="Sampling temperature.")
    eval_max_tokens: int = Field(
        default=0, ge=0, description="Most tokens per reply; 0 = the server's default."
    )
    pass_at_n_samples: int = Field(
        default=1, ge=1, description="Replies sampled per item (mean@n, pass@k and maj@n when above 1)."
    )
    pass_at_n: int = Field(
        default=1, ge=1, description="pass@k reported up to this k (replies drawn: the larger of the two)."
    )
    resume: bool = Field(
        default=False,
        description="Reuse the items already scored in data_dir_to_save_evals (same prompt, sampling "
        "settings and model) instead of asking the model again.",
    )
    max_retries: int = Field(default=3, ge=1, description="Attempts per request (failed or too short).")
    retry_delay: float = Field(default=1.0, ge=0.0, description="Seconds between attempts.")
    min_response_length: int = Field(
        default=1, ge=0, description="Replies shorter than this (characters) are asked again."
    )
    full_debug: bool = Field(default=False, description="Log every item's reply and score.")
    # eval-only defaults of the base settings
    group_size: int = 1
    total_steps: int = 1
    steps_per_eval: int = 1
    batch_size: int = 1
    max_eval_workers: int = Field(default=256, description="Items evaluated at once.")
    max_num_workers_per_node: int = 128


class Progress:
    """What the core reports progress to: ``update(n)`` as items finish, ``close()`` at the end."""

    def update(self, n: int = 1) -> None: ...

    def close(self) -> None: ...


def tqdm_progress(total: int, description: str) -> Progress:
    """The default progress bar (tqdm, on stderr)."""
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=description, unit="item", dynamic_ncols=True)


class EvalEnv(BaseEnv):
    """An evaluation-only environment made of declarations (see the module docstring).

    Class attributes a benchmark sets: ``name`` (output and task name), ``env_config_cls`` (an
    :class:`EvalConfig` subclass with the benchmark's defaults), ``required_fields`` (checked in every row),
    ``breakdowns`` (group keys of :attr:`EvalItem.groups` reported separately), ``metric`` (the name of
    :attr:`Score.value`'s mean, default ``accuracy``).
    """

    env_config_cls: ClassVar[type[BaseEnvConfig]] = EvalConfig
    config: EvalConfig
    loads_tokenizer: ClassVar[bool] = False
    required_fields: ClassVar[tuple[str, ...]] = ()
    breakdowns: ClassVar[tuple[str, ...]] = ()
    metric: ClassVar[str] = "accuracy"
    #: the default inference server (compat: atroposlib 0.4.0's evaluations name this one)
    default_model: ClassVar[str] = "Hermes-3-Llama-3.1-8B"
    default_base_url: ClassVar[str] = "http://localhost:9000/v1"

    def __init__(self, config: EvalConfig, server_configs: Any, slurm: bool = False, testing: bool = False):
        super().__init__(config, server_configs, slurm, testing)
        self.items: list[EvalItem] = []
        #: progress factory ``(total, description) -> Progress``; the suite command replaces it
        self.progress: Callable[[int, str], Progress] = tqdm_progress
        #: print the summary table after an evaluation (the suite command prints one table for all instead)
        self.print_summary = True
        #: metrics of the last evaluation (flat ``eval/...`` keys) and its subtask breakdowns
        self.last_metrics: dict[str, float] = {}
        self.last_subtasks: dict[str, dict[str, float]] = {}
        #: requests sent to the model by the last evaluation, and items it reused from an earlier run
        self.requests_sent = 0
        self.reused_items = 0
        self._wandb_metrics: dict[str, float] = {}

    @classmethod
    def config_init(cls) -> tuple[EvalConfig, list[APIServerConfig]]:
        """``(env_config_cls(), [default_model at default_base_url])``; ``wandb_name`` defaults to ``name``."""
        config = cls.env_config_cls()
        if config.wandb_name is None:
            config.wandb_name = cls.name
        server = APIServerConfig(
            model_name=cls.default_model,
            base_url=cls.default_base_url,
            api_key=os.getenv("OPENAI_API_KEY", "none"),
            num_max_requests_at_once=32,
            num_requests_for_eval=256,
        )
        return config, [server]

    # -- the declaration (benchmarks override these) ----------------------------------------------------
    def hub_set(self) -> HubSet:
        """Where the rows live on the hub (default: ``dataset_name``, the config's ``subset`` if it has one,
        ``eval_split``)."""
        return HubSet(
            self.config.dataset_name, self.config.eval_split, (getattr(self.config, "subset", None),)
        )

    def make_item(self, row: Row) -> Optional[EvalItem]:
        """The item of one row (None skips the row). Raise :class:`~atroposlib.evals.data.RowError` for an
        unusable field; a ``KeyError`` is reported as the field missing."""
        raise NotImplementedError

    def score(self, item: EvalItem, reply: Reply) -> Score:
        """The score of one reply (may be ``async def`` for scorers that wait on workers or a judge)."""
        raise NotImplementedError

    def extra_metrics(self, samples: Sequence[dict[str, Any]]) -> dict[str, float]:
        """Metrics beyond :func:`~atroposlib.evals.report.aggregate`'s, from the sample records (default none).
        Keys start with ``eval/``."""
        return {}

    # -- prompting --------------------------------------------------------------------------------------
    def system_prompt(self) -> Optional[str]:
        """Thinking mode: ``custom_thinking_prompt`` then ``custom_system_prompt`` (blank line between);
        otherwise ``custom_system_prompt``. None when neither is set."""
        cfg = self.config
        parts = [cfg.custom_thinking_prompt if cfg.thinking_mode else None, cfg.custom_system_prompt]
        text = "\n\n".join(p for p in parts if p)
        return text or None

    def messages(self, item: EvalItem) -> Messages:
        """The chat messages sent for ``item``: the system prompt (when any), then the item's prompt."""
        system = self.system_prompt()
        head: Messages = [{"role": "system", "content": system}] if system else []
        if isinstance(item.prompt, str):
            return [*head, {"role": "user", "content": item.prompt}]
        if system and item.prompt and item.prompt[0].get("role") == "system":
            return list(item.prompt)  # the item brings its own system prompt
        return [*head, *item.prompt]

    @property
    def num_samples(self) -> int:
        """Replies drawn per item: the larger of ``pass_at_n_samples`` and ``pass_at_n``."""
        return max(self.config.pass_at_n_samples, self.config.pass_at_n)

    def generation_parameters(self) -> dict[str, Any]:
        """The sampling parameters of every request (``max_tokens`` only when ``eval_max_tokens`` > 0)."""
        params: dict[str, Any] = {"temperature": self.config.eval_temperature, "n": self.num_samples}
        if self.config.eval_max_tokens > 0:
            params["max_tokens"] = self.config.eval_max_tokens
        return params

    async def generate(self, item: EvalItem, messages: Messages, n: int) -> list[Reply]:
        """``n`` replies to ``messages`` (one chat request with ``n`` choices on the evaluation split).
        Override for benchmarks that ask more than once (several turns)."""
        params = {**self.generation_parameters(), "n": n}
        completion = await self.server.chat_completion(messages=messages, split="eval", **params)
        self.requests_sent += 1
        return [Reply(c.message.content or "", c.finish_reason) for c in completion.choices]

    # -- set-up -----------------------------------------------------------------------------------------
    def load_rows(self) -> list[Row]:
        """The benchmark's rows (see :func:`~atroposlib.evals.data.load_eval_rows`)."""
        return load_eval_rows(self.config.dataset_path, self.hub_set(), self.required_fields)

    def build_items(self, rows: Sequence[Row]) -> list[EvalItem]:
        """:meth:`make_item` of every row, errors turned into one-line :class:`DatasetError` s."""
        items: list[EvalItem] = []
        seen: set[str] = set()
        for row in rows:
            try:
                item = self.make_item(row)
            except RowError as exc:
                raise DatasetError(f"{row.where()}: {exc}") from None
            except KeyError as exc:
                raise DatasetError(f"{row.where()}: missing field {exc.args[0]!r}") from None
            if item is None:
                continue
            if item.id in seen:
                item.id = f"{item.id}#{row.index}"
            seen.add(item.id)
            items.append(item)
        return items

    async def setup(self) -> None:
        items = self.build_items(self.load_rows())
        if self.config.eval_limit is not None:
            items = items[: self.config.eval_limit]
        if not items:
            raise DatasetError(f"{self.name}: no items to evaluate")
        self.items = items
        logger.info("%s: %d items", self.name, len(items))

    async def get_next_item(self) -> None:
        """Evaluation only: nothing to train on."""
        return None

    async def collect_trajectories(self, item: Any) -> tuple[None, list]:
        return None, []

    # -- evaluation -------------------------------------------------------------------------------------
    @property
    def model_name(self) -> Optional[str]:
        servers = getattr(self.server, "servers", None) or []
        return getattr(getattr(servers[0], "config", None), "model_name", None) if servers else None

    async def _ask(self, item: EvalItem, messages: Messages) -> list[Reply]:
        """The item's replies: failed requests and too-short replies are asked again up to ``max_retries``
        attempts (a down server stops the run instead)."""
        cfg = self.config
        replies: list[Optional[Reply]] = [None] * self.num_samples
        for attempt in range(cfg.max_retries):
            missing = [
                i for i, r in enumerate(replies) if r is None or len(r.text.strip()) < cfg.min_response_length
            ]
            if not missing:
                break
            if attempt > 0 and cfg.retry_delay > 0:
                await asyncio.sleep(cfg.retry_delay)
            try:
                got = await self.generate(item, messages, len(missing))
            except (ServerUnavailableError, asyncio.CancelledError):
                raise
            except Exception as exc:
                if attempt == cfg.max_retries - 1 and all(r is None for r in replies):
                    raise
                logger.warning("%s: item %s: request failed (%s); trying again", self.name, item.id, exc)
                continue
            for index, reply in zip(missing, got, strict=False):
                replies[index] = reply
        return [r if r is not None else Reply("", None) for r in replies]

    async def _scored(self, item: EvalItem, reply: Reply) -> Score:
        result = self.score(item, reply)
        if inspect.isawaitable(result):
            result = await result
        return result

    def sample_record(
        self, item: EvalItem, messages: Messages, index: int, reply: Reply, score: Score
    ) -> dict:
        """One line of ``samples.jsonl``."""
        return {
            "id": item.id,
            "sample": index,
            **item.fields,
            "messages": messages,
            "reply": reply.text,
            "finish_reason": reply.finish_reason,
            "gold": item.gold,
            "extracted": score.extracted,
            "method": score.method,
            "score": score.value,
            "metrics": score.metrics,
            "groups": item.groups,
            **score.fields,
        }

    async def evaluate(self, *args: Any, **kwargs: Any) -> dict[str, float]:
        """Evaluate every item (see the module docstring); returns the metrics."""
        cfg = self.config
        self.requests_sent = 0
        run = _Pass(
            *self._open_journal(),
            generation=self.generation_parameters(),
            semaphore=asyncio.Semaphore(max(1, cfg.max_eval_workers)),
            progress=self.progress(len(self.items), self.name or type(self).__name__),
        )
        start = time.time()
        try:
            await asyncio.gather(*(self._evaluate_item(run, i, item) for i, item in enumerate(self.items)))
        finally:
            run.progress.close()
            if run.journal is not None:
                run.journal.close()
        end = time.time()
        samples, metrics, subtasks = self._pass_metrics(run)
        if self.print_summary:
            print(self.summary(metrics), flush=True)
        await self.evaluate_log(
            metrics,
            task_name=self.name,
            model_name=self.model_name,
            start_time=start,
            end_time=end,
            generation_parameters={**run.generation, "thinking_mode": cfg.thinking_mode},
            samples=samples,
            verbose=False,
            subtasks=subtasks,
        )
        return metrics

    def _open_journal(self) -> tuple[Optional[Journal], dict[str, list[dict[str, Any]]]]:
        """The journal under ``data_dir_to_save_evals`` (None without one) and, with ``resume``, the
        records it already holds by item key; without ``resume`` the journal starts empty."""
        cfg = self.config
        if not cfg.data_dir_to_save_evals:
            return None, {}
        journal = Journal(Path(cfg.data_dir_to_save_evals) / JOURNAL_NAME)
        if cfg.resume:
            return journal, journal.load()
        journal.reset()
        return journal, {}

    async def _evaluate_item(self, run: _Pass, position: int, item: EvalItem) -> None:
        """Score one item (or reuse its journal records) into ``run``; a failing item is counted, not
        raised, except when the server is unavailable or the run is cancelled."""
        messages = self.messages(item)
        key = item_key(item.id, messages, run.generation, self.model_name)
        if key in run.done:
            run.results[position] = run.done[key]
            run.reused += 1
            run.progress.update(1)
            return
        try:
            async with run.semaphore:
                replies = await self._ask(item, messages)
            scores = [await self._scored(item, reply) for reply in replies]
        except (ServerUnavailableError, asyncio.CancelledError):
            raise
        except Exception as exc:
            logger.error("%s: item %s failed: %s", self.name, item.id, exc)
            run.failed.append(item.id)
            run.progress.update(1)
            return
        records = [
            self.sample_record(item, messages, i, r, s)
            for i, (r, s) in enumerate(zip(replies, scores, strict=True))
        ]
        if self.config.full_debug:
            for record in records:
                logger.info("%s: %s gold=%s extracted=%s score=%s", self.name, item.id, item.gold,
                            record["extracted"], record["score"])  # fmt: skip
        if run.journal is not None:
            run.journal.append(key, records)
        run.results[position] = records
        run.progress.update(1)

    def _pass_metrics(self, run: _Pass) -> tuple[list[dict[str, Any]], dict[str, float], dict[str, Any]]:
        """``(samples in item order, metrics, subtasks)`` of a finished pass, also kept as the
        environment's last metrics. Raises RuntimeError when every item failed."""
        if not run.results:
            raise RuntimeError(f"{self.name}: every one of {len(self.items)} items failed")
        samples = [record for position in sorted(run.results) for record in run.results[position]]
        metrics, subtasks = aggregate(samples, self.metric, self.breakdowns, self.num_samples)
        metrics.update(self.extra_metrics(samples))
        if run.failed:
            metrics["eval/failed_items"] = len(run.failed)
            logger.warning(
                "%s: %d of %d items failed and are not counted", self.name, len(run.failed), len(self.items)
            )
        self.reused_items = run.reused
        if run.reused:
            where = run.journal.path if run.journal else ""
            logger.info("%s: %d items reused from %s", self.name, run.reused, where)
        self.last_metrics, self.last_subtasks = metrics, subtasks
        self._wandb_metrics = dict(metrics)
        return samples, metrics, subtasks

    def summary(self, metrics: dict[str, float]) -> str:
        """The table printed after an evaluation: the headline metrics, then one line per breakdown value."""
        from atroposlib.utils.display import format_metrics_table

        table = format_metrics_table(
            self.name or "", {f"eval/{k}": v for k, v in headline(metrics, self.breakdowns).items()}
        )
        lines = [f"\n{self.name} ({self.model_name})", table]
        for key, sub in self.last_subtasks.items():
            if self.metric in sub:
                err = sub.get(f"{self.metric}_stderr", 0.0)
                lines.append(
                    f"  {key}: {self.metric}={sub[self.metric]:.4f} ± {err:.4f} (n={int(sub['num_items'])})"
                )
        return "\n".join(lines)

    async def wandb_log(self, wandb_metrics: Optional[dict] = None) -> None:
        """The last evaluation's metrics go with the next log."""
        wandb_metrics = {**(wandb_metrics or {}), **self._wandb_metrics}
        self._wandb_metrics = {}
        await super().wandb_log(wandb_metrics)


__all__ = ["EvalConfig", "EvalEnv", "Progress", "tqdm_progress"]
