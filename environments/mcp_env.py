"""MCP tool use: the model calls the tools of real Model Context Protocol servers to serve a request.

Servers (``--env.mcp_servers``, a JSON list; or ``mcp_servers:`` in YAML): each is
``{"name": ..., "command": ..., "args": [...], "env": {...}, "cwd": ...}`` (started as a child process,
spoken to over stdio) or ``{"name": ..., "url": "http://host:port/mcp"}`` (streamable HTTP). At setup the
environment opens a session with each (official ``mcp`` SDK), lists their tools and offers them all to
the model as JSON-schema declarations in ``<tools>``; a server that cannot be reached, or two servers
offering the same tool name, stop the setup with one line naming them.

Data (the original's schema; local only, as in the original): ``--env.dataset_path FILE`` (JSONL, JSON,
Parquet or CSV) of ``user_prompt_text`` (the request) and ``expected_mcp_call`` (``{"tool_name": ...,
"arguments": {...}}``; ``name`` is accepted for ``tool_name``). ``--env.eval_dataset_path`` evaluates on
another file; without one, 2% of the rows (at least one) are held out.

Episode: the model calls tools in Hermes ``<tool_call>`` form over several turns (``max_turns`` 4); each
call runs on its server and the answer comes back in a ``tool`` turn of ``<tool_response>`` blocks. A
tool that raises or reports an error, runs past ``tool_timeout_s``, or answers with more than
``tool_output_chars`` characters (cut), an unknown tool, bad JSON or arguments that do not match the
tool's schema: an error response and the episode goes on. A reply with more than
``max_calls_per_turn`` calls runs none and ends the episode. The first reply without a call ends it.

Reward (as the original's): +1 when some call of the episode names the expected tool with at least the
expected arguments (JSON values equal: ``2`` = ``2.0``, key order free), -1 otherwise. Only the model's
tokens are trained (ManagedServer); prompts and tool responses are masked.

``python environments/mcp_env.py {serve,process,evaluate} --env.dataset_path FILE --env.mcp_servers JSON``
"""

from __future__ import annotations

import json
import logging
import random
from dataclasses import dataclass, field
from typing import Any, Optional

from pydantic import Field

from atroposlib.envs.base import EvalHandlingEnum
from atroposlib.envs.config_defaults import LocalServerDefaults
from atroposlib.envs.data_loading import DatasetError, load_rows
from atroposlib.envs.episodes import Episode, Feedback
from atroposlib.envs.multi_turn import MultiTurnEnv
from atroposlib.envs.tools import tool_schema
from atroposlib.envs.tools.mcp_client import McpConnection, McpServerSpec, McpTool, connect_all
from atroposlib.envs.tools.turns import ToolLimitsConfig, ToolTally
from atroposlib.utils.tool_calls import ToolCallError, canonical_value, json_contains

logger = logging.getLogger(__name__)

SYSTEM_PROMPT = (
    "You are an AI assistant that serves requests with the tools of connected MCP servers. You may reason "
    "inside <think> </think> tags before each reply.\n\n"
    "You can call these tools:\n<tools>\n{tools}\n</tools>\n\n"
    'To call a tool, write <tool_call>{{"name": "tool_name", "arguments": {{...}}}}</tool_call> with valid '
    "JSON inside the tags. Results come back in <tool_response> blocks. When the request is served, reply "
    "without any tool call."
)


@dataclass(frozen=True)
class McpItem:
    """A request and the call that serves it."""

    prompt: str
    tool_name: str
    arguments: dict[str, Any]


def items_of(rows: list[dict[str, Any]], source: str) -> list[McpItem]:
    items = []
    for index, row in enumerate(rows):
        expected = row["expected_mcp_call"]
        if isinstance(expected, str):
            try:
                expected = json.loads(expected)
            except json.JSONDecodeError:
                expected = None
        name = expected.get("tool_name", expected.get("name")) if isinstance(expected, dict) else None
        arguments = expected.get("arguments", {}) if isinstance(expected, dict) else None
        if not isinstance(name, str) or not name or not isinstance(arguments, dict):
            raise DatasetError(
                f"{source}: row {index}: field 'expected_mcp_call' must be "
                '{"tool_name": ..., "arguments": {...}}'
            )
        try:
            arguments = canonical_value(arguments)
        except ToolCallError as exc:
            raise DatasetError(f"{source}: row {index}: field 'expected_mcp_call': {exc}") from None
        items.append(McpItem(str(row["user_prompt_text"]), name, arguments))
    return items


class McpEnvConfig(ToolLimitsConfig):
    """MultiTurnEnvConfig plus the servers, the data and the tool limits."""

    group_size: int = 8
    max_turns: int = Field(4, ge=1, description="model turns per episode (tool calls and the last reply)")
    max_tokens_per_turn: int = Field(1024, ge=1, description="generation budget of one reply in tokens")
    max_token_length: int = Field(16384, description="budget of a whole episode's sequence in tokens")
    mcp_servers: list[McpServerSpec] = Field(
        default_factory=list, description="MCP servers: {name, command, args, env, cwd} or {name, url}"
    )
    dataset_path: Optional[str] = Field(None, description="file of user_prompt_text / expected_mcp_call rows")
    eval_dataset_path: Optional[str] = Field(None, description="evaluation file (default: 2% held out)")
    connect_timeout_s: float = Field(30.0, gt=0, description="seconds to start or reach each server")


