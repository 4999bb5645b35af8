"""GoofyMath: solve GSM8K word problems correctly and with as much comic flair as possible.

The policy answers a GSM8K problem, reasoning first if it likes (``<think>...</think>``, which never counts)
and ending with its answer in ``\\boxed{}``. With probability ``goofy_prompt_chance`` a training prompt's
system turn also asks for a goofy performance; evaluation prompts never do.

Reward: a reply is correct when its boxed answer after the reasoning equals the gold number (checked with
``math_verify`` in worker processes: ``63`` = ``63.0`` = ``\\$63``); no box, a box only inside the reasoning,
boxes that differ (a hedge) or a reasoning block that never closes are wrong. Wrong replies score -1.0. When a
group has one correct reply it scores 1.0; when it has several, a judge compares every pair of them in both
orders (to cancel position bias) for goofiness, and each scores ``1 + goofiness_weight * share``, its share
being the mean of its readable comparisons (1 win, 0.5 tie, 0 loss). The judge sees only the text after the
reasoning. An unreadable verdict is a judge failure: it counts for neither reply (a reply with no readable
comparison gets no bonus) and is logged as ``train/judge_failures`` / ``train/judge_failure_rate``. A reply
that writes the judge template's section markers gets no bonus. ``train/avg_goofiness_score`` is the mean
share of judged replies. Evaluation checks correctness only (``eval/percent_correct``).

The judge: ``--judge.base_url`` / ``--judge.model_name`` ... (any OpenAI-compatible server), else the policy's
own servers (``_judging/policy_judge.py``).

Data: ``datasets.load_dataset("gsm8k", "main")`` (train for training, test for evaluation, each shuffled with
seed 42). ``--env.dataset_path`` / ``--env.eval_dataset_path`` read local rows in GSM8K's schema:
``question`` and ``answer`` (a worked solution ending in ``#### n``); a local training file without an
evaluation file is used for both.

``python environments/community/goofy_math/goofy_math_server.py {serve,process,evaluate} --openai.base_url ...``
"""

from __future__ import annotations

import random
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from pydantic import Field

# Run as a script (``python environments/community/goofy_math/<this file>``), the repository root is not on
# the path yet.
sys.path.insert(0, str(Path(__file__).resolve().parents[3]))

from atroposlib.envs.data_loading import DatasetError, hub_split, load_rows  # noqa: E402
from atroposlib.envs.declared_defaults import DeclaredDefaults  # noqa: E402
from atroposlib.envs.single_turn import SingleTurnEnv, SingleTurnEnvConfig  # noqa: E402
from atroposlib.evals.math import MathScorer, MathVerdict, gsm8k_gold  # noqa: E402
from atroposlib.utils.replies import answer_section  # noqa: E402
from environments.community._judging.policy_judge import (  # noqa: E402
    JudgeTally,
    PolicyJudgeMixin,
    PolicyJudgeSettings,
    round_robin,
    shows_judge_markers,
)
from environments.community._judging.train_shares import TrainShares  # noqa: E402

