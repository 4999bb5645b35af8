"""Punchline VR-CLI: reason about a joke's setup, then write its punchline.

The prompt is the setup of a Reddit joke (a ``What``/``Why``/``How`` question, see ``jokes.py``); the reply
reasons in ``<think>...</think>`` and then gives one punchline on one line. The reward is VR-CLI
(``vrcli.py``): a fixed reference model (``reference_model``, ``Qwen/Qwen3-1.7B-Base``, run in
``transformers`` in this process on ``cuda:<gpu_device>`` when there is a GPU) scores the joke's real
punchline after the setup with and without the reasoning, and the reward is ``max(0, 1 - PPL(with) /
PPL(without))`` (``reward_thresholds``: the paper's tiers instead, 0 / 0.5 / 0.9 / 1.0 from 0.05 %, 1 % and
2 % improvement). The policy never sees the real punchline, so it can only raise the reward by reasoning
its way towards it. 0 without scoring for a reply whose reasoning is missing, empty or unclosed, text
before the reasoning, no punchline after it (one only inside ``<think>``), several punchline lines (a
hedge), a punchline repeating the setup, or a reasoning that only repeats the setup's words. A reply counts
as correct when its reasoning helped (reward above 0). Logs ``train/mean_reward`` and
``train/format_rate``; evaluate adds ``eval/mean_reward`` and ``eval/mean_improvement``.

Data: the hub set's jokes (``SocialGrep/one-million-reddit-jokes``, ``min_score`` 75 upvotes), shuffled
with ``shuffle_seed``; ``eval_size`` (64, at most half) are held out for evaluation.
``--env.dataset_path`` / ``--env.eval_dataset_path`` read local posts in the hub set's schema (``title``,
``selftext``, ``score``).

``python environments/community/punchline_vrcli/punchline_env.py {serve,process,evaluate} --openai.base_url ...``
"""

from __future__ import annotations

import asyncio
import random
import re
import sys
from collections.abc import Sequence
from typing import Any, Optional

from pydantic import Field

from atroposlib.envs.declared_defaults import DeclaredDefaults
from atroposlib.envs.reply_fields import ReplyFields
from atroposlib.envs.reporting import mean
from atroposlib.envs.single_turn import SingleTurnEnv, SingleTurnEnvConfig
from atroposlib.utils.replies import THINK_CLOSE, THINK_OPEN, answer_section

try:
    from environments.community.punchline_vrcli.jokes import PunchlineRow, load_jokes
    from environments.community.punchline_vrcli.vrcli import ReferenceScorer, pick_device, vrcli_reward
except ModuleNotFoundError:  # run as a script: this folder is on the path
    from jokes import PunchlineRow, load_jokes
    from vrcli import ReferenceScorer, pick_device, vrcli_reward

SYSTEM_PROMPT = (
    "You have a strong sense of humor and answer the user's question with a punchline. You always give the "
    "funniest answer, even if it could offend some people. Consider the aspects that make a joke funny, for "
    "example the answer is usually surprising to hear but makes sense in hindsight. You shouldn't need to "
    "explain your answer, it should stand on its own.\n\n"
    "Think first inside <think> </think> tags, then write the punchline alone on one line."
)
_WORD = re.compile(r"[a-z0-9']+")


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def reply_parts(reply: str) -> Optional[tuple[str, str]]:
    """``(reasoning, punchline)`` of a reply, or None when it breaks the format: reasoning missing, empty,
    unclosed or preceded by text, or not exactly one non-empty line after it."""
    section = answer_section(reply)
    if section is None or THINK_CLOSE not in reply:
        return None
    if THINK_OPEN in reply and not reply.lstrip().startswith(THINK_OPEN):
        return None
    reasoning = reply.split(THINK_CLOSE, 1)[0].replace(THINK_OPEN, "", 1).strip()
    lines = [line.strip() for line in section.splitlines() if line.strip()]
    if not reasoning or len(lines) != 1:
        return None
    return reasoning, lines[0]


def scorable_reasoning(reply: str, question: str) -> Optional[str]:
    """The reasoning VR-CLI scores, or None for a malformed reply (:func:`reply_parts`), a punchline that
    repeats the setup, or a reasoning with no word beyond the setup's."""
    parts = reply_parts(reply)
    if parts is None:
        return None
    reasoning, punchline = parts
    setup = _words(question)
    if _words(punchline) == setup or set(_words(reasoning)) <= set(setup):
        return None
    return reasoning


