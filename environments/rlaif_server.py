"""RL from AI feedback: a judge model compares the group's replies pairwise; preferences become scores.

Data: by default ``datasets.load_dataset("allenai/WildChat", split="train")`` with ``eval_size`` rows
(shuffled with seed 42) held out for evaluation. ``--env.dataset_path FILE`` (and
``--env.eval_dataset_path``) reads a local file in WildChat's schema: ``conversation``, a list of
``{"role": "user" | "assistant" | "system", "content": ...}`` turns (other keys are ignored). A local
training file without an evaluation file is used for both. The prompt is the conversation up to its last
user turn; the assistant turn after it, when there is one, is the reference reply used by ``evaluate``.

Rollouts: ``group_size`` replies per prompt through ManagedServer (token ids and logprobs from the
server; only the reply is trained).

Judging: every pair of replies is shown to the judge in both orders (``A`` then ``B``, then swapped), to
cancel position bias, ``judgements_per_order`` times each. The judge is told the rubric
``--env.judge_prompt`` (the personality or quality to reward) and answers ``\\boxed{A}`` or
``\\boxed{B}`` after its reasoning. Each verdict gives the preferred reply 1 point; an answer that names
neither (no box, both letters, anything else) is a tie worth 0.5 to each and is logged. A reply's score
is its share of points over all its comparisons, minus the group's mean share (centred). A reply cut off
at its token budget is not judged and scores -1.

The judge is any OpenAI-compatible server: ``--judge.base_url``, ``--judge.model_name``,
``--judge.api_key``, ``--judge.server_type`` ... (or a ``judge:`` section in the ``--config`` YAML); by
default the policy's own server. Judge requests are plain chat completions, outside the ManagedServer
context, so they are never part of the trained tokens.

Evaluation: on the held-out rows that have a reference reply, the policy's reply (at
``eval_temperature``) is judged against the reference in both orders; ``eval/win_rate`` is the
policy's share of points.

``python environments/rlaif_server.py {serve,process,evaluate} --openai.base_url ... [--judge.base_url ...]``
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import random
import re
from dataclasses import dataclass
from typing import Any, Optional

from pydantic import Field

from atroposlib.envs.base import BaseEnv, BaseEnvConfig, EvalHandlingEnum, ScoredDataGroup
from atroposlib.envs.config_defaults import LocalServerDefaults
from atroposlib.envs.data_loading import DatasetError, hub_split, load_rows
from atroposlib.envs.reporting import EvalReporting, IterCheckpoint
from atroposlib.envs.server_handling.server_manager import ServerManager
from atroposlib.utils.replies import final_boxed_answer

logger = logging.getLogger(__name__)

DEFAULT_DATASET = "allenai/WildChat"

DEFAULT_JUDGE_PROMPT = (
    "Reward the response whose voice is warm, curious and a little playful - a companion who enjoys the "
    "conversation - while still doing what the user asked, accurately and without padding. Penalise "
    "responses that are cold, evasive, preachy or needlessly long."
)
DEFAULT_JUDGE_SYSTEM_PROMPT = (
    "You compare two candidate responses to a conversation for a reinforcement-learning run. You may think "
    "step by step inside <think> </think> tags first. Then give your verdict as \\boxed{A} or \\boxed{B}: "
    "exactly one letter in one box. Any other final answer is not counted."
)
JUDGE_USER_TEMPLATE = """[Conversation]
{conversation}

[Response A]
{response_a}

[Response B]
{response_b}

[End of responses]

The trainers want to reward responses that match this description:
{judge_prompt}