SYSTEM_PROMPT = (
    "You are a deep-thinking AI. You may reason at length before answering: put your thoughts inside "
    "<think> </think> tags, then give your solution.\n\n"
    "You have at most 2048 tokens; use fewer if you can.\n\n"
    "End your reply with your final answer in this exact form: \\boxed{your answer here}\n"
    "Answers in any other form receive no credit."
)
GOOFY_PREFERENCE = (
    "Be the GOOFIEST math solver ever! Use wild exaggerations, silly sound effects, dramatic reactions to "
    "each calculation, numbers with personalities and over-the-top enthusiasm. Don't just solve the problem: "
    "make it a PERFORMANCE, with dramatic gasps and unexpected tangents. But still get the answer right, you "
    "magnificent mathematical goofball! Sound like an extremely enthusiastic but chaotic math genius."
)
JUDGE_SYSTEM_PROMPT = (
    "You are a deep-thinking AI judge. You may reason step by step inside <think> </think> tags first. Then "
    "give your preferred response as \\boxed{A} or \\boxed{B}: exactly one letter in one box. Any other "
    "final answer is not counted."
)
JUDGE_TEMPLATE = """[Math Problem]
{problem}

[Response A]
{response_a}

[Response B]
{response_b}

[END]

Both responses above reach the correct answer to this math problem. Pick the one that is GOOFIER and more
FUN while still mathematically sound. A goofy solution has:
1. silly expressions or sound effects
2. dramatic reactions to calculations
3. creative personification of numbers
4. unexpected but relevant tangents
5. exaggerated enthusiasm

Ignoring mathematical correctness (both are correct), which response is more ENTERTAINING and GOOFY?
Think it through, then answer \\boxed{{A}} or \\boxed{{B}}."""
#: Section markers of the judge's template; a reply that writes them is trying to rewrite the judge's prompt.
JUDGE_MARKERS = ("[Math Problem]", "[Response A]", "[Response B]", "[END]")


@dataclass(frozen=True)
class GoofyItem:
    """A problem, its gold number, and whether its prompt asks for goofiness."""

    question: str
    gold: str
    goofy: bool = False


def items_from_rows(rows: Sequence[dict[str, Any]], source: str) -> list[GoofyItem]:
    """Items of GSM8K rows; :class:`DatasetError` naming the source, row and field for a non-text field or
    an answer with no final number."""
    items = []
    for index, row in enumerate(rows):
        for field in ("question", "answer"):
            if not isinstance(row[field], str) or not row[field].strip():
                raise DatasetError(f"{source}: row {index}: field {field!r} must be non-empty text")
        gold = gsm8k_gold(row["answer"])
        if not gold:
            raise DatasetError(f"{source}: row {index}: field 'answer' has no final answer after '####'")
        items.append(GoofyItem(row["question"].strip(), gold))
    return items


def judged_text(reply: str) -> str:
    """What the judge sees of a reply: the text after its reasoning."""
    return (answer_section(reply) or "").strip()


class GoofyMathConfig(PolicyJudgeSettings, SingleTurnEnvConfig):
    """SingleTurnEnvConfig plus the data source, the goofiness settings and the judge."""

    dataset_path: Optional[str] = Field(None, description="local GSM8K rows (question, answer)")
    eval_dataset_path: Optional[str] = Field(
        None, description="local evaluation rows (default: dataset_path when that is set)"
    )
    goofy_prompt_chance: float = Field(
        0.5, ge=0.0, le=1.0, description="share of training prompts whose system turn asks for goofiness"
    )
    goofiness_weight: float = Field(
        0.5, ge=0.0, description="bonus of a correct reply that wins all its goofiness comparisons"
    )
    judge_max_tokens: int = Field(2048, ge=0, description="token budget of one judgement (0: the server's)")
    seed: int = Field(42, description="seed of the data shuffle and of the goofy-prompt draws")


