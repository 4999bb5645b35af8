"""A ``verifiers`` (0.4, ``verifiers.v1``) taskset as an environment: its tasks, its rewards, our servers.

``--env.vf_env_name`` names an installed taskset package (the id ``vf eval`` takes; a hub id
``owner/name@version`` resolves to the installed ``name``), ``--env.vf_env_args`` (JSON) its config fields.
Every task of the taskset is one item: the prompt is the task's ``system_prompt`` and ``prompt`` (text or
messages), the replies are sampled through this library's inference servers (ManagedServer: token-exact
for ``serve``; any chat endpoint for ``process`` and ``evaluate``), and each reply's score is the task's own
reward, ``Task.score`` on a verifiers ``Trace`` of the conversation (the weighted sum of its ``@vf.reward``
functions and judges, ``trace.reward``). The last ``eval_size`` tasks are held out for evaluation
(``--env.eval_vf_env_args`` evaluates another configuration of the taskset instead, e.g. its test split).

Carried: single-turn tasksets whose rewards read the task and the trace. Not carried (the environment stops
at start-up with one line naming the feature): a taskset package that exports its own multi-agent ``Env``;
tasks or tasksets with ``toolsets`` (verifiers runs tools as MCP servers inside its harness programs);
rewards that need a ``runtime`` (a sandbox or container) are skipped by verifiers' own scoring and logged.
Harness programs (``bash``, ``codex``, ...) are not run: the model answers in one chat turn.

``python environments/verifiers_server.py {serve,process,evaluate} --env.vf_env_name NAME --env.vf_env_args '{...}'``
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Sequence
from typing import Any, Optional

from pydantic import Field

from atroposlib.envs.config_defaults import LocalServerDefaults
from atroposlib.envs.single_turn import SingleTurnEnv, SingleTurnEnvConfig

logger = logging.getLogger(__name__)


class VerifiersEnvConfig(SingleTurnEnvConfig):
    """SingleTurnEnvConfig plus which verifiers taskset to load."""

    vf_env_name: str = Field("", description="installed verifiers taskset id (package name or owner/name)")
    vf_env_args: dict[str, Any] = Field(default_factory=dict, description="the taskset's config fields")
    eval_vf_env_args: Optional[dict[str, Any]] = Field(
        None, description="config fields of the evaluation taskset (default: hold out eval_size tasks)"
    )
    eval_size: int = Field(20, ge=1, description="tasks held out for evaluation without eval_vf_env_args")
    max_tasks: int = Field(
        100_000, ge=1, description="read at most this many tasks (tasksets may be infinite)"
    )


class VerifiersUnsupported(ValueError):
    """A verifiers feature this environment does not carry; the message names it."""


def _message_dict(message: Any) -> dict[str, Any]:
    data = message.model_dump(exclude_none=True) if hasattr(message, "model_dump") else dict(message)
    content = data.get("content")
    if isinstance(content, list):
        data["content"] = "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return {"role": data["role"], "content": data.get("content") or ""}


def load_tasks(name: str, args: dict[str, Any], limit: int) -> tuple[Any, list[Any]]:
    """``(taskset, tasks)`` of the installed taskset ``name`` configured by ``args``; raises
    :class:`VerifiersUnsupported` for what is not carried and ``ValueError`` for a bad name or config."""
    import verifiers.v1 as vf
    from verifiers.v1.utils import loaders

    if not name:
        raise ValueError("--env.vf_env_name is not set: name an installed verifiers taskset")
    try:
        config = loaders.taskset_config_type(name).model_validate({**args, "id": name})
        taskset = loaders.load_taskset(config)
    except ModuleNotFoundError as exc:
        raise ValueError(f"verifiers taskset {name!r}: {exc}") from None
    except Exception as exc:  # pydantic errors of the taskset's own config
        raise ValueError(
            f"verifiers taskset {name!r}: bad --env.vf_env_args: {' '.join(str(exc).split())}"
        ) from None
    if loaders.environment_class(name) is not vf.SingleAgentEnv:
        raise VerifiersUnsupported(
            f"verifiers taskset {name!r} exports its own Env ({loaders.environment_class(name).__name__}): "
            "multi-agent environments are not carried"
        )
    if type(taskset).toolsets(config) or type(taskset).task_type().toolsets(config.task):
        raise VerifiersUnsupported(
            f"verifiers taskset {name!r} has toolsets: tools run as MCP servers inside verifiers' harness "
            "programs, which are not carried"
        )
    tasks = list(itertools.islice(iter(taskset), limit))
    if not tasks:
        raise ValueError(f"verifiers taskset {name!r} yielded no tasks")
    return taskset, tasks


class VerifiersEnv(LocalServerDefaults, SingleTurnEnv):
    """A verifiers taskset's tasks and rewards (see the module docstring)."""

    name = "verifiers"
    env_config_cls = VerifiersEnvConfig
    config: VerifiersEnvConfig
    #: A reply counts as correct in evaluation when its reward is at least this.
    correct_threshold = 1.0

    async def setup(self) -> None:
        config = self.config
        _, tasks = load_tasks(config.vf_env_name, config.vf_env_args, config.max_tasks)
        if config.eval_vf_env_args is not None:
            self.train = tasks
            _, self.test = load_tasks(config.vf_env_name, config.eval_vf_env_args, config.max_tasks)
        else:
            held = min(config.eval_size, max(1, len(tasks) // 10)) if len(tasks) > 1 else 0
            self.train, self.test = tasks[: len(tasks) - held], tasks[len(tasks) - held :] or tasks
        logger.info(
            "%s: %d training and %d evaluation tasks", config.vf_env_name, len(self.train), len(self.test)
        )

    def prompt_messages(self, task: Any) -> list[dict[str, Any]]:
        data = task.data
        messages = [{"role": "system", "content": data.system_prompt}] if data.system_prompt else []
        if isinstance(data.prompt, str):
            messages.append({"role": "user", "content": data.prompt})
        else:
            messages.extend(_message_dict(m) for m in data.prompt or [])
        return messages

    async def score_trace(self, task: Any, reply: str) -> float:
        """The task's reward of the conversation ending in ``reply`` (``Task.score`` on a verifiers trace)."""
        import verifiers.v1 as vf
        from verifiers.v1.graph import MessageNode
        from verifiers.v1.trace import AgentInfo, TraceTask

        kinds = {"system": vf.SystemMessage, "user": vf.UserMessage, "assistant": vf.AssistantMessage}
        chat = [*self.prompt_messages(task), {"role": "assistant", "content": reply}]
        nodes = [
            MessageNode(
                parent=k - 1 if k else None,
                message=kinds[m["role"]](content=m["content"]),
                sampled=k == len(chat) - 1,
            )
            for k, m in enumerate(chat)
        ]
        trace = vf.Trace(
            task=TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
            agent=AgentInfo(config=vf.AgentConfig()),
            nodes=nodes,
        )
        await task.score(trace)
        return float(trace.reward)

    async def score_replies_async(self, replies: Sequence[str], item: Any) -> list[float]:
        return [await self.score_trace(item, reply) for reply in replies]

    def eval_sample_fields(self, task: Any) -> dict[str, Any]:
        return {"task_idx": task.data.idx, "task_key": task.key}


if __name__ == "__main__":
    VerifiersEnv.cli()
