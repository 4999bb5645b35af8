"""A ``verifiers`` (0.4, ``verifiers.v1``) taskset as an environment: its tasks, tools and rewards, our servers.

``--env.vf_env_name`` names an installed taskset package (the id ``vf eval`` takes; a hub id
``owner/name@version`` resolves to the installed ``name``), ``--env.vf_env_args`` (JSON) its config fields.
Every task is one item, played as an episode through this library's inference servers (ManagedServer:
token-exact over every turn for ``serve``; any chat endpoint for ``process`` and ``evaluate``):

* the opening chat is the task's ``system_prompt`` and ``prompt`` (text or messages); when the task or
  the taskset has ``toolsets``, their ``@vf.tool`` functions are declared in the system turn (Hermes
  ``<tools>``, named ``<toolset>_<tool>`` as verifiers names them);
* the model's turns follow verifiers' chat loop: each ``<tool_call>`` of a reply runs on its toolset (in
  this process, through the toolset's own MCP registration: its schemas, argument checks and results)
  and the answers come back in a ``tool`` turn; a reply without a call ends the episode, as do the
  task's ``@vf.stop`` predicates on the trace (checked before each further model call), ``max_turns``
  and the token budgets. Toolsets share the rollout's ``trace.state`` as verifiers' state channel does;
* the score is the task's reward: ``Task.score`` on a verifiers ``Trace`` of the conversation (assistant
  turns with their ``tool_calls``, one ``tool`` message per call), i.e. the weighted sum of its
  ``@vf.reward`` functions and judges (``trace.reward``); each reward and ``@vf.metric`` is also logged.

The last ``eval_size`` tasks are held out for evaluation (``--env.eval_vf_env_args`` evaluates another
configuration of the taskset instead). Every scored group is returned; the library decides what to send.

Not carried (the environment stops at start-up with one line naming the feature, see
:class:`VerifiersUnsupported`): a taskset package exporting its own (multi-agent) ``Env``; tasks that need
a runtime (``NEEDS_CONTAINER``, or their own ``setup``/``finalize`` hooks); ``@vf.intercept`` hooks and
``@vf.stop`` predicates on a ``Request`` or ``Response``; ``--env.turn_level_advantages`` (verifiers rewards
the whole rollout). Harness programs (``bash``, ``codex``, ...) are
not run: the model converses directly. Rewards that need a ``runtime`` are skipped by verifiers' own
scoring (it logs them).

``python environments/verifiers_server.py {serve,process,evaluate} --env.vf_env_name NAME --env.vf_env_args '{...}'``
"""

from __future__ import annotations

import asyncio
import itertools
import json
import logging
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Optional

from pydantic import Field

from atroposlib.envs.config_defaults import LocalServerDefaults
from atroposlib.envs.episodes import END_LENGTH, Episode, Feedback, episodes_to_group
from atroposlib.envs.groups import ScoredDataGroup
from atroposlib.envs.multi_turn import MultiTurnEnv
from atroposlib.envs.tools import tool_schema
from atroposlib.envs.tools.base import ToolError
from atroposlib.envs.tools.calls import ToolTurn
from atroposlib.envs.tools.mcp_client import result_text
from atroposlib.envs.tools.research import truncate
from atroposlib.envs.tools.turns import ToolLimitsConfig, ToolTally

logger = logging.getLogger(__name__)

TOOLS_PROMPT = (
    "You can call these tools:\n<tools>\n{tools}\n</tools>\n\n"
    'To call a tool, write <tool_call>{{"name": "tool_name", "arguments": {{...}}}}</tool_call> with valid '
    "JSON inside the tags. Results come back in <tool_response> blocks. When you are done, reply without "
    "any tool call."
)
_TOOL_CALL_BLOCK = re.compile(r"<tool_call>.*?</tool_call>", re.DOTALL)


class VerifiersUnsupported(ValueError):
    """A verifiers feature this environment does not carry; the message names it."""