class GoofyMathEnv(PolicyJudgeMixin, TrainShares, DeclaredDefaults, SingleTurnEnv):
    """Correct GSM8K answers, ranked by a judge for goofiness (see the module docstring)."""

    name = "goofy_math"
    env_config_cls = GoofyMathConfig
    config: GoofyMathConfig
    default_model = "NousResearch/DeepHermes-3-Llama-3-3B-Preview"
    default_env_values = dict(
        group_size=4, total_steps=10, batch_size=8, steps_per_eval=50, max_token_length=2048
    )

    def __init__(self, config: GoofyMathConfig, server_configs, slurm=False, testing=False, **kwargs: Any):
        super().__init__(config, server_configs, slurm, testing, **kwargs)
        self.scorer = MathScorer()
        self.rng = random.Random(config.seed)
        self.tally = JudgeTally()

    # -- data -------------------------------------------------------------------------------------------
    def _items(self, path: Optional[str], split: str) -> list[GoofyItem]:
        name = f"gsm8k (main, {split})"
        rows = load_rows(path, hub_split("gsm8k", split, "main"), ("question", "answer"), name)
        items = items_from_rows(rows, path or name)
        random.Random(self.config.seed).shuffle(items)
        return items

    async def setup(self) -> None:
        cfg = self.config
        self.train = self._items(cfg.dataset_path, "train")
        self.test = self._items(cfg.eval_dataset_path or cfg.dataset_path, "test")

    async def get_next_item(self) -> GoofyItem:
        item = self.next_in_turn(self.train)
        return GoofyItem(item.question, item.gold, self.rng.random() < self.config.goofy_prompt_chance)

    def prompt_messages(self, item: GoofyItem) -> list[dict[str, str]]:
        system = f"{SYSTEM_PROMPT}\n\n{GOOFY_PREFERENCE}" if item.goofy else SYSTEM_PROMPT
        return [{"role": "system", "content": system}, {"role": "user", "content": item.question}]

    # -- reward -----------------------------------------------------------------------------------------
    def judge_messages(self, item: GoofyItem, reply_a: str, reply_b: str) -> list[dict[str, str]]:
        """The judge's chat comparing two correct replies to ``item``."""
        user = JUDGE_TEMPLATE.format(problem=item.question, response_a=reply_a, response_b=reply_b)
        return [{"role": "system", "content": JUDGE_SYSTEM_PROMPT}, {"role": "user", "content": user}]

    async def goofiness(self, item: GoofyItem, replies: Sequence[str]) -> list[float]:
        """Each correct reply's goofiness share (0.0 when none of its comparisons could be read, or when it
        writes the judge's section markers)."""
        judged = [i for i, reply in enumerate(replies) if not shows_judge_markers(reply, JUDGE_MARKERS)]
        shares = [0.0] * len(replies)
        if len(judged) < 2:
            return shares
        result = await round_robin(
            self.judge,
            lambda a, b: self.judge_messages(item, a, b),
            [judged_text(replies[i]) for i in judged],
        )
        self.tally.add(result.asked, result.failed)
        for i, share in zip(judged, result.shares, strict=True):
            shares[i] = share or 0.0
            if share is not None:
                self.record_share("avg_goofiness_score", [share])
        return shares

    async def verdicts(self, replies: Sequence[str], item: GoofyItem) -> list[MathVerdict]:
        """The correctness verdict of each reply."""
        return [await self.scorer.score(reply, item.gold) for reply in replies]

    async def score_replies_async(self, replies: Sequence[str], item: GoofyItem) -> list[float]:
        verdicts = await self.verdicts(replies, item)
        scores = [1.0 if v.correct else -1.0 for v in verdicts]
        correct = [i for i, v in enumerate(verdicts) if v.correct]
        if len(correct) >= 2:
            shares = await self.goofiness(item, [replies[i] for i in correct])
            for i, share in zip(correct, shares, strict=True):
                scores[i] = 1.0 + self.config.goofiness_weight * share
        return scores

    # -- evaluation and logging -------------------------------------------------------------------------
    def eval_sample_fields(self, item: GoofyItem) -> dict[str, Any]:
        return {"question": item.question, "gold_answer": item.gold}

    async def _eval_one(self, item: GoofyItem, sem: Any) -> Optional[dict[str, Any]]:
        sample = await super()._eval_one(item, sem)
        verdict = (await self.verdicts([sample["messages"][-1]["content"]], item))[0]
        sample.update({"answer": verdict.answer, "reason": verdict.reason})
        return sample

    async def wandb_log(self, wandb_metrics: Optional[dict] = None) -> None:
        await super().wandb_log({**(wandb_metrics or {}), **self.tally.drain()})

    async def _close_inference_clients(self) -> None:
        self.scorer.close()
        await super()._close_inference_clients()


if __name__ == "__main__":
    GoofyMathEnv.cli()
