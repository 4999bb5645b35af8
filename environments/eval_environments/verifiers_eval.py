"""Verifiers evaluation: any installed ``verifiers`` (0.4, ``verifiers.v1``) taskset scored by its own rewards.

``--env.vf_env_name`` names the taskset (an installed package id; a hub id ``owner/name@version`` resolves to
the installed ``name``), ``--env.env_args`` (JSON) its config fields. Every task is one item: the model plays
it through the inference server as ``verifiers_server.py`` plays it (single-turn, or multi-turn with the
taskset's tools run in this process, ``@vf.stop`` on the trace, up to ``max_turns`` replies), and the
item's score is the task's reward (``Task.score`` on a verifiers trace of the conversation). What is not
carried stops the run at start-up with one line (see ``environments/README.md``).

Options (compat: the names of atroposlib 0.4.0's verifiers evaluation): ``temperature`` (default 0.0, used
instead of ``eval_temperature``), ``max_eval_items`` (-1: all tasks), ``max_concurrent`` (items in
flight, default 64, used instead of ``max_eval_workers``); ``eval_max_tokens`` bounds each reply.

Reports: ``eval/avg_score`` (the mean reward, with its standard error), ``eval/accuracy`` (share of replies
whose reward is above 0), ``eval/total_evaluated``, ``eval/total_correct``, and per reward function
``eval/<name>`` (its mean raw score) and ``eval/<name>_correct`` (replies where it is above 0); each
``@vf.metric`` as ``eval/metric_<name>``. ``samples.jsonl`` holds every conversation (tool turns
included), the gold answer when the task data has an ``answer``, the reward and the breakdown.

``python environments/eval_environments/verifiers_eval.py evaluate --env.vf_env_name NAME
--openai.base_url http://localhost:9000/v1 --openai.model_name MODEL --env.data_dir_to_save_evals evals/vf``
"""

from __future__ import annotations

import logging
import sys
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from pydantic import Field, model_validator

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from atroposlib.envs.tools.turns import ToolLimitsConfig  # noqa: E402
from atroposlib.evals import EvalConfig, EvalEnv, EvalItem, Reply, Score  # noqa: E402
from atroposlib.evals.items import Messages  # noqa: E402
from environments.verifiers_server import (  # noqa: E402
    Exchange,
    VerifiersRollouts,
    VerifiersSession,
    load_tasks,
    task_messages,
)

logger = logging.getLogger(__name__)


class VerifiersEvaluationConfig(EvalConfig):
    """EvalConfig plus the taskset, its arguments and the rollout limits."""

    vf_env_name: str = Field(
        default="", description="Installed verifiers taskset id (package or owner/name)."
    )
    env_args: dict[str, Any] = Field(default_factory=dict, description="The taskset's config fields.")
    temperature: float = Field(default=0.0, ge=0.0, description="Sampling temperature (0.0: greedy).")
    max_eval_items: int = Field(default=-1, description="Evaluate at most this many tasks (-1: all).")
    max_concurrent: int = Field(default=64, ge=1, description="Items evaluated at once.")
    max_turns: int = Field(default=10, ge=1, description="Model replies per task (tool turns in between).")
    tool_timeout_s: float = Field(default=30.0, gt=0, description="Seconds a tool call may take.")
    tool_output_chars: int = Field(default=4000, ge=100, description="Characters of one tool answer shown.")
    max_calls_per_turn: int = Field(default=8, ge=1, description="Tool calls one reply may make.")
    thinking_mode: bool = Field(
        default=False, description="Send the reasoning parameters (off: as 0.4.0 ran)."
    )
    max_tasks: int = Field(default=100_000, ge=1, description="Read at most this many tasks of the taskset.")

    @model_validator(mode="after")
    def _compat_names(self) -> VerifiersEvaluationConfig:
        # compat: temperature and max_concurrent are this evaluation's names for the core's settings
        object.__setattr__(self, "eval_temperature", self.temperature)
        object.__setattr__(self, "max_eval_workers", self.max_concurrent)
        return self


@dataclass
class Rollout(Reply):
    """A reply that ended a rollout: the last reply's text and finish reason, the whole conversation and
    the session that scores it."""

    conversation: Messages = field(default_factory=list)
    session: Optional[VerifiersSession] = None


