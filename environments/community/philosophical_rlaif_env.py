"""Philosophical RLAIF: a judge compares the policy's replies for philosophical depth; preferences are rewards.

The prompt is a WildChat conversation up to its last user turn. With probability ``preference_prompt_chance``
(the original's 5 %) a system turn asking for replies in line with the preference opens the group's prompt.
Replies may reason first in ``<think>...</think>``; the judge sees only the text after it.

Reward: every pair of the group's replies is shown to the judge in both orders (to cancel position bias),
with the rubric ``preference`` (the original's preference for philosophical depth: several perspectives,
questioned assumptions, paradoxes, clarity); the judge answers ``\\boxed{A}`` or ``\\boxed{B}``. A reply's
reward is ``2 * share - 1`` with ``share`` the mean of its readable comparisons (1 win, 0.5 tie, 0 loss):
with the original's two replies, +1 / -1 for the pair's winner and loser and 0 / 0 for a split. An
unreadable verdict counts for neither reply (a reply with no readable comparison scores 0) and is logged as
``train/judge_failures`` / ``train/judge_failure_rate``. A reply cut at its token budget, or whose
reasoning never closes or that is empty, is not judged and scores -1. Prompts longer than
``max_token_length - max_tokens`` tokens are skipped.

Evaluation: on conversations with a reference reply (the assistant turn after the last user turn), the
policy's reply is judged against the reference in both orders; ``eval/win_rate`` (= ``eval/mean_score``) is
its mean share, replies whose two verdicts were both unreadable are left out (``eval/unscored``).

The judge: ``--judge.base_url`` / ``--judge.model_name`` ... (any OpenAI-compatible server), else
``--env.judge_base_url`` / ``--env.judge_model_name``, else the policy's own servers
(``_judging/policy_judge.py``).

Data: ``datasets.load_dataset("allenai/WildChat", split="train[:1000]")``, evaluated on its first
``eval_limit`` conversations with a reference reply. ``--env.dataset_path`` / ``--env.eval_dataset_path`` read
local rows in WildChat's schema (``conversation``: a list of ``role`` / ``content`` turns).

``python environments/community/philosophical_rlaif_env.py {serve,process,evaluate} --openai.base_url ...``
"""

from __future__ import annotations

import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, ClassVar, Optional

from pydantic import Field

# Run as a script, the repository root is not on the path yet.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from atroposlib.envs.base import EvalHandlingEnum  # noqa: E402
from atroposlib.envs.data_loading import DatasetError, hub_split, load_rows  # noqa: E402
from atroposlib.envs.declared_defaults import DeclaredDefaults  # noqa: E402
from atroposlib.envs.self_judging import too_long  # noqa: E402
from atroposlib.envs.single_turn import SingleTurnEnv, SingleTurnEnvConfig  # noqa: E402
from atroposlib.utils.replies import answer_section  # noqa: E402
from environments.community._judging.policy_judge import (  # noqa: E402
    EvalGrade,
    JudgedEvaluation,
    JudgeTally,
    PolicyJudgeMixin,
    PolicyJudgeSettings,
    preferred_first,
    round_robin,
)
from environments.rlaif_server import ChatItem, row_to_item  # noqa: E402

DATASET = "allenai/WildChat"
PREFERENCE = (
    "I prefer responses that show deep philosophical inquiry. The ideal response explores several "
    "perspectives, questions the assumptions underneath, uses nuanced language and invites further critical "
    "thinking. Avoid superficial answers; aim for depth and intellectual stimulation. Responses that find the "
    "principles, paradoxes or ethical considerations underneath are valued highly, as is clarity and cogency "
    "in expressing complex ideas."
)
JUDGE_SYSTEM_PROMPT = (
    "You are a deep-thinking AI judge. You may reason step by step inside <think> </think> tags first. Then "
    "give your preferred response as \\boxed{A} or \\boxed{B}: exactly one letter in one box. Any other final "
    "answer is not counted."
)
JUDGE_TEMPLATE = """[Conversation]
{conversation}

[Response A]
{response_a}

[Response B]
{response_b}

[END]

Here is a conversation with two candidate responses. Pick the one more aligned with these desired
qualities of a response:
{preference}

The goal is to pick the response that, used for training an AI, would better steer it towards text with
these qualities, even if neither is a perfect example. Think it through, then answer \\boxed{{A}} or
\\boxed{{B}}."""


