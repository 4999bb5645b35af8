"""Math with tools: the model calls a sandboxed Python tool and a calculator over several turns, then
answers in ``\\boxed{}``.

Data: question/answer rows. By default ``datasets.load_dataset("gsm8k", "main")`` (train split for
rollouts, test split for evaluation): word problems whose arithmetic the tools can do. Any hub set with
a question and an answer column works (``--env.dataset_name``, ``--env.dataset_config``,
``--env.question_field``, ``--env.answer_field``); ``--env.dataset_path FILE`` (and
``--env.eval_dataset_path``) reads a local file with those fields instead (a training file without an
evaluation file is used for both). An answer ending in ``#### n`` (GSM8K's form) is graded on ``n``.

Episode: the system prompt declares the tools as JSON schemas in ``<tools>``. The model calls them in
Hermes form, ``<tool_call>{"name": ..., "arguments": {...}}</tool_call>`` (several per turn allowed,
nothing inside ``<think>`` counts); the environment runs them and answers with one ``tool`` turn holding
a ``<tool_response>`` per call, until the model replies without a call (its final answer) or ``max_turns``
ends the episode. Malformed calls (bad JSON, unpaired tags, an unknown tool, arguments that do not
match the schema), tools that raise and tools that run past ``tool_timeout_s`` get an error in their
``<tool_response>`` and the episode goes on.

Tools (``--env.tools``, default ``["python", "calculator"]``): ``python`` runs the ``code`` argument in
the sandbox (:mod:`atroposlib.sandbox`; the environment does not start when the sandbox cannot run) and
returns stdout/stderr, truncated to ``tool_output_chars``; ``calculator`` evaluates an arithmetic
``expression`` by walking its syntax tree. More tools: register them in
:data:`atroposlib.envs.tools.registry` (or a subclass's ``tool_registry``) and name them in ``tools``.

Reward: 1 when the final reply's one ``\\boxed{}`` answer equals the gold answer (``math_verify``, so
``0.5`` = ``\\frac{1}{2}``), else 0 (also when the turn limit ends the episode). With
``--env.per_turn_rewards true`` each tool-calling turn adds ``tool_success_reward`` when all its calls ran
or ``wrong_call_penalty`` when one failed; with ``--env.turn_level_advantages true`` the group carries
MT-GRPO per-token advantages (each assistant turn's tokens get its turn-level advantage).

Token-exact: each episode is one ManagedServer sequence; only the model's own tokens are trained, the
prompt and the tool responses are masked. Needs ``--openai.server_type vllm`` or ``sglang``.

``python environments/tool_use_python_math_server.py {serve,process,evaluate} --openai.base_url ...``
"""

from __future__ import annotations

import json
import logging
import random
from dataclasses import dataclass
from typing import Any, Optional

from math_verify import parse, verify
from pydantic import Field

from atroposlib.envs.base import EvalHandlingEnum
from atroposlib.envs.config_defaults import LocalServerDefaults
from atroposlib.envs.data_loading import hub_split, load_rows
from atroposlib.envs.episodes import END_DONE, Episode, Feedback
from atroposlib.envs.multi_turn import MultiTurnEnv, MultiTurnEnvConfig
from atroposlib.envs.tools import Tool, ToolRegistry, registry, run_tool_calls, tool_schema
from atroposlib.utils.math_checking import reply_extraction
from atroposlib.utils.replies import final_boxed_answer

logger = logging.getLogger(__name__)


SYSTEM_PROMPT = (
    "You are a deep thinking AI that solves problems with the help of tools. You may reason inside "
    "<think> </think> tags before each reply.\n\n"
    "You can call these tools:\n<tools>\n{tools}\n</tools>\n\n"
    'To call a tool, write <tool_call>{{"name": "tool_name", "arguments": {{...}}}}</tool_call> with '
    "valid JSON inside the tags; you may make several calls in one reply. The results come back in "
    "<tool_response> blocks. When you know the answer, reply without any tool call and give your final "
    "answer as \\boxed{{answer}}."
)


@dataclass(frozen=True)
class ToolUseItem:
    """A question and its gold answer (the part after ``####`` when present)."""

    question: str
    answer: str


