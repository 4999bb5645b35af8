"""T1 tool planning: plan each user turn of a multi-domain travel conversation as tool calls.

Data: T1 (``datasets.load_dataset("capitalone/T1")``, train split; 5% of the conversations held out for
evaluation, ``--env.eval_split`` for a hub split): travel conversations over flights, hotels, restaurants
and attractions. Each turn has a ``Role`` (assistant / user), its text ``Filled_Template`` and, for user
turns, the ground-truth plan ``Filled_Plan`` (Python calls of the fourteen T1 tools, see
``t1_tools.py``). Rows are one turn each, grouped into conversations by ``ID`` in file order, or one
conversation each with the turns in a ``conversation`` list. ``--env.dataset_path FILE`` reads local
rows of either form.

Modes (``--env.mode``):

* ``multistep`` (default) - the whole conversation in one episode: the opening assistant turns (the
  greeting) as recorded, then each user turn in order; the model answers each one (tool calls, or text
  when nothing is to be done) and its own answer stays in the history, as in T1's multi-step evaluation.
  Nothing is executed: the plan is what is scored;
* ``single`` - one episode per user turn, the recorded conversation before it as history.

Reward per turn (``t1_scoring.py``): the mean of the tool-call F1 (calls with their literal arguments)
and the tool-name F1 against the plan; a plan without calls wants a reply without calls. An episode
scores the mean over its user turns (turns not reached count 0). Only the model's tokens are trained
(ManagedServer); the history and user turns are masked.

``python environments/t1_tool_planning/t1_env.py {serve,process,evaluate} --openai.base_url ...``
"""

from __future__ import annotations

import logging
import random
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from pydantic import Field

from atroposlib.envs.base import EvalHandlingEnum
from atroposlib.envs.config_defaults import LocalServerDefaults
from atroposlib.envs.data_loading import DatasetError, hub_split, load_rows
from atroposlib.envs.episodes import Episode, Feedback
from atroposlib.envs.multi_turn import MultiTurnEnv, MultiTurnEnvConfig

try:
    from environments.t1_tool_planning.t1_prompts import SYSTEM_PROMPT
    from environments.t1_tool_planning.t1_scoring import PlanCall, PlanError, plan_calls, score_turn
except ModuleNotFoundError:  # run as a script: this folder is on the path
    from t1_prompts import SYSTEM_PROMPT
    from t1_scoring import PlanCall, PlanError, plan_calls, score_turn

logger = logging.getLogger(__name__)

TURN_FIELDS = ("Role", "Filled_Template")


@dataclass(frozen=True)
class T1Task:
    """The recorded history before the first played turn, and the user turns to play with their plans."""

    history: tuple[dict[str, str], ...]
    user_turns: tuple[tuple[str, tuple[PlanCall, ...]], ...]


def conversations_of(rows: list[dict[str, Any]], source: str) -> list[list[dict[str, Any]]]:
    """Conversations (lists of turns) from per-turn rows grouped by ``ID`` or rows with a ``conversation``."""
    if rows and "conversation" in rows[0]:
        conversations = []
        for index, row in enumerate(rows):
            turns = row.get("conversation")
            if not isinstance(turns, list) or not all(isinstance(t, dict) for t in turns):
                raise DatasetError(f"{source}: row {index}: field 'conversation' must be a list of turns")
            for turn in turns:
                for name in TURN_FIELDS:
                    if turn.get(name) is None:
                        raise DatasetError(f"{source}: row {index}: a turn lacks field {name!r}")
            conversations.append(turns)
        return conversations
    grouped: dict[str, list[dict[str, Any]]] = {}
    for index, row in enumerate(rows):
        for name in ("ID", *TURN_FIELDS):
            if row.get(name) is None:
                raise DatasetError(f"{source}: row {index}: missing field {name!r}")
        grouped.setdefault(str(row["ID"]), []).append(row)
    return list(grouped.values())


def _role(turn: dict[str, Any]) -> str:
    return str(turn["Role"]).strip().lower()


def tasks_of(conversation: list[dict[str, Any]], mode: str) -> list[T1Task]:
    """The tasks of one conversation in ``mode``; PlanError for a plan that is not Python."""
    history: list[dict[str, str]] = [{"role": "system", "content": SYSTEM_PROMPT}]
    user_turns: list[tuple[str, tuple[PlanCall, ...]]] = []
    tasks: list[T1Task] = []
    for turn in conversation:
        role, text = _role(turn), str(turn["Filled_Template"])
        if role == "user":
            calls = tuple(plan_calls(turn.get("Filled_Plan")))
            if mode == "single":
                tasks.append(T1Task((*history, {"role": "user", "content": text}), ((text, calls),)))
            user_turns.append((text, calls))
        if (
            mode == "single" or not user_turns
        ):  # multistep: only the assistant turns before the first user turn
            if role in ("user", "assistant"):
                history.append({"role": role, "content": text})
    if mode == "multistep" and user_turns:
        first = user_turns[0][0]
        tasks.append(T1Task((*history, {"role": "user", "content": first}), tuple(user_turns)))
    return tasks