@dataclass
class McpSession:
    """One episode: the request, the servers' tools, and the calls made."""

    item: McpItem
    tools: dict[str, McpTool]
    config: McpEnvConfig
    messages: list[dict[str, Any]] = field(default_factory=list)
    made: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    tally: ToolTally = field(default_factory=ToolTally)
    answered: bool = False

    def __post_init__(self) -> None:
        declarations = "\n".join(json.dumps(tool_schema(t)) for t in self.tools.values())
        self.messages = [
            {"role": "system", "content": SYSTEM_PROMPT.format(tools=declarations)},
            {"role": "user", "content": self.item.prompt},
        ]

    async def step(self, reply: str, turn: int) -> Feedback:
        result, feedback = await self.tally.run(reply, self.tools, self.config)
        if feedback is None:
            self.answered = True
            return Feedback(done=True)
        if not result.over_limit:
            self.made += [(c.name, c.arguments) for c in result.calls if c.name and c.arguments is not None]
        return feedback

    @property
    def matched(self) -> bool:
        """Whether some call named the expected tool with at least the expected arguments."""
        return any(
            name == self.item.tool_name and json_contains(args, self.item.arguments)
            for name, args in self.made
        )


class McpEnv(LocalServerDefaults, MultiTurnEnv):
    """Requests served with the tools of MCP servers (see the module docstring)."""

    name = "mcp_env"
    env_config_cls = McpEnvConfig
    config: McpEnvConfig
    default_model = "Qwen/Qwen2.5-1.5B-Instruct"
    default_server_port = 9004
    default_server_settings = {"server_type": "vllm", "num_max_requests_at_once": 32}
    correct_threshold = 1.0

    def __init__(self, config: McpEnvConfig, server_configs, slurm=False, testing=False):
        super().__init__(config, server_configs, slurm, testing)
        self.train: list[McpItem] = []
        self.test: list[McpItem] = []
        self.connections: list[McpConnection] = []
        self.tools: dict[str, McpTool] = {}

    @classmethod
    def default_env_config(cls) -> McpEnvConfig:
        return McpEnvConfig(
            total_steps=2000,
            batch_size=1024,
            eval_handling=EvalHandlingEnum.LIMIT_TRAIN,
            eval_limit_ratio=0.1,
        )

    async def setup(self) -> None:
        cfg = self.config
        if not cfg.dataset_path:
            raise DatasetError("mcp_env reads its requests from a local file: pass --env.dataset_path FILE")
        if not cfg.mcp_servers:
            raise ValueError("mcp_env needs at least one MCP server: pass --env.mcp_servers '[{...}]'")
        fields = ["user_prompt_text", "expected_mcp_call"]

        def unavailable():
            raise DatasetError("no hub set")

        rows = items_of(load_rows(cfg.dataset_path, unavailable, fields, "mcp_env"), cfg.dataset_path)
        random.Random(42).shuffle(rows)
        if cfg.eval_dataset_path:
            eval_rows = load_rows(cfg.eval_dataset_path, unavailable, fields, "mcp_env")
            self.train, self.test = rows, items_of(eval_rows, cfg.eval_dataset_path)
        else:
            held = max(1, round(0.02 * len(rows)))
            self.train, self.test = (rows[held:] or rows), rows[:held]
        self.connections, self.tools = await connect_all(
            cfg.mcp_servers, cfg.connect_timeout_s, cfg.tool_timeout_s, cfg.tool_output_chars
        )
        names = ", ".join(f"{c.spec.name} ({len(c.tools)} tools)" for c in self.connections)
        logger.info("%s: connected to MCP servers %s", self.name, names)

    async def close_servers(self) -> None:
        """Close every MCP session (stdio servers' processes stop)."""
        for connection in self.connections:
            await connection.close()
        self.connections, self.tools = [], {}

    async def get_next_item(self) -> McpItem:
        return self.next_in_turn(self.train)

    def eval_items(self) -> list[McpItem]:
        return self.test

    async def new_session(self, item: McpItem, *, evaluation: bool = False) -> McpSession:
        return McpSession(item, self.tools, self.config)

    def outcome_reward(self, session: McpSession, episode: Episode) -> float:
        return 1.0 if session.matched else -1.0

    def episode_metrics(self, session: McpSession, episode: Episode) -> dict[str, float]:
        return {
            "matched_call": float(session.matched),
            "tool_calls": float(len(session.made)),
            "tool_errors": float(session.tally.errors),
            "answered": float(session.answered),
        }

    def eval_sample_fields(self, item: McpItem, session: McpSession, episode: Episode) -> dict[str, Any]:
        return {
            "request": item.prompt,
            "expected_call": {"tool_name": item.tool_name, "arguments": item.arguments},
        }


if __name__ == "__main__":
    McpEnv.cli()