# ---------------------------------------------------------------------------------------------------------
# Loading a taskset
# ---------------------------------------------------------------------------------------------------------
def _check_carried(name: str, task: Any) -> None:
    """Raise :class:`VerifiersUnsupported` naming the first feature of the taskset that is not carried."""
    import verifiers.v1 as vf
    from verifiers.v1.session import hook_boundary
    from verifiers.v1.trace import Trace
    from verifiers.v1.utils import loaders
    from verifiers.v1.utils.decorators import discover_decorated

    env_cls = loaders.environment_class(name)
    if env_cls is not vf.SingleAgentEnv:
        raise VerifiersUnsupported(
            f"verifiers taskset {name!r} exports its own Env ({env_cls.__name__}): "
            "multi-agent environments are not carried"
        )
    task_cls = type(task)
    overridden = [
        hook for hook in ("setup", "finalize") if getattr(task_cls, hook) is not getattr(vf.Task, hook)
    ]
    if task_cls.NEEDS_CONTAINER or overridden:
        why = f"its own {' and '.join(overridden)} hook" if overridden else "NEEDS_CONTAINER"
        raise VerifiersUnsupported(
            f"verifiers taskset {name!r}: task {task_cls.__name__} needs a runtime ({why}): "
            "sandboxes and containers are not carried"
        )
    if discover_decorated(task, "intercept"):
        raise VerifiersUnsupported(
            f"verifiers taskset {name!r}: @vf.intercept hooks rewrite requests and responses, which is not carried"
        )
    for stop in task.hooks("stop"):
        if hook_boundary(stop, allow_trace=True) is not Trace:
            raise VerifiersUnsupported(
                f"verifiers taskset {name!r}: @vf.stop {stop.__name__!r} reads a Request or Response; "
                "only stops on the Trace are carried"
            )


def load_tasks(name: str, args: dict[str, Any], limit: int) -> tuple[Any, list[Any]]:
    """``(taskset, tasks)`` of the installed taskset ``name`` configured by ``args`` (at most ``limit``
    tasks); raises :class:`VerifiersUnsupported` for what is not carried and ``ValueError`` for a bad name
    or config."""
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
    tasks = list(itertools.islice(iter(taskset), limit))
    if not tasks:
        raise ValueError(f"verifiers taskset {name!r} yielded no tasks")
    _check_carried(name, tasks[0])
    return taskset, tasks


# ---------------------------------------------------------------------------------------------------------
# Toolsets, run in this process
# ---------------------------------------------------------------------------------------------------------
class VerifiersTool:
    """One ``@vf.tool`` of a toolset as a :class:`~atroposlib.envs.tools.base.Tool`: the schema and the
    answers of the toolset's own MCP registration, named ``<toolset>_<tool>`` (bare for a toolset whose
    ``TOOL_PREFIX`` is None), answers cut to ``max_chars``; an error result raises ToolError."""

    def __init__(self, server: Any, listed: Any, prefix: str, max_chars: int):
        self.server = server
        self.raw_name = str(listed.name)
        self.name = f"{prefix}_{self.raw_name}" if prefix else self.raw_name
        self.description = str(listed.description or self.name)
        self.parameters: dict[str, Any] = dict(listed.input_schema or {}) or {
            "type": "object",
            "properties": {},
        }
        self.max_chars = max_chars

    async def call(self, arguments: dict[str, Any]) -> str:
        from mcp.server.mcpserver.exceptions import ToolError as McpToolError

        try:
            result = await self.server.call_tool(self.raw_name, arguments)
        except McpToolError as exc:  # what the toolset's MCP server would answer as an error result
            raise ToolError(str(exc)) from None
        text = truncate(result_text(result), self.max_chars)
        if getattr(result, "is_error", False):
            raise ToolError(text or f"{self.name!r} failed")
        return text


