"""Single-turn environments scored by a function of the reply.

:class:`SingleTurnEnv` is a :class:`~atroposlib.envs.base.BaseEnv` for the common case of one prompt per item,
``group_size`` sampled replies and a float reward per reply computed from the reply text. A subclass supplies
the task:

* :meth:`SingleTurnEnv.prompt_messages` - the chat prompt of an item;
* :meth:`SingleTurnEnv.score_reply` (or :meth:`SingleTurnEnv.score_replies` for batch scoring, or
  :meth:`SingleTurnEnv.score_replies_async` for scoring that awaits other processes) - the rewards;
* :meth:`SingleTurnEnv.eval_items` - the evaluation set;
* ``setup`` and ``get_next_item`` as for any environment.

The base class samples the group through ``self.server.managed_server(tokenizer=self.tokenizer)`` so tokens,
masks (``-100`` on the prompt) and inference logprobs come from the inference server, builds the
:class:`~atroposlib.envs.groups.ScoredDataGroup` (with the chat messages) and returns every group it scored
(what is sent or written is decided by :func:`~atroposlib.envs.serve.group_validation.prepare_group`). ``evaluate`` answers
every evaluation item once, prints one summary line, logs ``eval/percent_correct`` (the share of replies
scoring at least :attr:`SingleTurnEnv.correct_threshold`) and ``eval/mean_score`` to wandb, and writes
``metrics.json`` / ``samples.jsonl`` under ``data_dir_to_save_evals`` when that is set.
"""

from __future__ import annotations

import asyncio
import logging
from abc import abstractmethod
from collections.abc import Sequence
from typing import Any, Optional

from pydantic import Field

from atroposlib.envs.base import BaseEnv, BaseEnvConfig
from atroposlib.envs.groups import ScoredDataGroup
from atroposlib.envs.reporting import EvalReporting, IterCheckpoint, mean

logger = logging.getLogger(__name__)


class SingleTurnEnvConfig(BaseEnvConfig):
    """BaseEnvConfig plus the sampling settings of a single-turn environment."""

    temperature: float = Field(1.0, ge=0.0, description="sampling temperature of training rollouts")
    top_p: float = Field(1.0, gt=0.0, le=1.0, description="nucleus-sampling mass of training rollouts")
    eval_temperature: float = Field(0.0, ge=0.0, description="sampling temperature of evaluation replies")
    max_tokens: Optional[int] = Field(
        None, ge=1, description="generation budget per reply in tokens (default: max_token_length)"
    )
    eval_limit: Optional[int] = Field(None, ge=1, description="evaluate on at most this many items")


