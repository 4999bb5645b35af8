"""From an environment's result to the API: validation, bookkeeping, JSONL copy, delivery.

:class:`GroupSender` belongs to an :class:`~atroposlib.envs.serve.runtime.EnvRunner`. ``BaseEnv.handle_send_to_api``
(the hook environments may override) calls :meth:`GroupSender.send`, which validates each group, records it
(:class:`RolloutStats`, discard counters, the env's ``add_rollouts_for_wandb`` hook, the JSONL file) and hands the
accepted ones to :meth:`GroupSender.deliver`, the only place that talks to the trajectory API's scored-data routes.
"""

from __future__ import annotations

import logging
import math
import os
import reprlib
from collections import Counter
from contextvars import ContextVar
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from atroposlib.envs.serve.api_client import SendOutcome, TrajectoryApiClient
from atroposlib.envs.serve.group_validation import GroupProblem, completion_length, prepare_group
from atroposlib.envs.serve.jsonl_sink import JsonlWriter, UnsentGroupsFile

if TYPE_CHECKING:
    from atroposlib.envs.serve.runtime import EnvRunner

#: Trainer step current when the worker that produced the groups being sent started collecting them. Set
#: per worker task by the serve loop; groups sent to the API carry it as ``group_overrides["policy_step"]``
#: so a trainer can bound how stale (off-policy) a batch may be (``atropos-grpo --max-staleness``).
POLICY_STEP: ContextVar[Optional[int]] = ContextVar("atropos_policy_step", default=None)

# compat: environments log under the logger name of atroposlib 0.4.0 (``atroposlib.envs.base``).
logger = logging.getLogger("atroposlib.envs.base")

#: Problems that are a normal part of training (logged at INFO); everything else is a WARNING.
IDENTICAL = "identical_scores"
_EXPECTED_DISCARDS = {IDENTICAL, "too_long"}
#: Buffers such as ``completion_lengths`` are trimmed to this many entries between two wandb logs.
MAX_BUFFERED_VALUES = 10_000

_short = reprlib.Repr()
_short.maxstring = 80
_short.maxother = 80
_short.maxlist = 4
_short.maxdict = 4


def describe_item(item: Any) -> str:
    """A short, single-line description of an item for log lines."""
    return " ".join(_short.repr(item).split())


def stamp_policy_step(groups: list[dict[str, Any]], started_step: Optional[int], current_step: int) -> None:
    """Record in each group's ``group_overrides`` the policy step it was generated with.

    ``started_step`` (the step when its worker started) is preferred; ``current_step`` is the fallback for
    groups sent outside a worker. A ``policy_step`` the environment set itself is kept.
    """
    step = current_step if started_step is None else started_step
    for group in groups:
        overrides = dict(group.get("group_overrides") or {})
        overrides.setdefault("policy_step", int(step))
        group["group_overrides"] = overrides


def trim_buffer(values: list, limit: int = MAX_BUFFERED_VALUES) -> None:
    """Drop the oldest entries of ``values`` in place so that at most ``limit`` remain."""
    excess = len(values) - limit
    if excess > 0:
        del values[:excess]


def split_messages_from_tokens(tokenizer: Any, tokens: list[int], mask: list[int]) -> list[dict[str, str]]:
    """Rebuild a readable transcript of one sequence: the untrained prefix (mask -100) as the ``user`` turn and
    the rest as the ``assistant`` turn (a single message when one of them is empty)."""
    prefix = 0
    while prefix < len(mask) and mask[prefix] == -100:
        prefix += 1
    if prefix == 0:
        return [{"role": "assistant", "content": tokenizer.decode(tokens)}]
    if prefix >= len(tokens):
        return [{"role": "user", "content": tokenizer.decode(tokens)}]
    return [
        {"role": "user", "content": tokenizer.decode(tokens[:prefix])},
        {"role": "assistant", "content": tokenizer.decode(tokens[prefix:])},
    ]