@dataclass
class RolloutState:
    """The rollout's ``trace.state`` (verifiers' state channel): toolsets read a copy validated into their
    own state type before each call and write it back after."""

    value: Any

    def bind(self, toolset: Any) -> None:
        """Route ``toolset``'s state pulls and pushes to this rollout state."""
        from pydantic import TypeAdapter

        codec = TypeAdapter(type(self.value))

        async def pull() -> Any:
            return toolset._state_adapter.validate_json(codec.dump_json(self.value))

        async def push(before: bytes) -> None:
            after = toolset._state_adapter.dump_json(toolset.state)
            if after != before:
                self.value = codec.validate_json(after)

        # compat: verifiers' ServerBase syncs state through these two hooks of the instance
        toolset._pull_state, toolset._push_state = pull, push


async def open_toolsets(
    toolsets: Sequence[Any], max_chars: int, task_data: Any = None, state: Optional[RolloutState] = None
) -> dict[str, VerifiersTool]:
    """The tools of ``toolsets`` by name, after each toolset's ``setup`` (and ``setup_task(task_data)``
    when given); ValueError when two tools share a name."""
    from mcp.server.mcpserver import MCPServer

    tools: dict[str, VerifiersTool] = {}
    for toolset in toolsets:
        if state is not None:
            state.bind(toolset)
        await toolset.setup()
        if task_data is not None:
            await toolset.setup_task(task_data)
        server = MCPServer(toolset.server_name or type(toolset).__name__)
        toolset.register(server)
        for listed in await server.list_tools():
            tool = VerifiersTool(server, listed, toolset.server_name, max_chars)
            if tool.name in tools:
                raise ValueError(f"two verifiers tools are named {tool.name!r}")
            tools[tool.name] = tool
    return tools


# ---------------------------------------------------------------------------------------------------------
# Conversations as verifiers traces
# ---------------------------------------------------------------------------------------------------------
def _message_dict(message: Any) -> dict[str, Any]:
    data = message.model_dump(exclude_none=True) if hasattr(message, "model_dump") else dict(message)
    content = data.get("content")
    if isinstance(content, list):
        data["content"] = "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict))
    return {"role": data["role"], "content": data.get("content") or ""}


def task_messages(task: Any) -> list[dict[str, Any]]:
    """The opening chat of ``task``: its system prompt, then its prompt (text or messages)."""
    data = task.data
    messages = [{"role": "system", "content": data.system_prompt}] if data.system_prompt else []
    if isinstance(data.prompt, str):
        messages.append({"role": "user", "content": data.prompt})
    else:
        messages.extend(_message_dict(m) for m in data.prompt or [])
    return messages


def with_tools(messages: Sequence[dict[str, Any]], tools: Mapping[str, Any]) -> list[dict[str, Any]]:
    """``messages`` with the tools declared at the end of the system turn (a system turn is added first
    when there is none); unchanged without tools."""
    messages = [dict(m) for m in messages]
    if not tools:
        return messages
    block = TOOLS_PROMPT.format(tools="\n".join(json.dumps(tool_schema(t)) for t in tools.values()))
    if messages and messages[0]["role"] == "system":
        messages[0]["content"] = f"{messages[0]['content']}\n\n{block}"
        return messages
    return [{"role": "system", "content": block}, *messages]


@dataclass
class Exchange:
    """One model turn: the reply and the tool calls it made (None: it made none)."""

    reply: str
    tools: Optional[ToolTurn] = None