class SingleTurnEnv(IterCheckpoint, EvalReporting, BaseEnv):
    """One prompt, ``group_size`` replies, one float reward per reply (see the module docstring).

    ``self.train`` and ``self.test`` (empty lists until ``setup`` fills them) back the default
    :meth:`get_next_item` (the training items in turn, cycling) and :meth:`eval_items`.
    """

    env_config_cls = SingleTurnEnvConfig
    #: ``serve`` trains on the inference server's own token ids (OpenAI-type servers are refused).
    trains_token_ids: bool = True
    config: SingleTurnEnvConfig
    #: An evaluation reply counts as correct when its score is at least this.
    correct_threshold: float = 1.0

    def __init__(self, config: SingleTurnEnvConfig, server_configs, slurm=False, testing=False):
        super().__init__(config, server_configs, slurm, testing)
        self.train: list[Any] = []
        self.test: list[Any] = []

    # -- the task (subclass hooks) ----------------------------------------------------------------------
    @abstractmethod
    def prompt_messages(self, item: Any) -> list[dict[str, str]]:
        """The chat messages sent for ``item`` (system and user turns)."""

    def prefill(self, item: Any) -> str:
        """Text the assistant turn starts with (part of the prompt, not trained); empty for none."""
        return ""

    def score_reply(self, reply: str, item: Any) -> float:
        """The reward of one reply to ``item``. Subclasses override this or :meth:`score_replies`."""
        raise NotImplementedError

    def score_replies(self, replies: Sequence[str], item: Any) -> list[float]:
        """The rewards of a group of replies to ``item`` (default: :meth:`score_reply` for each)."""
        return [self.score_reply(reply, item) for reply in replies]

    async def score_replies_async(self, replies: Sequence[str], item: Any) -> list[float]:
        """The rewards of a group, awaited by the sampling and evaluation paths (default:
        :meth:`score_replies`). Override it when scoring waits on worker processes or services, so the
        event loop keeps running meanwhile."""
        return self.score_replies(replies, item)

    async def get_next_item(self) -> Any:
        """The next training item: ``self.train`` in order, starting over at the end."""
        return self.next_in_turn(self.train)

    def eval_items(self) -> Sequence[Any]:
        """The evaluation set (before ``eval_limit`` is applied; default ``self.test``)."""
        return self.test

    def eval_sample_fields(self, item: Any) -> dict[str, Any]:
        """Extra fields written with each evaluation sample (e.g. the question and the gold answer)."""
        return {}

    def on_group_scored(self, item: Any, scores: Sequence[float]) -> None:
        """Called with every training group's scores before uniform groups are dropped."""

    def extra_eval_metrics(self, samples: Sequence[dict[str, Any]]) -> dict[str, float]:
        """Metrics added to ``eval/percent_correct`` and ``eval/mean_score`` (e.g. per-category accuracy)."""
        return {}

    # -- sampling ---------------------------------------------------------------------------------------
    @property
    def generation_budget(self) -> int:
        """Tokens a reply may use: ``max_tokens`` or, when unset, ``max_token_length``."""
        return self.config.max_tokens or self.config.max_token_length

    async def _sample(self, server: Any, item: Any, n: int, **sampling: Any) -> tuple[list[dict], list[str]]:
        messages = self.prompt_messages(item)
        prefill = self.prefill(item)
        if prefill:
            prompt = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, tokenize=False)
            completion = await server.completion(prompt=prompt + prefill, n=n, **sampling)
            replies = [prefill + (choice.text or "") for choice in completion.choices]
        else:
            completion = await server.chat_completion(messages=messages, n=n, **sampling)
            replies = [choice.message.content or "" for choice in completion.choices]
        return messages, replies

    async def sample_group(self, item: Any) -> Optional[tuple[list[dict], list[str], list[Any]]]:
        """``group_size`` training replies to ``item`` through a ManagedServer: ``(prompt messages, replies,
        tracked sequence nodes)``, or ``None`` (with a warning) when the nodes do not pair with the
        replies."""
        async with self.server.managed_server(tokenizer=self.tokenizer) as managed:
            messages, replies = await self._sample(
                managed,
                item,
                self.config.group_size,
                max_tokens=self.generation_budget,
                temperature=self.config.temperature,
                top_p=self.config.top_p,
            )
            nodes = managed.get_state()["nodes"]
        if len(nodes) != len(replies):
            logger.warning(
                "%s: %d replies but %d tracked sequences; skipping the item",
                self.name,
                len(replies),
                len(nodes),
            )
            return None
        return messages, replies, nodes

    @staticmethod
    def build_group(
        messages: list[dict],
        replies: Sequence[str],
        nodes: Sequence[Any],
        scores: Sequence[float],
        overrides: Optional[Sequence[dict[str, Any]]] = None,
    ) -> ScoredDataGroup:
        """The scored group of sampled replies: each node's tokens, masks and logprobs, its score and the
        chat ending in the reply (and its ``overrides`` entry when given)."""
        group = ScoredDataGroup(tokens=[], masks=[], scores=[], inference_logprobs=[], messages=[])
        for reply, node, score in zip(replies, nodes, scores, strict=True):
            group["tokens"].append(list(node.tokens))
            group["masks"].append(list(node.masked_tokens))
            group["inference_logprobs"].append(list(node.logprobs))
            group["scores"].append(score)
            group["messages"].append([*messages, {"role": "assistant", "content": reply}])
        if overrides is not None:
            group["overrides"] = list(overrides)
        return group

    async def collect_trajectories(self, item: Any) -> tuple[Optional[ScoredDataGroup], list]:
        sampled = await self.sample_group(item)
        if sampled is None:
            return None, []
        messages, replies, nodes = sampled
        scores = [float(s) for s in await self.score_replies_async(replies, item)]
        self.percent_correct_buffer.extend(1.0 if s >= self.correct_threshold else 0.0 for s in scores)
        self.on_group_scored(item, scores)
        return self.build_group(messages, replies, nodes, scores), []

    # -- evaluation -------------------------------------------------------------------------------------
    async def sample_eval_reply(self, item: Any, sem: asyncio.Semaphore) -> tuple[list[dict], str]:
        """One evaluation reply to ``item`` (at ``eval_temperature``, under ``sem``): ``(prompt messages,
        reply)``; the reply is empty when the server returned no choice."""
        async with sem:
            messages, replies = await self._sample(
                self.server,
                item,
                1,
                max_tokens=self.generation_budget,
                temperature=self.config.eval_temperature,
                split="eval",
            )
        return messages, replies[0] if replies else ""

    async def _eval_one(self, item: Any, sem: asyncio.Semaphore) -> dict[str, Any]:
        messages, reply = await self.sample_eval_reply(item, sem)
        score = float((await self.score_replies_async([reply], item))[0])
        return {
            "messages": [*messages, {"role": "assistant", "content": reply}],
            **self.eval_sample_fields(item),
            "score": score,
            "correct": score >= self.correct_threshold,
        }

    def evaluation_metrics(self, samples: Sequence[dict[str, Any]]) -> dict[str, float]:
        """The logged metrics of the evaluation samples: ``eval/percent_correct``, ``eval/mean_score`` and
        :meth:`extra_eval_metrics`."""
        return {
            "eval/percent_correct": mean([1.0 if s["correct"] else 0.0 for s in samples]),
            "eval/mean_score": mean([s["score"] for s in samples]),
            **self.extra_eval_metrics(samples),
        }

    def evaluation_summary(self, metrics: dict[str, float], samples: Sequence[dict[str, Any]]) -> str:
        """The line printed after an evaluation."""
        return (
            f"{self.name} evaluation: percent_correct={metrics['eval/percent_correct']:.4f} "
            f"mean_score={metrics['eval/mean_score']:.4f} on {len(samples)} items"
        )

    async def evaluate(self, *args: Any, **kwargs: Any) -> None:
        items = self.limited_eval_items()
        if not items:
            logger.warning("%s: no evaluation items; nothing evaluated", self.name)
            return
        results, start, end = await self.run_evaluation(self._eval_one, items)
        samples = [s for s in results if s is not None]  # an item _eval_one could not pose is left out
        if not samples:
            logger.warning("%s: no evaluation item could be answered; nothing evaluated", self.name)
            return
        metrics = self.evaluation_metrics(samples)
        await self.report_evaluation(
            metrics,
            samples,
            start,
            end,
            {"temperature": self.config.eval_temperature, "max_tokens": self.generation_budget},
            self.evaluation_summary(metrics, samples),
        )

    # -- checkpoints ------------------------------------------------------------------------------------