class RolloutStats:
    """Scores of the groups generated since the last wandb log, kept or not (see :meth:`record`)."""

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        """Empty the buffers."""
        self.rollout_scores: list[float] = []
        self.kept_scores: list[float] = []
        self.groups_scored = 0
        self.groups_dropped_equal_scores = 0

    def record(self, scores: Any, kept: bool, equal_scores: bool = False) -> None:
        """Count one generated group's scores, whether or not the group reaches the trainer: ``kept`` when it
        is sent, ``equal_scores`` when it was dropped because all its scores are equal (it carries no GRPO
        signal). A group with a non-numeric or non-finite score is not counted."""
        try:
            values = [float(s) for s in scores]
        except (TypeError, ValueError):
            return
        if not values or not all(math.isfinite(v) for v in values):
            return
        self.rollout_scores.extend(values)
        trim_buffer(self.rollout_scores)
        self.groups_scored += 1
        if kept:
            self.kept_scores.extend(values)
            trim_buffer(self.kept_scores)
        elif equal_scores:
            self.groups_dropped_equal_scores += 1

    def metrics(self) -> dict[str, float]:
        """``train/rollout_reward_mean`` (mean score of every rollout generated), ``train/kept_reward_mean``
        (mean over the groups sent to the trainer; absent when none was), ``train/rollouts``,
        ``train/groups_scored`` and ``train/groups_dropped_equal_scores``. Empty when no group was counted."""
        if not self.groups_scored or not self.rollout_scores:
            return {}
        stats: dict[str, float] = {
            "train/rollout_reward_mean": sum(self.rollout_scores) / len(self.rollout_scores),
            "train/rollouts": len(self.rollout_scores),
            "train/groups_scored": self.groups_scored,
            "train/groups_dropped_equal_scores": self.groups_dropped_equal_scores,
        }
        if self.kept_scores:
            stats["train/kept_reward_mean"] = sum(self.kept_scores) / len(self.kept_scores)
        return stats


