"""Six-seat no-limit hold'em: decide a hand situation's action as the winning player did.

The prompt is the data set's PokerGPT situation (seats, stacks, cards, the actions so far, the pot and the
legal actions with the amounts to choose from). The reply may reason in ``<think>...</think>``; its last
line is the decision: ``fold``, ``check``, ``call``, ``bet X``, ``raise X``, ``re-raise X`` or ``all-in``
(spellings and hedges: ``actions.py``).

Reward (``reward_fns/``, 0.0 to 1.0): ``action_match_weight`` (0.6) x the action match (1.0 for the winning
player's action, for a sized one 0.7 plus 0.3 x the ratio of the amounts; 0.5 for another action of the same
family, aggressive or passive) + ``bet_sizing_weight`` (0.4) x the sizing (for a sized winning action: 1.0
falling linearly to 0.0 at 50 % deviation of a bet or raise; for one without an amount: 1.0 for the same
action), over the weights' sum. A reply without exactly one decision, a hedge or a malformed one scores 0.0.
A reply counts as correct at ``correctness_threshold`` (0.9) or more. Logged: ``train/avg_score_<stage>``,
``train/count_<stage>``, ``train/action_<action>_pct``; evaluate adds ``eval/accuracy_<stage>`` and
``eval/avg_score_<stage>``.

Data: ``datasets.load_dataset("yoniebans/6max-nlh-poker")``, ``train`` (shuffled with ``shuffle_seed``) and
``eval_sample_size`` (200) rows of ``test`` drawn with the seed. ``--env.dataset_path`` /
``--env.eval_dataset_path`` read local files in the hub set's schema (``pokergpt_prompt``, ``game_stage``,
``formatted_winning_action`` or ``winning_action``; ``hand_id``, ``bb_won`` optional); a local training
file without an evaluation file gives a tenth of its rows (at least one) to evaluation.

``python environments/community/poker_holdem/poker_env.py {serve,process,evaluate} --openai.base_url ...``
"""

from __future__ import annotations

import asyncio
import random
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

from pydantic import Field

from atroposlib.envs.data_loading import DatasetError, hub_split, load_rows
from atroposlib.envs.declared_defaults import DeclaredDefaults
from atroposlib.envs.reply_fields import ReplyFields
from atroposlib.envs.reporting import mean
from atroposlib.envs.single_turn import SingleTurnEnv, SingleTurnEnvConfig

try:
    from environments.community.poker_holdem import actions, reward_fns
except ModuleNotFoundError:  # run as a script: this folder is on the path
    import actions
    import reward_fns

HUB_DATASET = "yoniebans/6max-nlh-poker"
STAGES = ("PREFLOP", "FLOP", "TURN", "RIVER")
SYSTEM_PROMPT = (
    "You play six-seat no-limit Texas hold'em. You may think inside <think> </think> tags first. End your "
    "reply with your decision alone on the last line: fold, check, call, bet X, raise X, re-raise X or "
    "all-in, where X is one of the amounts offered (for example: raise 4.00)."
)


@dataclass(frozen=True)
class PokerItem:
    """One decision: the situation prompt, the winning player's action, the stage and the hand."""

    situation: str
    winner_action: str
    stage: str
    hand_id: str
    bb_won: float


def items_from_rows(rows: Sequence[dict[str, Any]], source: str) -> list[PokerItem]:
    """Items of hub-schema rows; :class:`DatasetError` naming ``source``, the row and the field."""
    items = []
    for index, row in enumerate(rows):
        where = f"{source}: row {index}"
        target = row.get("formatted_winning_action") or row.get("winning_action")
        field = "formatted_winning_action" if row.get("formatted_winning_action") else "winning_action"
        if not target:
            raise DatasetError(f"{where}: missing field 'winning_action'")
        if actions.parse_action(str(target)) is None:
            raise DatasetError(f"{where}: field '{field}' is {str(target)!r}, not a poker action")
        stage = str(row["game_stage"]).strip().upper()
        if stage not in STAGES:
            raise DatasetError(f"{where}: field 'game_stage' is {stage!r}, not one of {', '.join(STAGES)}")
        try:
            bb_won = float(row.get("bb_won") or 0.0)
        except (TypeError, ValueError):
            raise DatasetError(f"{where}: field 'bb_won' is not a number") from None
        hand_id = str(row.get("hand_id") or index)
        items.append(PokerItem(str(row["pokergpt_prompt"]), str(target), stage, hand_id, bb_won))
    return items