def gold_answer(answer: str) -> str:
    """The gradable part of an answer: the text after the last ``####`` (thousands separators removed)."""
    if "####" in answer:
        return answer.rsplit("####", 1)[1].strip().replace(",", "")
    return answer.strip()


def _parse_math(text: str):
    return parse(f"\\boxed{{{text}}}", extraction_config=reply_extraction(), extraction_mode="first_match")


def answer_is_correct(reply: str, gold: str) -> bool:
    """Whether the reply's one boxed answer (after its reasoning) equals ``gold`` (by value, or as text)."""
    boxed = final_boxed_answer(reply)
    if boxed is None:
        return False
    if boxed.strip().replace(",", "") == gold.strip():
        return True
    predicted, expected = _parse_math(boxed.replace(",", "")), _parse_math(gold)
    return bool(predicted and expected and verify(expected, predicted))


class PythonMathToolUseConfig(MultiTurnEnvConfig):
    """MultiTurnEnvConfig plus the data, the tools and the per-turn rewards."""

    group_size: int = 8
    max_turns: int = Field(6, ge=1, description="model turns per episode (tool calls and the final answer)")
    max_tokens_per_turn: int = Field(1024, ge=1, description="generation budget of one reply in tokens")
    max_token_length: int = Field(16384, description="budget of a whole episode's sequence in tokens")
    dataset_name: str = Field("gsm8k", description="hub data set with question and answer columns")
    dataset_config: Optional[str] = Field("main", description="configuration of the hub data set")
    dataset_split: str = Field("train", description="hub split to train on")
    eval_split: str = Field("test", description="hub split to evaluate on")
    question_field: str = Field("question", description="column holding the question")
    answer_field: str = Field("answer", description="column holding the answer (GSM8K's '#### n' allowed)")
    dataset_path: Optional[str] = Field(None, description="local file with the question and answer fields")
    eval_dataset_path: Optional[str] = Field(
        None, description="local file for evaluation (default: dataset_path when that is set)"
    )
    tools: list[str] = Field(
        ["python", "calculator"], description="tools offered to the model, by registry name"
    )
    tool_timeout_s: float = Field(
        60.0, gt=0, description="seconds a tool call may take before it is an error"
    )
    tool_output_chars: int = Field(2000, ge=100, description="characters of a python run's output returned")
    python_wall_seconds: float = Field(
        10.0, gt=0, description="wall-clock limit of one python run in seconds"
    )
    python_cpu_seconds: int = Field(5, ge=1, description="CPU-time limit of one python run in seconds")
    tool_message_role: str = Field("tool", description="chat role of the turns holding tool responses")
    per_turn_rewards: bool = Field(
        False, description="reward each tool-calling turn (see the two fields below)"
    )
    tool_success_reward: float = Field(0.1, description="per-turn reward when every call of the turn ran")
    wrong_call_penalty: float = Field(-0.2, description="per-turn reward when a call of the turn failed")


class ToolSession:
    """One episode: the question, the tools, and the final reply once the model stops calling."""

    def __init__(self, item: ToolUseItem, tools: dict[str, Tool], config: PythonMathToolUseConfig):
        self.item = item
        self.tools = tools
        self.config = config
        declarations = "\n".join(json.dumps(tool_schema(tool)) for tool in tools.values())
        self.messages = [
            {"role": "system", "content": SYSTEM_PROMPT.format(tools=declarations)},
            {"role": "user", "content": item.question},
        ]
        self.final_reply: Optional[str] = None
        self.calls = 0
        self.errors = 0

    async def step(self, reply: str, turn: int) -> Feedback:
        result = await run_tool_calls(reply, self.tools, timeout_s=self.config.tool_timeout_s)
        if not result.made_calls:
            self.final_reply = reply
            return Feedback(done=True)
        self.calls += len(result.calls)
        self.errors += result.errors
        reward = 0.0
        if self.config.per_turn_rewards:
            reward = self.config.wrong_call_penalty if result.errors else self.config.tool_success_reward
        info = {"calls": [{"name": c.name, "ok": c.ok} for c in result.calls]}
        message = {"role": self.config.tool_message_role, "content": result.response_text()}
        return Feedback(messages=[message], reward=reward, info=info)