class GroupSender:
    """Validation, bookkeeping, the JSONL copy and delivery of an env's groups, for one :class:`EnvRunner`.

    Counters: ``discard_counts`` (every discard by reason), ``discards_since_log`` (cleared by each wandb log),
    ``groups_accepted_total``, ``groups_sent_total`` and ``groups_sent_since_status`` (cleared by each status
    poll). ``jsonl_writer`` is the file accepted groups are appended to (None: no file).
    """

    def __init__(self, runner: EnvRunner, jsonl_writer: Optional[JsonlWriter] = None) -> None:
        self.runner = runner
        self.env = runner.env
        self.jsonl_writer = jsonl_writer
        self.stats = RolloutStats()
        self.discard_counts: Counter[str] = Counter()
        self.discards_since_log: Counter[str] = Counter()
        self.groups_accepted_total = 0
        self.groups_sent_total = 0
        self.groups_sent_since_status = 0
        self._warned_no_max_len = False
        self._api: Optional[TrajectoryApiClient] = None
        self._unsent: Optional[UnsentGroupsFile] = None

    # -- counters ------------------------------------------------------------------------------------------
    def record_discard(self, problem: GroupProblem, item: Any = None) -> None:
        """Count a discarded group under ``problem.code`` and log one line naming the env, item and problem."""
        self.discard_counts[problem.code] += 1
        self.discards_since_log[problem.code] += 1
        level = logging.INFO if problem.code in _EXPECTED_DISCARDS else logging.WARNING
        logger.log(
            level,
            "[%s] discarded a group (%s) for item %s: %s",
            self.env.env_label,
            problem.code,
            describe_item(item),
            problem.message,
        )

    # -- the API client and the spill file -----------------------------------------------------------------
    def _unsent_path(self) -> Path:
        configured = getattr(self.env.config, "unsent_groups_path", None)
        if configured:
            return Path(configured)
        safe = "".join(c if c.isalnum() or c in "-_." else "_" for c in self.env.env_label)
        return Path("atropos_unsent") / f"{safe}-{os.getpid()}.jsonl"

    def _unsent_file(self) -> UnsentGroupsFile:
        if self._unsent is None:
            self._unsent = UnsentGroupsFile(self._unsent_path())
        return self._unsent

    @property
    def api(self) -> TrajectoryApiClient:
        """The client for ``config.rollout_server_url`` (created on first use, one session per run)."""
        if self._api is None:
            self._api = TrajectoryApiClient(
                self.env.config.rollout_server_url, unsent=self._unsent_file, label=self.env.env_label
            )
        return self._api

    @property
    def api_started(self) -> bool:
        """Whether :attr:`api` was ever used (and so has a session to close)."""
        return self._api is not None

    async def close(self) -> None:
        """Close the JSONL file, the spill file (logging how to resend what it holds) and the API session."""
        if self.jsonl_writer is not None:
            self.jsonl_writer.close()
        if self._unsent is not None:
            if self._unsent.count:
                logger.warning(
                    "[%s] %d undelivered payload(s) are saved in %s (resend with: python -m "
                    "atroposlib.envs.serve.api_client resend %s --url %s)",
                    self.env.env_label,
                    self._unsent.count,
                    self._unsent.path,
                    self._unsent.path,
                    self.env.config.rollout_server_url,
                )
            self._unsent.close()
        if self._api is not None:
            await self._api.close()

    # -- delivery ------------------------------------------------------------------------------------------
    async def deliver(self, scored_data: Any) -> SendOutcome:
        """Send one group or a list of groups with the runner's ``env_id`` (see ``TrajectoryApiClient``)."""
        env_id = self.runner.env_id
        if isinstance(scored_data, list):
            payload: Any = [{**group, "env_id": env_id} for group in scored_data]
            count = len(payload)
        else:
            payload = {**scored_data, "env_id": env_id}
            count = 1
        self.api.label = self.env.env_label
        outcome = await self.api.send_scored_data(payload)
        if outcome.delivered:
            self.groups_sent_total += count
            self.groups_sent_since_status += count
        else:
            self.discard_counts["undelivered"] += count
            self.discards_since_log["undelivered"] += count
        return outcome

    async def _accept(self, raw: Any, item: Any, enforce_length: bool) -> Optional[dict[str, Any]]:
        """One group checked and recorded: the plain-JSON group when it is accepted, else None (counted)."""
        config = self.env.config
        group, problem = prepare_group(
            raw,
            default_group_size=config.group_size,
            max_token_len=self.runner.max_token_len,
            enforce_max_length=enforce_length,
            reject_identical_scores=config.ensure_scores_are_not_same,
        )
        scores = raw.get("scores") if isinstance(raw, dict) else None
        if scores is not None:
            self.stats.record(
                scores, kept=problem is None, equal_scores=problem is not None and problem.code == IDENTICAL
            )
        if problem is not None:
            self.record_discard(problem, item)
            return None
        lengths = self.runner.wandb.completion_lengths
        lengths.extend(completion_length(mask) for mask in group["masks"])
        trim_buffer(lengths)
        if config.include_messages and group.get("messages") is None:
            group["messages"] = [
                split_messages_from_tokens(self.env.tokenizer, toks, mask)
                for toks, mask in zip(group["tokens"], group["masks"], strict=True)
            ]
        await self.env.add_rollouts_for_wandb(group, item)
        if self.jsonl_writer is not None:
            try:
                self.jsonl_writer.write(group)
            except (OSError, TypeError) as exc:
                logger.error(
                    "[%s] could not append a group to %s: %s", self.env.env_label, self.jsonl_writer.path, exc
                )
        return group

    async def send(
        self, scored_data: Any, item: Any = None, *, to_api: bool = True, check_lengths: bool = True
    ) -> int:
        """Check, record and (optionally) send what ``collect_trajectories``/``postprocess_histories`` returned.

        ``scored_data`` is one group or a list of groups (``None`` entries are skipped). Each group is
        normalised and validated (:func:`~atroposlib.envs.serve.group_validation.prepare_group`); its scores are
        counted in :attr:`stats`; a rejected group is counted in ``discard_counts`` and logged with
        its reason. Accepted groups get every optional key (None when absent), ``messages`` rebuilt from the
        tokens when ``include_messages`` is set, are offered to the env's ``add_rollouts_for_wandb``, appended to
        the JSONL file when configured, and finally sent in one request with :meth:`deliver` (the single dict
        when one group was given, else the list) unless ``to_api`` is False. ``check_lengths`` drops groups
        with a sequence at or over the trainer's ``max_token_len`` (when known). Returns the number accepted.
        """
        single = not isinstance(scored_data, (list, tuple))
        groups = [scored_data] if single else list(scored_data)
        max_token_len = self.runner.max_token_len
        if check_lengths and max_token_len <= 0 and not self._warned_no_max_len:
            self._warned_no_max_len = True
            logger.warning(
                "[%s] the trainer's max_token_len is unknown: sequence lengths are not checked",
                self.env.env_label,
            )
        enforce_length = check_lengths and max_token_len > 0
        accepted: list[dict[str, Any]] = []
        for raw in groups:
            if raw is not None:
                group = await self._accept(raw, item, enforce_length)
                if group is not None:
                    accepted.append(group)
        self.groups_accepted_total += len(accepted)
        if accepted and to_api:
            stamp_policy_step(accepted, POLICY_STEP.get(), self.runner.curr_step)
            payload: Any = accepted[0] if single and len(accepted) == 1 else accepted
            self.runner.items_sent_this_step += len(accepted)
            await self.env._send_scored_data_to_api(payload)
        return len(accepted)


__all__ = [
    "POLICY_STEP",
    "GroupSender",
    "RolloutStats",
    "describe_item",
    "split_messages_from_tokens",
    "stamp_policy_step",
    "trim_buffer",
]
