"""SFT through the trajectory API: rows of a supervised data set sent as groups of one, for mixed SFT/RL runs.

Nothing is generated: each row is tokenized and sent as a group of one sequence with score 1, advantage 1 on
every token and the overrides ``{"sft": True}`` (a GRPO trainer without a KL term then takes a plain
likelihood step on its trained tokens; other trainers can read the override). Run it beside RL environments
against the same ``run-api``: whenever the trainer reaches a new step (every ``add_every_n_steps`` steps, and
once at start), it tops the API's queue up to ``max_batches_offpolicy`` batches, at most ``max_sft_per_step``
rows at a time (``-1``: no cap). Its ``inference_weight`` is 0: it generates nothing, so it takes no share of the
inference servers (the original's -1 meant the same; this API accepts weights >= 0 only).

Row formats (``--env.dataset_format``), the text in ``dataset_column_name``:

* ``completion`` - plain text, every token trained;
* ``prefix_completion`` - ``prefix_column_name`` + the text, the prefix masked;
* ``oai_format`` - a list of ``role`` / ``content`` messages, rendered with the tokenizer's chat template;
* ``sharegpt_format`` - a list of ``from`` / ``value`` turns (``human``, ``gpt``, ``system``), likewise.

Chats train every assistant turn (``mask_everything_but_assistant_answer``, default), only the last message
(``mask_everything_but_last_step``, which wins when both are set) or every token (both false).

Data: ``AlignmentLab-AI/open-instruct-sharegpt`` (train, ``conversations`` in ShareGPT form) by default, as the
original; ``--env.dataset_name`` for another hub set, ``--env.dataset_path`` for a local file in the same form.

``python environments/sft_loader_server.py serve --env.rollout_server_url http://localhost:8000``
"""

from __future__ import annotations

import asyncio
import logging
import random
from enum import Enum
from typing import Any, Optional

from pydantic import Field

from atroposlib.envs.base import BaseEnv, BaseEnvConfig, ScoredDataGroup
from atroposlib.envs.config_defaults import LocalServerDefaults
from atroposlib.envs.data_loading import DatasetError, hub_split, load_rows
from atroposlib.utils.tokenize_for_trainer import MASKED, tokenize_for_trainer

logger = logging.getLogger(__name__)

SHAREGPT_ROLES = {"human": "user", "gpt": "assistant", "system": "system"}


class DatasetFormat(Enum):
    COMPLETION = "completion"
    PREFIXED_COMPLETION = "prefix_completion"
    OAI_FORMAT = "oai_format"
    SHAREGPT_FORMAT = "sharegpt_format"


class SFTConfig(BaseEnvConfig):
    """BaseEnvConfig plus the original's data, masking and pacing settings."""

    dataset_name: str = Field("gsm8k", description="hub set to train on (train split)")
    dataset_path: Optional[str] = Field(None, description="local file instead of dataset_name")
    dataset_format: DatasetFormat = Field(
        DatasetFormat.COMPLETION, description="how a row is read (see above)"
    )
    dataset_column_name: str = Field("text", description="column holding the text or the chat")
    prefix_column_name: Optional[str] = Field(
        None, description="prefix_completion: column of the masked prefix"
    )
    mask_everything_but_assistant_answer: bool = Field(True, description="chats: train assistant turns only")
    mask_everything_but_last_step: bool = Field(False, description="chats: train the last message only")
    max_sft_per_step: int = Field(-1, ge=-1, description="rows sent per trainer step at most (-1: no cap)")
    add_every_n_steps: int = Field(1, ge=1, description="send rows only on steps divisible by this")


def row_messages(row: dict[str, Any], config: SFTConfig, source: str, index: int) -> list[dict[str, str]]:
    """The chat of a row in ``oai_format`` or ``sharegpt_format``; a malformed one is a :class:`DatasetError`
    naming the source, row and field."""
    column = config.dataset_column_name
    turns = row[column]
    where = f"{source}: row {index}: field {column!r}"
    if not isinstance(turns, list) or not turns:
        raise DatasetError(f"{where}: not a non-empty list of messages")
    messages = []
    for turn in turns:
        if config.dataset_format == DatasetFormat.SHAREGPT_FORMAT:
            role = SHAREGPT_ROLES.get(turn.get("from")) if isinstance(turn, dict) else None
            content = turn.get("value") if isinstance(turn, dict) else None
            if role is None or content is None:
                raise DatasetError(
                    f"{where}: each turn needs 'from' ({', '.join(SHAREGPT_ROLES)}) and 'value'"
                )
        else:
            role = turn.get("role") if isinstance(turn, dict) else None
            content = turn.get("content") if isinstance(turn, dict) else None
            if not role or content is None:
                raise DatasetError(f"{where}: each message needs 'role' and 'content'")
        messages.append({"role": role, "content": str(content)})
    return messages