class VerifiersEvaluationEnv(EvalEnv):
    """A verifiers taskset evaluated on the eval core (see the module docstring)."""

    name = "verifiers_evaluation"
    env_config_cls = VerifiersEvaluationConfig
    config: VerifiersEvaluationConfig
    metric = "avg_score"

    def __init__(self, config: VerifiersEvaluationConfig, server_configs: Any, slurm=False, testing=False):
        super().__init__(config, server_configs, slurm, testing)
        self.tasks: dict[str, Any] = {}
        self.rollouts: Optional[VerifiersRollouts] = None

    async def setup(self) -> None:
        cfg = self.config
        limit = cfg.max_eval_items if cfg.max_eval_items > 0 else cfg.max_tasks
        taskset, tasks = load_tasks(cfg.vf_env_name, cfg.env_args, limit)
        limits = ToolLimitsConfig(
            tool_timeout_s=cfg.tool_timeout_s,
            tool_output_chars=cfg.tool_output_chars,
            max_calls_per_turn=cfg.max_calls_per_turn,
        )
        self.rollouts = VerifiersRollouts(taskset, limits)
        self.tasks = {str(task.data.idx): task for task in tasks}
        self.items = [self._item(task) for task in tasks][: cfg.eval_limit]
        logger.info("%s: %s: %d tasks", self.name, cfg.vf_env_name, len(self.items))

    @staticmethod
    def _item(task: Any) -> EvalItem:
        return EvalItem(
            id=str(task.data.idx),
            prompt=task_messages(task),
            gold=getattr(task.data, "answer", None),
            fields={"task_key": task.key},
        )

    def generation_parameters(self) -> dict[str, Any]:
        params = super().generation_parameters()
        params.pop("n")  # one rollout per request chain
        return params

    async def _rollout(self, item: EvalItem, messages: Messages) -> Rollout:
        assert self.rollouts is not None, "setup() loads the taskset"
        session = await self.rollouts.session(self.tasks[item.id], opening=messages)
        history, reply, finish = session.messages, "", None
        try:
            for turn in range(self.config.max_turns):
                completion = await self.server.chat_completion(
                    messages=history, n=1, split="eval", **self.generation_parameters()
                )
                self.requests_sent += 1
                choice = completion.choices[0]
                reply, finish = choice.message.content or "", choice.finish_reason
                history.append({"role": "assistant", "content": reply})
                if finish == "length":  # cut off: part of the conversation, but no tools are run
                    session.exchanges.append(Exchange(reply))
                    break
                feedback = await session.step(reply, turn)
                if feedback.done:
                    break
                history.extend(feedback.messages)
        finally:
            await session.close()
        return Rollout(reply, finish, conversation=history, session=session)

    async def generate(self, item: EvalItem, messages: Messages, n: int) -> list[Reply]:
        """``n`` rollouts of the item's task, each a conversation of up to ``max_turns`` replies."""
        return [await self._rollout(item, messages) for _ in range(n)]

    async def score(self, item: EvalItem, reply: Reply) -> Score:
        if not isinstance(reply, Rollout) or reply.session is None:  # a reply that could not be had
            return Score(None)
        verdict = await reply.session.score()
        metrics = {**verdict.rewards, **{f"metric_{k}": v for k, v in verdict.metrics.items()}}
        return Score(verdict.reward, extracted=reply.text or None, method="verifiers", metrics=metrics)

    def sample_record(
        self, item: EvalItem, messages: Messages, index: int, reply: Reply, score: Score
    ) -> dict:
        record = super().sample_record(item, messages, index, reply, score)
        if isinstance(reply, Rollout):
            record["messages"] = reply.conversation
        record["gold_answer"] = item.gold
        record["correct"] = score.value is not None and score.value > 0
        return record

    def extra_metrics(self, samples: Sequence[dict[str, Any]]) -> dict[str, float]:
        scored = [s for s in samples if s["score"] is not None]
        correct = sum(1 for s in scored if s["score"] > 0)
        out = {
            "eval/accuracy": correct / len(scored) if scored else 0.0,
            "eval/total_evaluated": float(len(scored)),
            "eval/total_correct": float(correct),
        }
        rewards = sorted({k for s in scored for k in s["metrics"] if not k.startswith("metric_")})
        for name in rewards:
            out[f"eval/{name}_correct"] = float(sum(1 for s in scored if s["metrics"].get(name, 0.0) > 0))
        return out


if __name__ == "__main__":
    VerifiersEvaluationEnv.cli()