class PythonMathToolUseEnv(LocalServerDefaults, MultiTurnEnv):
    """Questions answered with tools over several turns (see the module docstring)."""

    name = "tool_use_python_math"
    env_config_cls = PythonMathToolUseConfig
    config: PythonMathToolUseConfig
    default_server_port = 9004
    default_server_settings = {"server_type": "vllm", "num_max_requests_at_once": 32}
    #: Where tool names are looked up; subclasses may use their own registry.
    tool_registry: ToolRegistry = registry

    def __init__(self, config: PythonMathToolUseConfig, server_configs, slurm=False, testing=False):
        super().__init__(config, server_configs, slurm, testing)
        self.train: list[ToolUseItem] = []
        self.test: list[ToolUseItem] = []
        self.tools: dict[str, Tool] = {}

    @classmethod
    def default_env_config(cls) -> PythonMathToolUseConfig:
        return PythonMathToolUseConfig(
            total_steps=2000,
            batch_size=1024,
            eval_handling=EvalHandlingEnum.LIMIT_TRAIN,
            eval_limit_ratio=0.1,
        )

    # -- tools ------------------------------------------------------------------------------------------
    def tool_options(self, name: str) -> dict[str, Any]:
        """Keyword options the registry's factory for ``name`` is built with."""
        if name == "python":
            from atroposlib.sandbox import Sandbox, SandboxLimits

            limits = SandboxLimits(
                wall_seconds=self.config.python_wall_seconds, cpu_seconds=self.config.python_cpu_seconds
            )
            return {"sandbox": Sandbox(limits=limits), "output_limit": self.config.tool_output_chars}
        return {}

    async def build_tools(self) -> dict[str, Tool]:
        """The configured tools; a tool with a ``check()`` (the sandbox) is checked and its error raised."""
        tools = {}
        for name in self.config.tools:
            tool = self.tool_registry.create(name, **self.tool_options(name))
            check = getattr(tool, "check", None)
            if check is not None:
                await check()
            tools[name] = tool
        return tools

    # -- data -------------------------------------------------------------------------------------------
    def _items(self, rows: list[dict[str, Any]]) -> list[ToolUseItem]:
        q, a = self.config.question_field, self.config.answer_field
        return [ToolUseItem(str(row[q]), gold_answer(str(row[a]))) for row in rows]

    async def setup(self) -> None:
        cfg = self.config
        fields = [cfg.question_field, cfg.answer_field]
        hub = cfg.dataset_name
        train = load_rows(
            cfg.dataset_path, hub_split(hub, cfg.dataset_split, cfg.dataset_config), fields, hub
        )
        eval_path = cfg.eval_dataset_path or cfg.dataset_path
        test = load_rows(
            eval_path, hub_split(hub, cfg.eval_split, cfg.dataset_config), fields, f"{hub} ({cfg.eval_split})"
        )
        self.train = self._items(train)
        random.Random(42).shuffle(self.train)
        self.test = self._items(test)
        self.tools = await self.build_tools()

    async def get_next_item(self) -> ToolUseItem:
        return self.next_in_turn(self.train)

    def eval_items(self) -> list[ToolUseItem]:
        return self.test

    # -- episodes ---------------------------------------------------------------------------------------
    async def new_session(self, item: ToolUseItem, *, evaluation: bool = False) -> ToolSession:
        return ToolSession(item, self.tools, self.config)

    def outcome_reward(self, session: ToolSession, episode: Episode) -> float:
        if episode.end_reason != END_DONE or session.final_reply is None:
            return 0.0
        return 1.0 if answer_is_correct(session.final_reply, session.item.answer) else 0.0

    def episode_correct(self, session: ToolSession, episode: Episode, score: float) -> bool:
        return self.outcome_reward(session, episode) == 1.0

    def episode_metrics(self, session: ToolSession, episode: Episode) -> dict[str, float]:
        return {
            "correct": self.outcome_reward(session, episode),
            "tool_calls": float(session.calls),
            "tool_errors": float(session.errors),
            "answered": float(session.final_reply is not None),
        }

    def eval_sample_fields(self, item: ToolUseItem, session: ToolSession, episode: Episode) -> dict[str, Any]:
        return {"question": item.question, "gold_answer": item.answer}


if __name__ == "__main__":
    PythonMathToolUseEnv.cli()