class PunchEnvConfig(SingleTurnEnvConfig):
    """SingleTurnEnvConfig plus the reference model, the joke filter and the data source."""

    reference_model: str = Field(
        "Qwen/Qwen3-1.7B-Base",
        description="reference causal LM scoring the real punchline (hub name or directory)",
    )
    gpu_device: int = Field(0, ge=0, description="CUDA device of the reference model (the CPU without a GPU)")
    reward_thresholds: bool = Field(
        False, description="reward the paper's tiers of improvement instead of max(0, improvement)"
    )
    min_score: int = Field(75, description="upvotes a post needs to be a joke here")
    dataset_path: Optional[str] = Field(None, description="local posts (default: the hub set)")
    eval_dataset_path: Optional[str] = Field(None, description="local evaluation posts (default: held out)")
    eval_size: int = Field(64, ge=1, description="jokes held out for evaluation (at most half)")
    shuffle_seed: int = Field(42, description="seed of the shuffle before the hold-out")


class PunchlineEnv(DeclaredDefaults, ReplyFields, SingleTurnEnv):
    """Rewards a punchline's reasoning by how much it makes a reference model expect the real punchline."""

    name = "punchline_vrcli"
    env_config_cls = PunchEnvConfig
    config: PunchEnvConfig
    default_model = "Qwen/Qwen3-1.7B"
    default_server_settings = {"num_requests_for_eval": 64}
    default_env_values = dict(
        group_size=8, total_steps=1000, batch_size=12, steps_per_eval=100, max_token_length=3000
    )
    #: a reply is correct when its reasoning helped at all
    correct_threshold = sys.float_info.min

    def __init__(self, config: PunchEnvConfig, server_configs, slurm=False, testing=False):
        super().__init__(config, server_configs, slurm, testing)
        self.scorer: Optional[ReferenceScorer] = None
        self.rewards: list[float] = []
        self.formats: list[float] = []

    async def setup(self) -> None:
        cfg = self.config
        jokes = load_jokes(cfg.dataset_path, cfg.min_score)
        random.Random(cfg.shuffle_seed).shuffle(jokes)
        if cfg.eval_dataset_path:
            self.train, self.test = jokes, load_jokes(cfg.eval_dataset_path, cfg.min_score)
        else:
            held = min(cfg.eval_size, len(jokes) // 2)
            self.train, self.test = jokes[held:], jokes[:held] or jokes[:1]
        if self.scorer is None:
            self.scorer = await asyncio.to_thread(
                ReferenceScorer, cfg.reference_model, pick_device(cfg.gpu_device)
            )

    def prompt_messages(self, item: PunchlineRow) -> list[dict[str, str]]:
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": item["question"]}]

    def improvement(self, reply: str, item: PunchlineRow) -> Optional[float]:
        """The VR-CLI improvement of a reply's reasoning, or None when it is not scored (see the module
        docstring)."""
        reasoning = scorable_reasoning(reply, item["question"])
        if reasoning is None:
            return None
        assert self.scorer is not None, "setup() loads the reference model"
        return self.scorer.improvement(item["question"], reasoning, item["answer"])

    def score_reply(self, reply: str, item: PunchlineRow) -> float:
        gain = self.improvement(reply, item)
        return 0.0 if gain is None else vrcli_reward(gain, self.config.reward_thresholds)

    async def score_replies_async(self, replies: Sequence[str], item: PunchlineRow) -> list[float]:
        # the reference model's forward passes run in a thread, so the event loop keeps sampling meanwhile
        return await asyncio.to_thread(self.score_replies, replies, item)

    def on_group_scored(self, item: PunchlineRow, scores: Sequence[float]) -> None:
        self.rewards.extend(scores)

    def score_replies(self, replies: Sequence[str], item: PunchlineRow) -> list[float]:
        if len(replies) > 1:  # a training group (evaluation scores one reply at a time)
            self.formats.extend(1.0 if reply_parts(r) else 0.0 for r in replies)
        return super().score_replies(replies, item)

    def eval_sample_fields(self, item: PunchlineRow) -> dict[str, Any]:
        return {"question": item["question"], "gold_punchline": item["answer"]}

    def reply_fields(self, reply: str, item: PunchlineRow) -> dict[str, Any]:
        parts = reply_parts(reply)
        return {"punchline": parts[1] if parts else None, "improvement": self.improvement(reply, item)}

    def extra_eval_metrics(self, samples: Sequence[dict[str, Any]]) -> dict[str, float]:
        gains = [s["improvement"] for s in samples if s["improvement"] is not None]
        return {"eval/mean_reward": mean([s["score"] for s in samples]), "eval/mean_improvement": mean(gains)}

    async def wandb_log(self, wandb_metrics: Optional[dict] = None) -> None:
        wandb_metrics = dict(wandb_metrics or {})
        if self.rewards:
            wandb_metrics["train/mean_reward"] = mean(self.rewards)
        if self.formats:
            wandb_metrics["train/format_rate"] = mean(self.formats)
        self.rewards, self.formats = [], []
        await super().wandb_log(wandb_metrics)


if __name__ == "__main__":
    PunchlineEnv.cli()