class T1EnvConfig(MultiTurnEnvConfig):
    """MultiTurnEnvConfig plus the data and the mode."""

    group_size: int = 8
    max_turns: int = Field(20, ge=1, description="user turns played per episode at most")
    max_tokens_per_turn: int = Field(512, ge=1, description="generation budget of one reply in tokens")
    max_token_length: int = Field(16384, description="budget of a whole episode's sequence in tokens")
    dataset_name: str = Field("capitalone/T1", description="hub set of T1 conversations")
    dataset_config: Optional[str] = Field(None, description="configuration of the hub set")
    dataset_split: str = Field("train", description="hub split to train on")
    eval_split: Optional[str] = Field(None, description="hub split to evaluate on (default: 5% held out)")
    dataset_path: Optional[str] = Field(None, description="local file of T1 turns or conversations")
    eval_dataset_path: Optional[str] = Field(None, description="local evaluation file (default: 5% held out)")
    mode: Literal["multistep", "single"] = Field(
        "multistep", description="whole conversations or single turns"
    )


@dataclass
class T1Session:
    """One episode: answers each user turn, scores it against its plan, feeds the next user turn."""

    task: T1Task
    messages: list[dict[str, Any]] = field(default_factory=list)
    turn_scores: list[dict[str, float]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.messages = [dict(m) for m in self.task.history]

    async def step(self, reply: str, turn: int) -> Feedback:
        scores = score_turn(list(self.task.user_turns[turn][1]), reply)
        self.turn_scores.append(scores)
        if turn + 1 >= len(self.task.user_turns):
            return Feedback(done=True, info=scores)
        return Feedback(
            messages=[{"role": "user", "content": self.task.user_turns[turn + 1][0]}], info=scores
        )

    def mean(self, key: str) -> float:
        return sum(s[key] for s in self.turn_scores) / len(self.task.user_turns)


class T1ToolPlanningEnv(LocalServerDefaults, MultiTurnEnv):
    """T1 conversations planned as tool calls (see the module docstring)."""

    name = "t1_tool_planning"
    env_config_cls = T1EnvConfig
    config: T1EnvConfig
    default_model = "Qwen/Qwen3-1.7B"
    default_server_settings = {"server_type": "vllm", "num_max_requests_at_once": 32}

    def __init__(self, config: T1EnvConfig, server_configs, slurm=False, testing=False):
        super().__init__(config, server_configs, slurm, testing)
        self.train: list[T1Task] = []
        self.test: list[T1Task] = []

    @classmethod
    def default_env_config(cls) -> T1EnvConfig:
        return T1EnvConfig(
            total_steps=1000, batch_size=512, eval_handling=EvalHandlingEnum.LIMIT_TRAIN, eval_limit=200
        )

    def _conversation_tasks(self, rows: list[dict[str, Any]], source: str) -> list[list[T1Task]]:
        result, skipped = [], 0
        for conversation in conversations_of(rows, source):
            try:
                tasks = tasks_of(conversation, self.config.mode)
            except PlanError:
                skipped += 1
                continue
            tasks = [T1Task(t.history, t.user_turns[: self.config.max_turns]) for t in tasks]
            if tasks:
                result.append(tasks)
        if skipped:
            logger.warning(
                "%s: %s: %d conversations skipped (a plan is not Python)", self.name, source, skipped
            )
        if not result:
            raise DatasetError(f"{source}: no conversation with a user turn")
        return result

    async def setup(self) -> None:
        cfg = self.config
        hub = cfg.dataset_name
        rows = load_rows(cfg.dataset_path, hub_split(hub, cfg.dataset_split, cfg.dataset_config), [], hub)
        conversations = self._conversation_tasks(rows, str(cfg.dataset_path or hub))
        if cfg.eval_dataset_path or (cfg.eval_split and not cfg.dataset_path):
            eval_name = f"{hub} ({cfg.eval_split})"
            eval_loader = hub_split(hub, cfg.eval_split or "test", cfg.dataset_config)
            eval_rows = load_rows(cfg.eval_dataset_path, eval_loader, [], eval_name)
            held_out = self._conversation_tasks(eval_rows, str(cfg.eval_dataset_path or eval_name))
        else:  # hold out whole conversations, so no evaluation turn was seen in training
            random.Random(42).shuffle(conversations)
            count = max(1, round(0.05 * len(conversations)))
            held_out, conversations = conversations[:count], (conversations[count:] or conversations)
        self.train = [task for tasks in conversations for task in tasks]
        random.Random(42).shuffle(self.train)
        self.test = [task for tasks in held_out for task in tasks]

    async def get_next_item(self) -> T1Task:
        return self.next_in_turn(self.train)

    def eval_items(self) -> list[T1Task]:
        return self.test

    async def new_session(self, item: T1Task, *, evaluation: bool = False) -> T1Session:
        return T1Session(item)

    def outcome_reward(self, session: T1Session, episode: Episode) -> float:
        return session.mean("reward")

    def episode_metrics(self, session: T1Session, episode: Episode) -> dict[str, float]:
        return {
            "tool_call_f1": session.mean("tool_call_f1"),
            "tool_name_f1": session.mean("tool_name_f1"),
            "turns_answered": len(session.turn_scores) / len(session.task.user_turns),
        }


if __name__ == "__main__":
    T1ToolPlanningEnv.cli()