def verifiers_messages(opening: Sequence[dict[str, Any]], exchanges: Sequence[Exchange]) -> list[Any]:
    """The conversation as verifiers messages: assistant turns carry their well-formed calls as
    ``tool_calls`` (ids ``call_<turn>_<k>``) and the text outside the call blocks; each call's answer
    (or error) is one ``tool`` message."""
    import verifiers.v1 as vf

    kinds = {"system": vf.SystemMessage, "user": vf.UserMessage, "assistant": vf.AssistantMessage}
    messages: list[Any] = [kinds[m["role"]](content=m["content"]) for m in opening]
    for turn, exchange in enumerate(exchanges):
        calls = [
            c for c in (exchange.tools.calls if exchange.tools else []) if c.name and c.arguments is not None
        ]
        ids = [f"call_{turn}_{k}" for k in range(len(calls))]
        text = _TOOL_CALL_BLOCK.sub("", exchange.reply).strip() if calls else exchange.reply
        tool_calls = [
            vf.ToolCall(id=i, name=c.name, arguments=json.dumps(c.arguments))
            for i, c in zip(ids, calls, strict=True)
        ]
        messages.append(vf.AssistantMessage(content=text, tool_calls=tool_calls or None))
        messages += [
            vf.ToolMessage(tool_call_id=i, name=c.name, content=c.output)
            for i, c in zip(ids, calls, strict=True)
        ]
    return messages


def verifiers_trace(task: Any, messages: Sequence[Any], state: Any = None) -> Any:
    """A verifiers ``Trace`` of ``task`` whose conversation is ``messages`` (assistant turns sampled)."""
    import verifiers.v1 as vf
    from verifiers.v1.graph import MessageNode
    from verifiers.v1.trace import AgentInfo, TraceTask

    nodes = [
        MessageNode(parent=k - 1 if k else None, message=m, sampled=m.role == "assistant")
        for k, m in enumerate(messages)
    ]
    extra = {} if state is None else {"state": state}
    return vf.Trace(
        task=TraceTask(type=type(task).__name__, data=task.data, key=task.key, hash=task.hash),
        agent=AgentInfo(config=vf.AgentConfig()),
        nodes=nodes,
        **extra,
    )


@dataclass
class Verdict:
    """A scored conversation: the task's reward, each reward's raw score and each metric."""

    reward: float
    rewards: dict[str, float] = field(default_factory=dict)
    metrics: dict[str, float] = field(default_factory=dict)


async def score_trace(task: Any, trace: Any) -> Verdict:
    """``Task.score`` on ``trace``: the weighted reward, the raw reward scores and the metrics."""
    await task.score(trace)
    rewards = {k: float(r.score) for k, r in trace.rewards.items() if r is not None}
    metrics = {k: float(v) for k, v in trace.metrics.items() if v is not None}
    return Verdict(float(trace.reward), rewards, metrics)


# ---------------------------------------------------------------------------------------------------------
# One rollout
# ---------------------------------------------------------------------------------------------------------
@dataclass
class VerifiersSession:
    """One rollout of a task: the opening chat, the tools, the turns so far and the shared state."""

    task: Any
    opening: list[dict[str, Any]]  #: the task's chat as verifiers records it (no tool declarations)
    tools: dict[str, VerifiersTool]
    limits: ToolLimitsConfig
    state: RolloutState
    toolsets: list[Any] = field(default_factory=list)  #: the per-rollout toolsets, torn down by close()
    exchanges: list[Exchange] = field(default_factory=list)
    tally: ToolTally = field(default_factory=ToolTally)
    stopped_by: Optional[str] = None
    verdict: Optional[Verdict] = None

    @property
    def messages(self) -> list[dict[str, Any]]:
        """The chat sent to the model first: the opening with the tools declared."""
        return with_tools(self.opening, self.tools)

    def trace(self) -> Any:
        """The verifiers trace of the conversation so far."""
        return verifiers_trace(self.task, verifiers_messages(self.opening, self.exchanges), self.state.value)

    async def _stop_fired(self) -> Optional[str]:
        from verifiers.v1.session import call_hook
        from verifiers.v1.trace import Trace

        trace = self.trace()
        for stop in self.task.hooks("stop"):
            if await call_hook(stop, {Trace: trace}):
                return stop.__name__
        return None

    async def step(self, reply: str, turn: int) -> Feedback:
        """Run the reply's tool calls; the episode ends on a reply without calls or a ``@vf.stop``."""
        if not self.tools:
            self.exchanges.append(Exchange(reply))
            return Feedback(done=True)
        tools, feedback = await self.tally.run(reply, self.tools, self.limits)
        self.exchanges.append(Exchange(reply, tools if tools.made_calls else None))
        if feedback is None or feedback.done:
            return feedback or Feedback(done=True)
        self.stopped_by = await self._stop_fired()
        if self.stopped_by is not None:
            return Feedback(done=True, info={"stop": self.stopped_by})
        return feedback

    async def close(self) -> None:
        """Tear down the per-rollout toolsets (what their ``setup`` registered to close)."""
        for toolset in self.toolsets:
            await toolset._exit_stack.aclose()
        self.toolsets = []

    async def score(self) -> Verdict:
        """Score the conversation with the task's rewards (once; later calls return the same verdict)."""
        if self.verdict is None:
            self.verdict = await score_trace(self.task, self.trace())
        return self.verdict