Which response matches it better, even if only slightly? Think it through, then answer \\boxed{{A}} or \\boxed{{B}}."""


@dataclass(frozen=True)
class ChatItem:
    """A prompt (the conversation up to its last user turn) and the reference reply after it, if any."""

    messages: tuple[dict[str, str], ...]
    reference: Optional[str]


def row_to_item(row: dict[str, Any], index: int, source: str) -> ChatItem:
    """The prompt and reference reply of one WildChat row.

    Raises :class:`DatasetError` (one line naming ``source`` and the row) when ``conversation`` is not a
    list of turns with string ``role`` and ``content``, or holds no user turn.
    """
    conversation = row["conversation"]
    if not isinstance(conversation, list):
        raise DatasetError(f"{source}: row {index}: field 'conversation' is not a list of turns")
    turns = []
    for position, turn in enumerate(conversation):
        for key in ("role", "content"):
            if not isinstance(turn, dict) or not isinstance(turn.get(key), str):
                raise DatasetError(f"{source}: row {index}: conversation[{position}] lacks {key!r}")
        turns.append({"role": turn["role"], "content": turn["content"]})
    last_user = max((i for i, t in enumerate(turns) if t["role"] == "user"), default=None)
    if last_user is None:
        raise DatasetError(f"{source}: row {index}: 'conversation' has no user turn")
    after = turns[last_user + 1] if last_user + 1 < len(turns) else None
    reference = after["content"] if after is not None and after["role"] == "assistant" else None
    return ChatItem(messages=tuple(turns[: last_user + 1]), reference=reference)


def parse_verdict(judgement: str) -> Optional[str]:
    """``"A"`` or ``"B"`` from a judge's answer (its one boxed letter after the reasoning), else None."""
    answer = final_boxed_answer(judgement or "")
    if answer is None:
        return None
    letter = re.sub(r"^(response|option)\s+", "", answer.strip().strip(".*:() "), flags=re.IGNORECASE)
    letter = letter.strip().upper()
    return letter if letter in ("A", "B") else None


def preference_scores(n: int, verdicts: list[tuple[int, int, Optional[str]]]) -> list[float]:
    """Centred win shares of ``n`` replies from ``(a, b, verdict)`` judgements (reply ``a`` shown as A).

    A verdict gives the preferred reply 1 point, ``None`` (a tie) 0.5 to each; a reply's share is its
    points over its comparisons; the group's mean share is subtracted. Replies never compared get the
    mean (0).
    """
    points = [0.0] * n
    counts = [0] * n
    for a, b, verdict in verdicts:
        counts[a] += 1
        counts[b] += 1
        if verdict == "A":
            points[a] += 1.0
        elif verdict == "B":
            points[b] += 1.0
        else:
            points[a] += 0.5
            points[b] += 0.5
    compared = [i for i in range(n) if counts[i]]
    if not compared:
        return [0.0] * n
    shares = {i: points[i] / counts[i] for i in compared}
    mean = sum(shares.values()) / len(shares)
    return [shares[i] - mean if i in shares else 0.0 for i in range(n)]


class RLAIFEnvConfig(BaseEnvConfig):
    """BaseEnvConfig plus the data, the judging and the sampling settings."""

    group_size: int = 2
    dataset_name: str = Field(DEFAULT_DATASET, description="hub data set of WildChat-style conversations")
    dataset_split: str = Field("train", description="hub split to read")
    eval_size: int = Field(100, ge=1, description="hub rows held out for evaluation")
    dataset_path: Optional[str] = Field(
        None, description="local file (JSONL, JSON, Parquet or CSV) with a 'conversation' field"
    )
    eval_dataset_path: Optional[str] = Field(
        None, description="local file for evaluation (default: dataset_path when that is set)"
    )
    judge_prompt: str = Field(
        DEFAULT_JUDGE_PROMPT, description="what the judge rewards (personality or rubric)"
    )
    judge_system_prompt: str = Field(
        DEFAULT_JUDGE_SYSTEM_PROMPT,
        description="the judge's system prompt (must ask for \\boxed{A} or \\boxed{B})",
    )
    judgements_per_order: int = Field(1, ge=1, description="judge samples per pair and order")
    judge_max_tokens: int = Field(4096, ge=1, description="token budget of one judgement")
    judge_temperature: float = Field(0.7, ge=0.0, description="sampling temperature of the judge")
    temperature: float = Field(1.0, ge=0.0, description="sampling temperature of the policy's replies")
    eval_temperature: float = Field(0.0, ge=0.0, description="sampling temperature of evaluation replies")
    max_tokens: Optional[int] = Field(
        None, ge=1, description="token budget of a reply (default: a third of max_token_length)"
    )
    max_prompt_tokens: Optional[int] = Field(
        None,
        ge=1,
        description="skip prompts longer than this many tokens (default: half of max_token_length)",
    )
    eval_limit: Optional[int] = Field(None, ge=1, description="evaluate on at most this many items")