class PokerEnvConfig(SingleTurnEnvConfig):
    """SingleTurnEnvConfig plus the data, the reward weights and the evaluation settings."""

    temperature: float = Field(0.7, ge=0.0, description="sampling temperature of training replies")
    max_tokens: Optional[int] = Field(50, ge=1, description="generation budget of a training reply in tokens")
    eval_temperature: float = Field(0.2, ge=0.0, description="sampling temperature of evaluation replies")
    eval_max_tokens: int = Field(50, ge=1, description="generation budget of an evaluation reply in tokens")
    eval_sample_size: int = Field(200, ge=1, description="evaluation rows drawn (seeded) from the test split")
    correctness_threshold: float = Field(
        0.9, description="an evaluation reply scoring at least this is correct"
    )
    action_match_weight: float = Field(0.6, ge=0.0, description="weight of the action match in the reward")
    bet_sizing_weight: float = Field(0.4, ge=0.0, description="weight of the bet sizing in the reward")
    dataset_path: Optional[str] = Field(None, description="local training rows in the hub set's schema")
    eval_dataset_path: Optional[str] = Field(
        None, description="local evaluation rows in the hub set's schema"
    )
    shuffle_seed: int = Field(0, description="seed of the training order and the evaluation sample")


class PokerEnv(DeclaredDefaults, ReplyFields, SingleTurnEnv):
    """Rewards hold'em decisions for matching the winning player's action (see the module docstring)."""

    name = "poker_env"
    env_config_cls = PokerEnvConfig
    config: PokerEnvConfig
    default_model = "Qwen/Qwen3-1.7B"
    default_env_values = dict(
        group_size=8, total_steps=1000, batch_size=12, steps_per_eval=100, max_token_length=256
    )
    default_server_port = 9002

    def __init__(self, config: PokerEnvConfig, server_configs, slurm=False, testing=False):
        super().__init__(config, server_configs, slurm, testing)
        self.correct_threshold = config.correctness_threshold
        self.reward_function = reward_fns.PokerCombinedReward(
            config.action_match_weight, config.bet_sizing_weight
        )
        self.stage_scores: dict[str, list[float]] = defaultdict(list)
        self.actions: Counter[str] = Counter()

    # -- data -------------------------------------------------------------------------------------------
    def _items(self, path: Optional[str], split: str) -> list[PokerItem]:
        rows = load_rows(path, hub_split(HUB_DATASET, split), ["pokergpt_prompt", "game_stage"], HUB_DATASET)
        return items_from_rows(rows, str(path or f"{HUB_DATASET} {split}"))

    async def setup(self) -> None:
        cfg = self.config
        rng = random.Random(cfg.shuffle_seed)
        self.train = self._items(cfg.dataset_path, "train")
        rng.shuffle(self.train)
        if cfg.eval_dataset_path or not cfg.dataset_path:
            test = self._items(cfg.eval_dataset_path, "test")
        else:
            held = max(1, len(self.train) // 10)
            test, self.train = self.train[:held], self.train[held:] or self.train
        self.test = rng.sample(test, min(cfg.eval_sample_size, len(test)))

    # -- task -------------------------------------------------------------------------------------------
    def prompt_messages(self, item: PokerItem) -> list[dict[str, str]]:
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": item.situation}]

    def score_replies(self, replies: Sequence[str], item: PokerItem) -> list[float]:
        scores = self.reward_function(list(replies), winner_action=item.winner_action)
        if len(replies) > 1:  # a training group (evaluation scores one reply at a time)
            self.stage_scores[item.stage].extend(scores)
            for reply in replies:
                decision = actions.reply_action(reply)
                self.actions[decision.kind if decision else "unknown"] += 1
        return scores

    async def sample_eval_reply(self, item: PokerItem, sem: asyncio.Semaphore) -> tuple[list[dict], str]:
        """One evaluation reply within ``eval_max_tokens``."""
        async with sem:
            messages, replies = await self._sample(
                self.server,
                item,
                1,
                max_tokens=self.config.eval_max_tokens,
                temperature=self.config.eval_temperature,
                split="eval",
            )
        return messages, replies[0] if replies else ""

    def eval_sample_fields(self, item: PokerItem) -> dict[str, Any]:
        return {"hand_id": item.hand_id, "stage": item.stage, "winner_action": item.winner_action}

    def reply_fields(self, reply: str, item: PokerItem) -> dict[str, Any]:
        decision = actions.reply_action(reply)
        return {"decision": str(decision) if decision else None}

    def extra_eval_metrics(self, samples: Sequence[dict[str, Any]]) -> dict[str, float]:
        metrics = {}
        for stage in STAGES:
            ours = [s for s in samples if s["stage"] == stage]
            if ours:
                metrics[f"eval/accuracy_{stage.lower()}"] = mean([1.0 if s["correct"] else 0.0 for s in ours])
                metrics[f"eval/avg_score_{stage.lower()}"] = mean([s["score"] for s in ours])
        return metrics

    async def wandb_log(self, wandb_metrics: Optional[dict] = None) -> None:
        wandb_metrics = dict(wandb_metrics or {})
        for stage, scores in self.stage_scores.items():
            wandb_metrics[f"train/avg_score_{stage.lower()}"] = mean(scores)
            wandb_metrics[f"train/count_{stage.lower()}"] = float(len(scores))
        total = sum(self.actions.values())
        if total:
            for action in (*actions.ACTION_TYPES, "unknown"):
                wandb_metrics[f"train/action_{action}_pct"] = 100.0 * self.actions[action] / total
        self.stage_scores = defaultdict(list)
        self.actions = Counter()
        await super().wandb_log(wandb_metrics)


if __name__ == "__main__":
    PokerEnv.cli()