class VerifiersRollouts:
    """The tasks of a taskset and how to start a rollout of one (shared by training and evaluation)."""

    def __init__(self, taskset: Any, limits: ToolLimitsConfig):
        self.taskset = taskset
        self.limits = limits
        self.shared_tools: Optional[dict[str, VerifiersTool]] = None
        self._lock = asyncio.Lock()

    async def _taskset_tools(self) -> dict[str, VerifiersTool]:
        async with self._lock:  # one global instance per taskset toolset, set up once
            if self.shared_tools is None:
                toolsets = type(self.taskset).toolsets(self.taskset.config)
                self.shared_tools = await open_toolsets(toolsets, self.limits.tool_output_chars)
        return self.shared_tools

    async def session(self, task: Any, opening: Optional[list[dict[str, Any]]] = None) -> VerifiersSession:
        """A fresh rollout of ``task`` (opening chat: the task's, unless given): per-rollout toolsets set
        up for the task, the taskset's shared ones, and a new ``trace.state``."""
        from verifiers.v1.state import state_cls

        state = RolloutState(state_cls(type(task))())
        tools = dict(await self._taskset_tools())
        toolsets = type(task).toolsets(task.config)
        own = await open_toolsets(toolsets, self.limits.tool_output_chars, task.data, state)
        clash = sorted(set(tools) & set(own))
        if clash:
            raise ValueError(f"the task's and the taskset's toolsets both offer {clash[0]!r}")
        tools.update(own)
        opening = opening if opening is not None else task_messages(task)
        return VerifiersSession(task, opening, tools, self.limits, state, toolsets)


# ---------------------------------------------------------------------------------------------------------
# The environment
# ---------------------------------------------------------------------------------------------------------
class VerifiersEnvConfig(ToolLimitsConfig):
    """ToolLimitsConfig plus which verifiers taskset to load."""

    vf_env_name: str = Field("", description="installed verifiers taskset id (package name or owner/name)")
    vf_env_args: dict[str, Any] = Field(default_factory=dict, description="the taskset's config fields")
    eval_vf_env_args: Optional[dict[str, Any]] = Field(
        None, description="config fields of the evaluation taskset (default: hold out eval_size tasks)"
    )
    eval_size: int = Field(20, ge=1, description="tasks held out for evaluation without eval_vf_env_args")
    max_tasks: int = Field(
        100_000, ge=1, description="read at most this many tasks (tasksets may be infinite)"
    )