class RLAIFEnv(LocalServerDefaults, IterCheckpoint, EvalReporting, BaseEnv):
    """Pairwise AI-judged preferences as rewards (see the module docstring)."""

    name = "rlaif"
    env_config_cls = RLAIFEnvConfig
    config: RLAIFEnvConfig
    default_server_port = 9004
    default_server_settings = {"server_type": "vllm"}
    #: The CLI's extra-server namespace: ``--judge.*`` flags and the ``judge:`` YAML section.
    teacher_namespace = "judge"

    def __init__(
        self,
        config: RLAIFEnvConfig,
        server_configs,
        slurm: bool = False,
        testing: bool = False,
        *,
        judge_server_configs: Any = None,
        teacher_server_configs: Any = None,
    ):
        """``judge_server_configs`` (the CLI passes ``--judge.*`` as ``teacher_server_configs``): the judge's
        server(s); ``None`` judges with the policy's own servers."""
        super().__init__(config, server_configs, slurm, testing)
        judge = judge_server_configs if judge_server_configs is not None else teacher_server_configs
        self.judge = ServerManager(judge, slurm=False, testing=testing) if judge is not None else self.server
        self.train: list[ChatItem] = []
        self.test: list[ChatItem] = []
        self.score_buffer: list[float] = []
        self.unreadable_buffer: list[float] = []
        self.judgements: list[tuple[str, str, str]] = []

    async def _close_inference_clients(self) -> None:
        """Close a separate judge's connections too (after ``serve``, ``process`` and ``evaluate``)."""
        await super()._close_inference_clients()
        if self.judge is not self.server:
            await self.judge.close()

    @classmethod
    def default_env_config(cls) -> RLAIFEnvConfig:
        return RLAIFEnvConfig(
            max_num_workers=512 * 3 * 4,
            batch_size=1024,
            steps_per_eval=10000,
            max_token_length=8192,
            eval_handling=EvalHandlingEnum.LIMIT_TRAIN,
            eval_limit_ratio=0.1,
        )

    @classmethod
    def teacher_config_init(cls) -> None:
        """No judge server by default: the policy's own servers judge."""
        return None

    # -- data -------------------------------------------------------------------------------------------
    def _items(self, rows: list[dict[str, Any]], source: str) -> list[ChatItem]:
        return [row_to_item(row, i, source) for i, row in enumerate(rows)]

    async def setup(self) -> None:
        cfg = self.config
        rows = load_rows(
            cfg.dataset_path,
            hub_split(cfg.dataset_name, cfg.dataset_split),
            ["conversation"],
            cfg.dataset_name,
        )
        items = self._items(rows, cfg.dataset_path or cfg.dataset_name)
        if cfg.dataset_path or cfg.eval_dataset_path:
            eval_path = cfg.eval_dataset_path or cfg.dataset_path
            if eval_path == cfg.dataset_path:
                test = list(items)
            else:
                eval_rows = load_rows(
                    eval_path, hub_split(cfg.dataset_name, cfg.dataset_split), ["conversation"], eval_path
                )
                test = self._items(eval_rows, eval_path)
            random.Random(42).shuffle(items)
            self.train, self.test = items, test
        else:
            random.Random(42).shuffle(items)
            if len(items) <= cfg.eval_size:
                raise DatasetError(
                    f"{cfg.dataset_name}: {len(items)} rows, too few to hold out eval_size={cfg.eval_size}"
                )
            self.train, self.test = items[cfg.eval_size :], items[: cfg.eval_size]

    async def get_next_item(self) -> ChatItem:
        return self.next_in_turn(self.train)

    # -- judging ----------------------------------------------------------------------------------------
    @property
    def reply_budget(self) -> int:
        return self.config.max_tokens or max(1, self.config.max_token_length // 3)

    def judge_messages(
        self, conversation: tuple[dict[str, str], ...], reply_a: str, reply_b: str
    ) -> list[dict]:
        """The judge's chat for one ordered pair."""
        text = "\n".join(f"{m['role']}: {m['content']}" for m in conversation)
        user = JUDGE_USER_TEMPLATE.format(
            conversation=text, response_a=reply_a, response_b=reply_b, judge_prompt=self.config.judge_prompt
        )
        return [
            {"role": "system", "content": self.config.judge_system_prompt},
            {"role": "user", "content": user},
        ]

    async def judge_pair(
        self, conversation: tuple[dict[str, str], ...], reply_a: str, reply_b: str, split: str = "train"
    ) -> list[Optional[str]]:
        """Verdicts (``"A"``, ``"B"`` or ``None`` for a tie) for ``reply_a`` shown first."""
        completion = await self.judge.chat_completion(
            messages=self.judge_messages(conversation, reply_a, reply_b),
            n=self.config.judgements_per_order,
            max_tokens=self.config.judge_max_tokens,
            temperature=self.config.judge_temperature,
            split=split,
        )
        verdicts = []
        for choice in completion.choices:
            text = choice.message.content or ""
            verdict = parse_verdict(text)
            if verdict is None:
                logger.warning(
                    "rlaif: unreadable judgement counted as a tie: %r", " ".join(text.split())[:200]
                )
            self.unreadable_buffer.append(float(verdict is None))
            verdicts.append(verdict)
            if len(self.judgements) < 64:
                self.judgements.append((reply_a, reply_b, text))
        return verdicts

    async def judge_group(self, item: ChatItem, replies: list[str]) -> list[float]:
        """Centred preference scores of ``replies`` (every pair judged in both orders)."""
        pairs = list(itertools.combinations(range(len(replies)), 2))
        jobs = []
        for a, b in pairs:
            jobs.append(self.judge_pair(item.messages, replies[a], replies[b]))
            jobs.append(self.judge_pair(item.messages, replies[b], replies[a]))
        results = await asyncio.gather(*jobs)
        verdicts = []
        for (a, b), forward, backward in zip(pairs, results[0::2], results[1::2], strict=True):
            verdicts.extend((a, b, v) for v in forward)
            verdicts.extend((b, a, v) for v in backward)
        return preference_scores(len(replies), verdicts)

    # -- rollouts ---------------------------------------------------------------------------------------
    def _prompt_too_long(self, item: ChatItem) -> bool:
        limit = self.config.max_prompt_tokens or self.config.max_token_length // 2
        return (
            len(self.tokenizer.apply_chat_template(list(item.messages), add_generation_prompt=True)) > limit
        )

    async def collect_trajectories(self, item: ChatItem) -> tuple[Optional[ScoredDataGroup], list]:
        if self._prompt_too_long(item):
            return None, []
        messages = [dict(m) for m in item.messages]
        async with self.server.managed_server(tokenizer=self.tokenizer) as managed:
            completion = await managed.chat_completion(
                messages=messages,
                n=self.config.group_size,
                max_tokens=self.reply_budget,
                temperature=self.config.temperature,
            )
            nodes = managed.get_state()["nodes"]
        replies = [choice.message.content or "" for choice in completion.choices]
        if len(nodes) != len(replies):
            logger.warning(
                "rlaif: %d replies but %d tracked sequences; skipping the item", len(replies), len(nodes)
            )
            return None, []
        cut = [choice.finish_reason == "length" for choice in completion.choices]
        scores = [-1.0] * len(replies)
        judged = [i for i in range(len(replies)) if not cut[i]]
        if len(judged) >= 2:
            for i, score in zip(
                judged, await self.judge_group(item, [replies[i] for i in judged]), strict=True
            ):
                scores[i] = score
        elif judged:
            scores[judged[0]] = 0.0
        self.score_buffer.extend(scores)
        group = ScoredDataGroup(
            tokens=[list(n.tokens) for n in nodes],
            masks=[list(n.masked_tokens) for n in nodes],
            inference_logprobs=[list(n.logprobs) for n in nodes],
            scores=scores,
            messages=[[*messages, {"role": "assistant", "content": r}] for r in replies],
        )
        return group, []

    # -- evaluation -------------------------------------------------------------------------------------
    async def _eval_one(self, item: ChatItem, sem: asyncio.Semaphore) -> dict[str, Any]:
        async with sem:
            completion = await self.server.chat_completion(
                messages=[dict(m) for m in item.messages],
                n=1,
                max_tokens=self.reply_budget,
                temperature=self.config.eval_temperature,
                split="eval",
            )
            reply = completion.choices[0].message.content or ""
            forward, backward = await asyncio.gather(
                self.judge_pair(item.messages, reply, item.reference, split="eval"),
                self.judge_pair(item.messages, item.reference, reply, split="eval"),
            )
        verdicts = [(0, 1, v) for v in forward] + [(1, 0, v) for v in backward]
        points = sum(
            1.0 if v == ("A" if a == 0 else "B") else 0.5 if v is None else 0.0 for a, _, v in verdicts
        )
        return {
            "messages": [*item.messages, {"role": "assistant", "content": reply}],
            "reference": item.reference,
            "win_rate": points / len(verdicts) if verdicts else 0.5,
            "unreadable": sum(v is None for _, _, v in verdicts),
            "judgements": len(verdicts),
        }

    async def evaluate(self, *args: Any, **kwargs: Any) -> None:
        items = [item for item in self.test if item.reference]
        if self.config.eval_limit is not None:
            items = items[: self.config.eval_limit]
        if not items:
            logger.warning("rlaif: no evaluation conversation has a reference reply; nothing evaluated")
            return
        samples, start, end = await self.run_evaluation(self._eval_one, items)
        total = sum(s["judgements"] for s in samples)
        metrics = {
            "eval/win_rate": sum(s["win_rate"] for s in samples) / len(samples),
            "eval/unreadable_judgements": sum(s["unreadable"] for s in samples) / max(total, 1),
        }
        await self.report_evaluation(
            metrics,
            samples,
            start,
            end,
            {"temperature": self.config.eval_temperature, "max_tokens": self.reply_budget},
            f"rlaif evaluation on {len(samples)} conversations: win_rate={metrics['eval/win_rate']:.4f} "
            f"against the reference replies (unreadable judgements {metrics['eval/unreadable_judgements']:.4f})",
        )

    async def wandb_log(self, wandb_metrics: Optional[dict] = None) -> None:
        wandb_metrics = dict(wandb_metrics or {})
        if self.score_buffer:
            wandb_metrics["train/mean_abs_score"] = sum(abs(s) for s in self.score_buffer) / len(
                self.score_buffer
            )
        if self.unreadable_buffer:
            wandb_metrics["train/unreadable_judgements"] = sum(self.unreadable_buffer) / len(
                self.unreadable_buffer
            )
        if self.judgements and self.config.use_wandb:
            import wandb

            table = wandb.Table(columns=["resp_a", "resp_b", "sample_judgement"])
            for row in self.judgements:
                table.add_data(*row)
            wandb_metrics["train/judgement_table"] = table
        self.score_buffer, self.unreadable_buffer, self.judgements = [], [], []
        await super().wandb_log(wandb_metrics)


if __name__ == "__main__":
    RLAIFEnv.cli()
