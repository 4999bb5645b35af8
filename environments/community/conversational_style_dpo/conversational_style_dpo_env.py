"""Conversational style preference pairs for DPO: a prompt, a chosen reply and a rejected one.

Nothing is generated for training: each pair becomes a group of two sequences, the prompt and the chosen reply
(score +1) and the prompt and the rejected reply (score -1), rendered with the tokenizer's chat template with
only the reply trained. ``atropos-dpo-gen`` turns such groups into ``prompt`` / ``chosen`` / ``rejected``
records for TRL's ``DPOTrainer`` (from a live API or from the ``process`` output), and a GRPO trainer reads the
two scores as the preference. The chosen replies are engaging, empathetic and clear; the rejected ones blunt,
generic or unhelpful.

Evaluate: a judge (``--judge.*`` or ``judge_base_url`` / ``judge_model_name``, else the policy's own servers)
compares each held-out pair in both orders and answers ``\\boxed{A}`` or ``\\boxed{B}`` for the reply with the
better conversational style. ``eval/preference_accuracy`` is the chosen reply's mean share of the readable
verdicts; pairs without one are left out and counted in ``eval/unscored``, unreadable verdicts in
``eval/judge_failures``.

Data: the shipped pairs (``conversational_style_pairs.jsonl``, written for this port; the original's
``dataset_name`` ``synthetic_conversational_style``), or with another ``dataset_name`` that hub set's ``train``
split; seeded 80/20 split, training order shuffled when ``shuffle_dataset``. ``--env.dataset_path`` /
``--env.eval_dataset_path`` read local pairs: ``prompt``, ``chosen``, ``rejected`` (strings).

``python environments/community/conversational_style_dpo/conversational_style_dpo_env.py {serve,process,evaluate}``
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from pydantic import Field

from atroposlib.envs.base import BaseEnv, BaseEnvConfig, ScoredDataGroup
from atroposlib.envs.data_loading import (
    DatasetError,
    check_rows,
    hub_split,
    load_rows,
    read_local_rows,
    seeded_split,
)
from atroposlib.envs.declared_defaults import DeclaredDefaults
from atroposlib.envs.reporting import EvalReporting, IterCheckpoint, mean
from atroposlib.evals.judge import failure_metrics
from atroposlib.utils.tokenize_for_trainer import tokenize_for_trainer

try:
    from environments.community._judging.policy_judge import (
        PolicyJudgeMixin,
        PolicyJudgeSettings,
        preferred_first,
    )
except ModuleNotFoundError:  # run as a script: the repository root is not on the path
    import sys

    sys.path.insert(0, str(Path(__file__).resolve().parents[3]))
    from environments.community._judging.policy_judge import (
        PolicyJudgeMixin,
        PolicyJudgeSettings,
        preferred_first,
    )

PAIRS = Path(__file__).resolve().parent / "conversational_style_pairs.jsonl"
SHIPPED = "synthetic_conversational_style"
CHOSEN_SCORE, REJECTED_SCORE = 1.0, -1.0
JUDGE_PROMPT = (
    "Two assistant replies to the same message follow. Which one has the better conversational style: "
    "engaging, empathetic, clear and helpful rather than blunt, generic or dismissive?\n\n"
    "Message:\n{prompt}\n\n[Response A]\n{a}\n\n[Response B]\n{b}\n\n[END]\n\n"
    "Think it over, then end with \\boxed{{A}} or \\boxed{{B}}."
)


@dataclass(frozen=True)
class PreferencePair:
    """A ``prompt`` (the user's message) with its ``chosen`` and ``rejected`` replies."""

    prompt: str
    chosen: str
    rejected: str


def pairs_from_rows(rows: list[dict[str, Any]], source: str) -> list[PreferencePair]:
    """The pairs of rows with string ``prompt``, ``chosen`` and ``rejected``; :class:`DatasetError` naming
    ``source``, the row and the field for a missing, empty or non-string field, or a pair whose two replies
    are the same text."""
    check_rows(rows, ["prompt", "chosen", "rejected"], source)
    pairs = []
    for index, row in enumerate(rows):
        for field in ("prompt", "chosen", "rejected"):
            if not isinstance(row[field], str) or not row[field].strip():
                raise DatasetError(f"{source}: row {index}: field {field!r} must be a non-empty string")
        if " ".join(row["chosen"].split()) == " ".join(row["rejected"].split()):
            raise DatasetError(f"{source}: row {index}: field 'rejected' is the same text as 'chosen'")
        pairs.append(PreferencePair(row["prompt"].strip(), row["chosen"].strip(), row["rejected"].strip()))
    return pairs


class ConversationalStyleDPOEnvConfig(PolicyJudgeSettings, BaseEnvConfig):
    """BaseEnvConfig plus the original's ``dataset_name`` and ``shuffle_dataset``, local files and the judge of
    the evaluation."""

    group_size: int = Field(2, description="sequences per group: one chosen/rejected pair, so always 2")
    dataset_name: str = Field(
        SHIPPED,
        description=f"'{SHIPPED}' for the shipped pairs, else a hub set of prompt/chosen/rejected rows",
    )
    shuffle_dataset: bool = Field(True, description="shuffle the training pairs (seeded by split_seed)")
    dataset_path: Optional[str] = Field(None, description="local prompt/chosen/rejected rows")
    eval_dataset_path: Optional[str] = Field(
        None, description="local evaluation rows (default: 20% held out)"
    )
    split_seed: int = Field(42, description="seed of the 80/20 split and of the shuffle")
    eval_limit: Optional[int] = Field(None, ge=1, description="evaluate on at most this many pairs")


class ConversationalStyleDPOEnv(PolicyJudgeMixin, DeclaredDefaults, IterCheckpoint, EvalReporting, BaseEnv):
    """Preference pairs sent as two-sequence groups; evaluated by a judge (see the module docstring)."""

    name = "conversational_style_dpo"
    env_config_cls = ConversationalStyleDPOEnvConfig
    config: ConversationalStyleDPOEnvConfig
    #: nothing is sampled for training, so any server type will do
    trains_token_ids = False
    default_model = "gpt2"
    #: the original's config_init values; a group always holds one pair
    default_env_values = dict(
        use_wandb=False, max_num_workers=1, total_steps=100, batch_size=2, max_token_length=512
    )

    def __init__(
        self, config: ConversationalStyleDPOEnvConfig, server_configs, slurm=False, testing=False, **kw
    ):
        super().__init__(config, server_configs, slurm, testing, **kw)
        self.train: list[PreferencePair] = []
        self.test: list[PreferencePair] = []

    def _pairs(self, path: Optional[str]) -> list[PreferencePair]:
        name = self.config.dataset_name
        if path:
            return pairs_from_rows(read_local_rows(path), path)
        if name == SHIPPED:
            return pairs_from_rows(read_local_rows(PAIRS), str(PAIRS))
        return pairs_from_rows(load_rows(None, hub_split(name, "train"), [], name), name)

    async def setup(self) -> None:
        cfg = self.config
        if cfg.group_size != 2:
            raise DatasetError(
                f"group_size: a group is one chosen/rejected pair, so it must be 2 (got {cfg.group_size})"
            )
        pairs = self._pairs(cfg.dataset_path)
        if cfg.eval_dataset_path:
            self.train, self.test = pairs, self._pairs(cfg.eval_dataset_path)
        else:
            self.train, self.test = seeded_split(pairs, cfg.split_seed)
        if not cfg.shuffle_dataset:  # the file's order
            order = {pair: index for index, pair in enumerate(pairs)}
            self.train.sort(key=lambda pair: order.get(pair, len(order)))

    async def get_next_item(self) -> PreferencePair:
        return self.next_in_turn(self.train)

    def pair_group(self, pair: PreferencePair) -> ScoredDataGroup:
        """The group of ``pair``: the chosen and the rejected chat, only the reply trained, scored +1 / -1."""
        group = ScoredDataGroup(tokens=[], masks=[], scores=[CHOSEN_SCORE, REJECTED_SCORE], messages=[])
        for reply in (pair.chosen, pair.rejected):
            chat = [{"role": "user", "content": pair.prompt}, {"role": "assistant", "content": reply}]
            out = tokenize_for_trainer(self.tokenizer, chat)
            group["tokens"].append(out["tokens"])
            group["masks"].append(out["masks"])
            group["messages"].append(chat)
        return group

    async def collect_trajectories(self, item: PreferencePair) -> tuple[ScoredDataGroup, list]:
        return self.pair_group(item), []

    # -- evaluation -------------------------------------------------------------------------------------
    def eval_items(self) -> list[PreferencePair]:
        return self.test

    def judge_messages(self, pair: PreferencePair):
        """The judge's chat builder for ``pair``: ``messages_for(reply_a, reply_b)``."""
        return lambda a, b: [{"role": "user", "content": JUDGE_PROMPT.format(prompt=pair.prompt, a=a, b=b)}]

    async def _judge_pair(self, pair: PreferencePair, sem: asyncio.Semaphore) -> dict[str, Any]:
        async with sem:
            comparison = await self.judge.compare(
                self.judge_messages(pair), pair.chosen, pair.rejected, preferred_first
            )
        return {
            "prompt": pair.prompt,
            "chosen": pair.chosen,
            "rejected": pair.rejected,
            **comparison.record(),
        }

    async def evaluate(self, *args: Any, **kwargs: Any) -> None:
        items = self.limited_eval_items()
        if not items:
            return
        samples, start, end = await self.run_evaluation(self._judge_pair, items)
        scored = [s["judge_score"] for s in samples if s["judge_score"] is not None]
        metrics = {
            "eval/preference_accuracy": mean(scored) if scored else 0.0,
            "eval/unscored": float(len(samples) - len(scored)),
            **{
                f"eval/{key}": value
                for key, value in failure_metrics(
                    [s["judge_failures"] for s in samples], [2] * len(samples)
                ).items()
            },
        }
        summary = (
            f"{self.name} evaluation: preference_accuracy={metrics['eval/preference_accuracy']:.4f} "
            f"on {len(scored)} of {len(samples)} pairs"
        )
        await self.report_evaluation(
            metrics, samples, start, end, {"judge_temperature": self.judge.temperature}, summary
        )


if __name__ == "__main__":
    ConversationalStyleDPOEnv.cli()