class VerifiersEnv(LocalServerDefaults, MultiTurnEnv):
    """A verifiers taskset's tasks, tools and rewards (see the module docstring)."""

    name = "verifiers"
    env_config_cls = VerifiersEnvConfig
    config: VerifiersEnvConfig
    #: An evaluation episode counts as correct when its reward is at least this.
    correct_threshold = 1.0

    def __init__(self, config: VerifiersEnvConfig, server_configs, slurm=False, testing=False):
        super().__init__(config, server_configs, slurm, testing)
        self.train: list[Any] = []
        self.test: list[Any] = []
        self.rollouts: Optional[VerifiersRollouts] = None
        self.eval_rollouts: Optional[VerifiersRollouts] = None

    async def setup(self) -> None:
        config = self.config
        if config.turn_level_advantages:
            raise VerifiersUnsupported(
                "--env.turn_level_advantages: verifiers tasks reward the whole rollout (no per-turn rewards)"
            )
        taskset, tasks = load_tasks(config.vf_env_name, config.vf_env_args, config.max_tasks)
        self.rollouts = self.eval_rollouts = VerifiersRollouts(taskset, config)
        if config.eval_vf_env_args is not None:
            self.train = tasks
            eval_taskset, self.test = load_tasks(
                config.vf_env_name, config.eval_vf_env_args, config.max_tasks
            )
            self.eval_rollouts = VerifiersRollouts(eval_taskset, config)
        else:
            held = min(config.eval_size, max(1, len(tasks) // 10)) if len(tasks) > 1 else 0
            self.train, self.test = tasks[: len(tasks) - held], tasks[len(tasks) - held :] or tasks
        logger.info(
            "%s: %d training and %d evaluation tasks", config.vf_env_name, len(self.train), len(self.test)
        )

    async def get_next_item(self) -> Any:
        return self.next_in_turn(self.train)

    def eval_items(self) -> Sequence[Any]:
        return self.test

    async def new_session(self, item: Any, *, evaluation: bool = False) -> VerifiersSession:
        rollouts = self.eval_rollouts if evaluation else self.rollouts
        assert rollouts is not None, "setup() loads the taskset"
        return await rollouts.session(item)

    async def play(
        self, item: Any, *, evaluation: bool = False
    ) -> Optional[tuple[VerifiersSession, Episode]]:
        """Play one episode and score it with the task's rewards (see :meth:`MultiTurnEnv.play`)."""
        played = await super().play(item, evaluation=evaluation)
        if played is not None:
            session, episode = played
            if episode.end_reason == END_LENGTH:  # the cut reply ran no tools but is part of the trace
                session.exchanges.append(Exchange(episode.turns[-1].reply))
            await session.score()
        return played

    def outcome_reward(self, session: VerifiersSession, episode: Episode) -> float:
        assert session.verdict is not None, "play() scores every episode"
        return session.verdict.reward

    def episode_metrics(self, session: VerifiersSession, episode: Episode) -> dict[str, float]:
        verdict = session.verdict
        assert verdict is not None, "play() scores every episode"
        return {
            **{f"reward_{k}": v for k, v in verdict.rewards.items()},
            **{f"metric_{k}": v for k, v in verdict.metrics.items()},
            "tool_calls": float(session.tally.calls),
            "tool_errors": float(session.tally.errors),
        }

    def eval_sample_fields(self, item: Any, session: VerifiersSession, episode: Episode) -> dict[str, Any]:
        return {"task_idx": item.data.idx, "task_key": item.key, "stopped_by": session.stopped_by}

    async def collect_trajectories(self, item: Any) -> tuple[Optional[ScoredDataGroup], list]:
        """``group_size`` scored episodes of ``item`` as one group (every group is returned: the library
        decides about groups whose scores are all equal)."""
        rollouts = await asyncio.gather(*(self.play(item) for _ in range(self.config.group_size)))
        kept = [rollout for rollout in rollouts if rollout is not None]  # untracked ones are left out
        for session, episode in kept:
            self._note_training_episode(session, episode)
        if not kept:
            return None, []
        return episodes_to_group([e for _, e in kept], [self.score(s, e) for s, e in kept]), []

    def _note_training_episode(self, session: VerifiersSession, episode: Episode) -> None:
        self.train_scores.append(self.score(session, episode))
        for key, value in self.episode_metrics(session, episode).items():
            self.train_metrics.setdefault(key, []).append(float(value))


if __name__ == "__main__":
    VerifiersEnv.cli()