@dataclass(frozen=True)
class PhilosophyItem:
    """A conversation (``chat``: prompt and reference) and whether its prompt opens with the preference."""

    chat: ChatItem
    primed: bool = False


class CutReplies(list):
    """A group's replies, with whether each was cut at its token budget (``cut``)."""

    def __init__(self, replies: Sequence[str], cut: Sequence[bool]) -> None:
        super().__init__(replies)
        self.cut = list(cut)


def judged_text(reply: str) -> Optional[str]:
    """What the judge sees of a reply (the text after its reasoning), or None when there is nothing to judge."""
    section = answer_section(reply)
    return section.strip() if section is not None and section.strip() else None


class PhilosophicalRLAIFConfig(PolicyJudgeSettings, SingleTurnEnvConfig):
    """SingleTurnEnvConfig plus the data, the preference and the judge."""

    original_key_aliases: ClassVar[dict[str, str]] = {"generator_max_tokens": "max_tokens"}
    ignored_original_keys: ClassVar[dict[str, str]] = {
        "generator_model_name": "the policy is the model the inference server serves (--openai.model_name)",
    }

    dataset_name: str = Field(DATASET, description="hub data set of WildChat-style conversations")
    dataset_split: str = Field("train[:1000]", description="hub split to read")
    dataset_path: Optional[str] = Field(None, description="local rows with a 'conversation' field")
    eval_dataset_path: Optional[str] = Field(
        None, description="local evaluation rows (default: the training conversations)"
    )
    preference: str = Field(PREFERENCE, description="the qualities the judge rewards")
    preference_prompt_chance: float = Field(
        0.05, ge=0.0, le=1.0, description="share of training prompts opened by a system turn asking for them"
    )
    max_tokens: Optional[int] = Field(1024, ge=1, description="generation budget per reply in tokens")
    judge_model_name: str = Field("gpt-3.5-turbo", description="model name sent to a judge at judge_base_url")
    judge_max_tokens: int = Field(2048, ge=0, description="token budget of one judgement (0: the server's)")
    seed: int = Field(0, description="seed of the training order and of the preference-prompt draws")