class SFTEnv(LocalServerDefaults, BaseEnv):
    """Supervised rows pushed to the API as single-sequence groups (see the module docstring)."""

    name = "sft_loader"
    env_config_cls = SFTConfig
    config: SFTConfig
    #: every group holds one sequence: there is no group to compare it with
    single_sample_scoring = True
    #: nothing is sampled, so any server type (or none) will do
    trains_token_ids = False

    def __init__(self, config: SFTConfig, server_configs, slurm=False, testing=False):
        super().__init__(config, server_configs, slurm, testing)
        self.train: list[Any] = []
        self.idx = 0
        self._sft_step: Optional[int] = None

    @classmethod
    def default_env_config(cls) -> SFTConfig:
        return SFTConfig(
            group_size=1,
            total_steps=1000,
            batch_size=12,
            steps_per_eval=100,
            max_token_length=2048,
            ensure_scores_are_not_same=False,
            wandb_name="sft",
            dataset_name="AlignmentLab-AI/open-instruct-sharegpt",
            dataset_format=DatasetFormat.SHAREGPT_FORMAT,
            dataset_column_name="conversations",
            inference_weight=0.0,
            max_sft_per_step=8,
        )

    # -- data -------------------------------------------------------------------------------------------
    async def setup(self) -> None:
        cfg = self.config
        required = [cfg.dataset_column_name]
        if cfg.dataset_format == DatasetFormat.PREFIXED_COMPLETION:
            if not cfg.prefix_column_name:
                raise DatasetError("dataset_format prefix_completion needs --env.prefix_column_name")
            required.append(cfg.prefix_column_name)
        rows = load_rows(cfg.dataset_path, hub_split(cfg.dataset_name, "train"), required, cfg.dataset_name)
        source = cfg.dataset_path or cfg.dataset_name
        if cfg.dataset_format in (DatasetFormat.OAI_FORMAT, DatasetFormat.SHAREGPT_FORMAT):
            for index, row in enumerate(rows):
                row_messages(row, cfg, source, index)  # every row checked before anything is sent
        random.Random(42).shuffle(rows)
        self.train = rows

    async def get_next_item(self) -> dict[str, Any]:
        item = self.train[self.idx % len(self.train)]
        self.idx += 1
        return item

    # -- formatting -------------------------------------------------------------------------------------
    def tokens_and_masks(self, item: dict[str, Any]) -> tuple[list[int], list[int], Any]:
        """``(tokens, masks, messages)`` of one row, as the module docstring describes."""
        cfg = self.config
        text = item[cfg.dataset_column_name]
        if cfg.dataset_format == DatasetFormat.COMPLETION:
            tokens = list(self.tokenizer.encode(str(text)))
            return tokens, list(tokens), str(text)
        if cfg.dataset_format == DatasetFormat.PREFIXED_COMPLETION:
            prefix = str(item[cfg.prefix_column_name])
            tokens = list(self.tokenizer.encode(prefix + str(text)))
            prefix_tokens = list(self.tokenizer.encode(prefix))
            if prefix_tokens and prefix_tokens[-1] == self.tokenizer.eos_token_id:
                prefix_tokens = prefix_tokens[:-1]
            cut = min(len(prefix_tokens), len(tokens))
            return tokens, [MASKED] * cut + tokens[cut:], prefix + str(text)
        messages = row_messages(item, cfg, "row", self.idx)
        if cfg.mask_everything_but_last_step:
            out = tokenize_for_trainer(self.tokenizer, messages)
        elif cfg.mask_everything_but_assistant_answer:
            out = tokenize_for_trainer(self.tokenizer, messages, train_on_all_assistant_turns=True)
        else:
            out = tokenize_for_trainer(self.tokenizer, messages)
            out["masks"] = list(out["tokens"])
        return out["tokens"], out["masks"], messages

    async def format_item(self, item: dict[str, Any]) -> ScoredDataGroup:
        """The group of one sequence for a row: score 1, advantage 1 per token, the ``sft`` override."""
        tokens, masks, messages = self.tokens_and_masks(item)
        group = ScoredDataGroup(
            tokens=[tokens],
            masks=[masks],
            scores=[1.0],
            advantages=[[1.0] * len(tokens)],
            overrides=[{"sft": True}],
            group_overrides={"sft": True, "group_size": 1},
        )
        if isinstance(messages, list):
            group["messages"] = [messages]
        return group

    async def collect_trajectories(self, item: dict[str, Any]) -> tuple[ScoredDataGroup, list]:
        return await self.format_item(item), []

    # -- serving: rows sent on trainer steps, no rollout workers ------------------------------------------
    def rows_to_send(self) -> int:
        """Rows that fill the API's queue up to ``max_batches_offpolicy`` batches, capped by
        ``max_sft_per_step``."""
        queue = int((self.status_dict or {}).get("queue_size", 0))
        batch = max(1, self.derived_batch_size)
        wanted = (
            self.config.max_batches_offpolicy * batch - queue
            if self.config.max_batches_offpolicy > 0
            else batch
        )
        if self.config.max_sft_per_step != -1:
            wanted = min(wanted, self.config.max_sft_per_step)
        return max(0, wanted)

    async def send_rows(self, count: int) -> None:
        groups = [await self.format_item(await self.get_next_item()) for _ in range(count)]
        self.items_sent_this_step += count
        await asyncio.gather(*(self.handle_send_to_api(group, None) for group in groups))

    async def env_step_checks(self) -> None:
        current = (self.status_dict or {}).get("current_step")
        if current is not None and current != self._sft_step:
            self._sft_step = current
            if current % self.config.add_every_n_steps == 0:
                count = self.rows_to_send()
                if count:
                    logger.info("[%s] step %s: sending %d SFT rows", self.env_label, current, count)
                    await self.send_rows(count)
        await super().env_step_checks()

    async def add_train_workers(self) -> None:
        """No rollouts: rows are sent by :meth:`env_step_checks`."""

    async def evaluate(self, *args: Any, **kwargs: Any) -> None:
        logger.info("[%s] an SFT loader has nothing to evaluate", self.env_label)

    async def wandb_log(self, wandb_metrics: Optional[dict] = None) -> None:
        metrics = dict(wandb_metrics or {})
        metrics["train/idx"] = self.idx
        metrics["train/epoch"] = self.idx // max(1, len(self.train))
        await super().wandb_log(metrics)


if __name__ == "__main__":
    SFTEnv.cli()