class PhilosophicalRLAIFEnv(PolicyJudgeMixin, DeclaredDefaults, JudgedEvaluation, SingleTurnEnv):
    """Pairwise judged philosophical depth as rewards (see the module docstring)."""

    name = "philosophical_rlaif"
    env_config_cls = PhilosophicalRLAIFConfig
    config: PhilosophicalRLAIFConfig
    default_env_values = dict(
        group_size=2, total_steps=20, batch_size=4, steps_per_eval=10, max_token_length=4096,
        eval_handling=EvalHandlingEnum.LIMIT_TRAIN, eval_limit_ratio=0.1, eval_temperature=0.7, eval_limit=10,
        judge_max_tokens=1024, max_tokens=768, temperature=0.7, ensure_scores_are_not_same=False,
    )  # fmt: skip
    #: an evaluation reply counts as correct when it beats the reference in both orders
    correct_threshold: float = 1.0

    def __init__(
        self, config: PhilosophicalRLAIFConfig, server_configs, slurm=False, testing=False, **kwargs
    ):
        super().__init__(config, server_configs, slurm, testing, **kwargs)
        self.rng = random.Random(config.seed)
        self.tally = JudgeTally()
        self.skipped_long = 0

    # -- data -------------------------------------------------------------------------------------------
    def _chats(self, path: Optional[str]) -> list[ChatItem]:
        cfg = self.config
        rows = load_rows(
            path, hub_split(cfg.dataset_name, cfg.dataset_split), ["conversation"], cfg.dataset_name
        )
        return [row_to_item(row, index, path or cfg.dataset_name) for index, row in enumerate(rows)]

    async def setup(self) -> None:
        cfg = self.config
        self.train = [PhilosophyItem(chat) for chat in self._chats(cfg.dataset_path)]
        random.Random(cfg.seed).shuffle(self.train)
        evaluation = (
            self._chats(cfg.eval_dataset_path) if cfg.eval_dataset_path else [i.chat for i in self.train]
        )
        self.test = [PhilosophyItem(chat) for chat in evaluation if chat.reference]

    def _fits(self, item: PhilosophyItem) -> bool:
        room = self.config.max_token_length - self.generation_budget
        tokens = self.tokenizer.apply_chat_template(self.prompt_messages(item), add_generation_prompt=True)
        return len(tokens) <= room

    async def get_next_item(self) -> PhilosophyItem:
        """The next training conversation whose prompt leaves room for a reply (others are skipped)."""
        for _ in range(len(self.train)):
            item = self.next_in_turn(self.train)
            primed = replace(item, primed=self.rng.random() < self.config.preference_prompt_chance)
            if self._fits(primed):
                return primed
            self.skipped_long += 1
        raise DatasetError(
            f"{self.config.dataset_path or self.config.dataset_name}: no conversation fits in "
            f"max_token_length - max_tokens = {self.config.max_token_length - self.generation_budget} tokens"
        )

    def prompt_messages(self, item: PhilosophyItem) -> list[dict[str, str]]:
        messages = [dict(m) for m in item.chat.messages]
        if item.primed:
            primer = f"Please respond in a way that aligns with this preference: {self.config.preference}"
            messages.insert(0, {"role": "system", "content": primer})
        return messages

    # -- reward -----------------------------------------------------------------------------------------
    def judge_messages(self, item: PhilosophyItem, reply_a: str, reply_b: str) -> list[dict[str, str]]:
        """The judge's chat comparing two replies to ``item``'s conversation."""
        conversation = "\n".join(f"{m['role']}: {m['content']}" for m in item.chat.messages)
        user = JUDGE_TEMPLATE.format(
            conversation=conversation,
            response_a=reply_a,
            response_b=reply_b,
            preference=self.config.preference,
        )
        return [{"role": "system", "content": JUDGE_SYSTEM_PROMPT}, {"role": "user", "content": user}]

    async def sample_group(self, item: PhilosophyItem) -> Optional[tuple[list[dict], list[str], list[Any]]]:
        sampled = await super().sample_group(item)
        if sampled is None:
            return None
        messages, replies, nodes = sampled
        return messages, CutReplies(replies, [too_long(n) for n in nodes]), nodes

    async def score_replies_async(self, replies: Sequence[str], item: PhilosophyItem) -> list[float]:
        cut = getattr(replies, "cut", [False] * len(replies))
        texts = [None if c else judged_text(r) for r, c in zip(replies, cut, strict=True)]
        judged = [i for i, text in enumerate(texts) if text is not None]
        scores = [-1.0 if text is None else 0.0 for text in texts]
        if len(judged) >= 2:
            result = await round_robin(
                self.judge, lambda a, b: self.judge_messages(item, a, b), [texts[i] for i in judged]
            )
            self.tally.add(result.asked, result.failed)
            for i, share in zip(judged, result.shares, strict=True):
                scores[i] = 0.0 if share is None else 2.0 * share - 1.0
        return scores

    # -- evaluation and logging -------------------------------------------------------------------------
    async def eval_grade(self, reply: str, item: PhilosophyItem) -> EvalGrade:
        text = judged_text(reply)
        if text is None:
            return EvalGrade(0.0)
        comparison = await self.judge.compare(
            lambda a, b: self.judge_messages(item, a, b), text, item.chat.reference, preferred_first
        )
        return EvalGrade(comparison.score, 2, comparison.failures, comparison.record())

    def extra_eval_metrics(self, samples: Sequence[dict[str, Any]]) -> dict[str, float]:
        return {"eval/win_rate": sum(s["score"] for s in samples) / len(samples) if samples else 0.0}

    async def wandb_log(self, wandb_metrics: Optional[dict] = None) -> None:
        wandb_metrics = {**(wandb_metrics or {}), **self.tally.drain()}
        if self.skipped_long:
            wandb_metrics["train/skipped_long_prompts"] = float(self.skipped_long)
        self.skipped_long = 0
        await super().wandb_log(wandb_metrics)


if __name__ == "__main__":
    PhilosophicalRLAIFEnv.cli()
