"""Multi-turn tool calling: reproduce a recorded conversation's tool calls turn by turn.

Data: Hermes function-calling conversations, by default ``interstellarninja/toolace_hermes_sequential_tool_use``
(train split; 5% held out for evaluation, ``--env.eval_split`` for a hub split). Each row's
``conversations`` is a list of ``from`` / ``value`` turns: a ``system`` turn declaring the tools in
``<tools>``, a ``human`` request, then ``gpt`` turns (``<tool_call>`` blocks or plain narration), ``tool``
turns (``<tool_response>`` blocks) and possibly further ``human`` turns. ``--env.dataset_path FILE`` reads
local rows in that schema.

Scenarios (``--env.scenario_category``, the original's BFCL-style categories; rows that do not fit are
skipped):

* ``single`` - the first tool-calling turn only;
* ``multistep`` (default) - two or more tool-calling turns in a row, each followed only by its tool
  responses, no human turn after the first call; the recorded tool responses are fed back after each
  model turn;
* ``multiturn`` - tool-calling turns each followed by its tool responses and a narration turn (the model
  summarises without calling), with human turns before the next call; the model plays every call and
  narration turn, the recorded tool responses and human turns are fed in between;
* ``relevance`` - the first assistant turn makes no call (the tools cannot serve the request): the model
  must not call either, and earns a bonus for apologising or asking for the missing information.

The system turn is the environment's instructions, the conversation's own system turn (its tools) and,
except in ``relevance``, an example of a tool-calling reply.

At most ``max_tool_call_turns_cap`` tool-calling turns are played (the narration turn after the last one
is kept in ``multiturn``). With ``--env.generate_all_gpt_turns true`` a ``single`` or ``multistep`` episode
ends with a narration turn: the responses to the last played call are fed back and the model summarises
them without calling. Tool responses are the data set's, replayed: nothing is executed.

Episode and reward: in a calling turn the reply (after its optional ``<think>``; required with
``--env.validate_think_blocks true``) must hold only ``<tool_call>`` blocks; they match the recorded ones
when every recorded call has its own model call with the same name and at least the recorded arguments
(JSON values equal, call and key order free) and the counts are equal. A narration turn must hold text
and no call. The first mismatching turn ends the episode. Score: the share of the recorded calls matched,
plus ``all_correct_bonus`` (0.5) when all were, plus ``wrong_call_penalty`` (-0.2) when a calling turn
mismatched; in ``relevance``: 1.0 (+0.1 for an apology, +0.1 for asking for details) when the reply calls
nothing, else ``wrong_call_penalty``. ``--env.turn_reward`` adds that much per matched turn (the
per-turn rewards MT-GRPO uses with ``--env.turn_level_advantages true``). Only the model's tokens are
trained (ManagedServer); prompts, recorded tool responses and human turns are masked.

``python environments/tool_use_multiturn_server.py {serve,process,evaluate} --openai.base_url ...``
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass, field
from typing import Any, Literal, Optional

from pydantic import Field

from atroposlib.envs.base import EvalHandlingEnum
from atroposlib.envs.config_defaults import LocalServerDefaults
from atroposlib.envs.data_loading import DatasetError, hub_split, load_rows
from atroposlib.envs.episodes import Episode, Feedback
from atroposlib.envs.multi_turn import MultiTurnEnv, MultiTurnEnvConfig
from atroposlib.utils.replies import answer_section
from atroposlib.utils.tool_calls import (
    ToolCall,
    ToolCallError,
    expected_tool_calls,
    extract_tool_call_blocks,
    json_contains,
    reply_tool_calls,
)

SYSTEM_PROMPT = (
    "You are a deep thinking AI that uses tools to help the user. You may reason inside <think> </think> "
    "tags before each reply. To call tools, write one or more "
    '<tool_call>{"name": "tool_name", "arguments": {...}}</tool_call> blocks after your reasoning and '
    "nothing else; the results come back in <tool_response> blocks. Never write <tool_response> blocks "
    "yourself. When no tool is needed, reply in plain text."
)
RELEVANCE_HELPER = (
    "If none of the tools can serve the request, say so: apologise and explain why. If a tool needs "
    "details the user has not given, ask for them."
)
NARRATION_HELPER = "Summarise the tool result above for the user in plain text, without calling a tool."
FORMAT_EXAMPLE = (
    "Example of the format (the tool is an illustration; call only the tools listed above):\n<think>\n"
    "The user wants the weather in Lisbon; get_weather takes a city.\n</think>\n"
    '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Lisbon"}}\n</tool_call>'
)

_APOLOGY = re.compile(r"\b(sorry|apologi[sz]e|apologies)\b", re.IGNORECASE)
_ASKS_FOR_INFO = re.compile(
    r"\b(insufficient information|could you (please )?(provide|tell|share)|provide (me )?.*(details|information))\b",
    re.IGNORECASE,
)

Scenario = Literal["single", "multistep", "multiturn", "relevance"]


@dataclass(frozen=True)
class ToolTask:
    """An opening chat, the calls each model turn must make (empty: a narration turn) and the recorded
    messages fed after each model turn but the last."""

    messages: tuple[dict[str, str], ...]
    expected: tuple[tuple[ToolCall, ...], ...]
    between: tuple[tuple[dict[str, str], ...], ...]
    scenario: str

    @property
    def total_calls(self) -> int:
        return sum(len(turn) for turn in self.expected)


# ---------------------------------------------------------------------------------------------------------
# Conversations to tasks
# ---------------------------------------------------------------------------------------------------------
def _role(turn: dict[str, str]) -> str:
    return {"gpt": "assistant", "human": "user"}.get(turn["from"], turn["from"])


def _chat(turns: list[dict[str, str]]) -> tuple[dict[str, str], ...]:
    return tuple({"role": _role(t), "content": str(t["value"])} for t in turns)


def _is_call(turn: dict[str, str]) -> bool:
    return turn["from"] in ("gpt", "assistant") and "<tool_call>" in str(turn["value"]).lower()


def _is_assistant(turn: dict[str, str]) -> bool:
    return turn["from"] in ("gpt", "assistant")


def _calls(turn: dict[str, str]) -> Optional[tuple[ToolCall, ...]]:
    try:
        return tuple(expected_tool_calls(str(turn["value"])))
    except ToolCallError:
        return None


def _tool_turns_after(conv: list[dict[str, str]], index: int) -> list[dict[str, str]]:
    """The ``tool`` turns right after turn ``index``."""
    turns = []
    for turn in conv[index + 1 :]:
        if turn["from"] != "tool":
            break
        turns.append(turn)
    return turns


def _asking_for_narration(responses: tuple[dict[str, str], ...]) -> tuple[dict[str, str], ...]:
    """The responses with the request to summarise them appended to the last one."""
    last = responses[-1]
    return (*responses[:-1], {**last, "content": f"{last['content']}\n\n{NARRATION_HELPER}"})


def _cap(expected: list, between: list, cap: Optional[int], keep_narration: bool) -> tuple[list, list]:
    """Keep turns up to the ``cap``-th calling turn (and the narration turn after it when asked)."""
    if cap is None:
        return expected, between
    seen = keep = 0
    for index, calls in enumerate(expected):
        keep += 1
        if calls:
            seen += 1
            if seen == cap:
                if keep_narration and index + 1 < len(expected) and not expected[index + 1]:
                    keep += 1
                break
    return expected[:keep], between[: keep - 1]


def task_of(
    conv: list[dict[str, str]], scenario: str, cap: Optional[int], system_prompt: str, narrate: bool = False
) -> Optional[ToolTask]:
    """The task a conversation gives in ``scenario``, or None when it does not fit the scenario. With
    ``narrate`` (``single`` and ``multistep``), the responses to the last played call are followed by a
    narration turn."""
    if len(conv) < 3 or conv[0]["from"] != "system" or conv[1]["from"] != "human":
        return None
    calls_at = [i for i, t in enumerate(conv) if _is_call(t)]
    system = {"role": "system", "content": f"{system_prompt}\n\n{conv[0]['value']}"}
    if scenario == "relevance":
        first = next((i for i in range(2, len(conv)) if _is_assistant(conv[i])), None)
        if first is None or _is_call(conv[first]):
            return None
        system["content"] += f"\n\n{RELEVANCE_HELPER}"
        return ToolTask((system, *_chat(conv[1:first])), ((),), (), scenario)
    if not calls_at:
        return None
    system["content"] += f"\n\n{FORMAT_EXAMPLE}"
    first_assistant = next(i for i in range(2, len(conv)) if _is_assistant(conv[i]))
    human_later = any(t["from"] == "human" for t in conv[calls_at[0] + 1 :])
    expected: list[tuple[ToolCall, ...]] = []
    between: list[tuple[dict[str, str], ...]] = []
    opening = (system, *_chat(conv[1 : calls_at[0]]))
    if scenario in ("single", "multistep"):
        if scenario == "multistep" and (len(calls_at) < 2 or first_assistant != calls_at[0] or human_later):
            return None
        played = calls_at[:1] if scenario == "single" else calls_at
        all_responses = []
        for n, index in enumerate(played):
            calls = _calls(conv[index])
            responses = _tool_turns_after(conv, index)
            if calls is None or (not responses and (narrate or n + 1 < len(played))):
                return None
            if n + 1 < len(played) and index + 1 + len(responses) != played[n + 1]:
                return None  # something other than tool responses between two calls
            expected.append(calls)
            all_responses.append(_chat(responses))
        expected, between = _cap(expected, all_responses[: len(expected) - 1], cap, keep_narration=False)
        if narrate:
            between.append(_asking_for_narration(all_responses[len(expected) - 1]))
            expected.append(())
        return ToolTask(opening, tuple(expected), tuple(between), scenario)
    # multiturn: call, tool responses, narration, (human turns), next call ...
    if len(calls_at) < 2 or first_assistant != calls_at[0] or not human_later:
        return None
    for n, index in enumerate(calls_at):
        calls = _calls(conv[index])
        response = next((j for j in range(index + 1, len(conv)) if conv[j]["from"] == "tool"), None)
        narration = next((j for j in range(index + 1, len(conv)) if _is_assistant(conv[j])), None)
        if calls is None or response is None or narration is None or _is_call(conv[narration]):
            return None
        if response > narration:
            return None
        nxt = calls_at[n + 1] if n + 1 < len(calls_at) else len(conv)
        if n + 1 < len(calls_at) and not any(t["from"] == "human" for t in conv[narration + 1 : nxt]):
            return None
        expected += [calls, ()]
        between.append(_asking_for_narration(_chat(conv[index + 1 : narration])))
        if n + 1 < len(calls_at):
            between.append(_chat(conv[narration + 1 : nxt]))
    expected, between = _cap(expected, between, cap, keep_narration=True)
    return ToolTask(opening, tuple(expected), tuple(between), scenario)


def tasks_of(
    rows: list[dict[str, Any]],
    source: str,
    scenario: str,
    cap: Optional[int],
    prompt: str,
    narrate: bool = False,
) -> list[ToolTask]:
    tasks = []
    for index, row in enumerate(rows):
        conv = row["conversations"]
        if not isinstance(conv, list) or not all(
            isinstance(t, dict) and "from" in t and "value" in t for t in conv
        ):
            raise DatasetError(
                f"{source}: row {index}: field 'conversations' must be a list of from/value turns"
            )
        task = task_of(conv, scenario, cap, prompt, narrate)
        if task is not None:
            tasks.append(task)
    if not tasks:
        raise DatasetError(f"{source}: no conversation fits the scenario {scenario!r}")
    return tasks


# ---------------------------------------------------------------------------------------------------------
# Replies
# ---------------------------------------------------------------------------------------------------------
def _has_think(reply: str) -> bool:
    return reply.lstrip().startswith("<think>") and answer_section(reply) is not None


def reply_calls_only(reply: str, require_think: bool = False) -> Optional[list[ToolCall]]:
    """The calls of a calling turn, or None when the reply is malformed or holds anything but calls."""
    if require_think and not _has_think(reply):
        return None
    calls = reply_tool_calls(reply)
    section = answer_section(reply)
    if not calls or section is None:
        return None
    rest = re.sub(r"<tool_call>.*?</tool_call>", "", section, flags=re.DOTALL)
    return calls if not rest.strip() else None


def narration_ok(reply: str, require_think: bool = False) -> bool:
    """A narration turn: readable reasoning, text after it, and no tool call or tool response."""
    if require_think and not _has_think(reply):
        return False
    section = answer_section(reply)
    if section is None or not section.strip():
        return False
    blocks = extract_tool_call_blocks(section)
    return blocks == [] and "<tool_response>" not in section


def calls_match(made: list[ToolCall], expected: tuple[ToolCall, ...]) -> bool:
    """Equal counts, and each expected call has its own made call with its name and arguments."""
    if len(made) != len(expected):
        return False
    free = list(made)
    for want in expected:
        found = next(
            (c for c in free if c.name == want.name and json_contains(c.arguments, want.arguments)), None
        )
        if found is None:
            return False
        free.remove(found)
    return True


# ---------------------------------------------------------------------------------------------------------
# The environment
# ---------------------------------------------------------------------------------------------------------
class MultiTurnToolUseConfig(MultiTurnEnvConfig):
    """MultiTurnEnvConfig plus the data, the scenario and the reward (the original's names)."""

    original_key_aliases = {"max_gen_per_turn": "max_tokens_per_turn"}
    unsupported_original_keys = {
        "skip_completed": "0.4.0 skipped conversations listed in a fixed hub set of finished SFT tasks; "
        "leave them out of --env.dataset_path instead",
        "add_dynamic_few_shot": "a few-shot example harvested from earlier rollouts is not put in the system "
        "prompt here (prompts come from the conversation alone, the same on every run)",
    }

    group_size: int = 8
    max_turns: int = Field(8, ge=1, description="model turns per episode at most (the task sets its own)")
    max_tokens_per_turn: int = Field(1024, ge=1, description="generation budget of one reply in tokens")
    max_token_length: int = Field(16384, description="budget of a whole episode's sequence in tokens")
    dataset_name: str = Field(
        "interstellarninja/toolace_hermes_sequential_tool_use", description="hub set of Hermes conversations"
    )
    dataset_split: str = Field("train", description="hub split to train on")
    eval_split: Optional[str] = Field(None, description="hub split to evaluate on (default: 5% held out)")
    dataset_path: Optional[str] = Field(None, description="local file of conversations (from/value turns)")
    eval_dataset_path: Optional[str] = Field(None, description="local evaluation file (default: 5% held out)")
    scenario_category: Scenario = Field("multistep", description="single, multistep, multiturn or relevance")
    max_tool_call_turns_cap: Optional[int] = Field(
        2, ge=1, description="tool-calling turns played per episode at most (None: all)"
    )
    generate_all_gpt_turns: bool = Field(
        False, description="single/multistep: after the last call's responses the model also narrates"
    )
    validate_think_blocks: bool = Field(False, description="every reply must open with a <think> block")
    wrong_call_penalty: float = Field(
        -0.2, description="added when a calling turn mismatches (ends the episode)"
    )
    all_correct_bonus: float = Field(0.5, description="added when every recorded call was matched")
    turn_reward: float = Field(
        0.0, description="per-turn reward of each matched turn (MT-GRPO's turn rewards)"
    )


@dataclass
class ReplaySession:
    """One episode of a task: checks each reply against the recorded turn and feeds the recorded responses."""

    task: ToolTask
    config: MultiTurnToolUseConfig
    matched: int = 0
    mismatch: bool = False
    apology: bool = False
    asks_for_info: bool = False
    finished: bool = False
    messages: list[dict[str, Any]] = field(default_factory=list)

    def __post_init__(self) -> None:
        self.messages = [dict(m) for m in self.task.messages]

    async def step(self, reply: str, turn: int) -> Feedback:
        expected = self.task.expected[turn]
        think = self.config.validate_think_blocks
        if expected:
            calls = reply_calls_only(reply, think)
            ok = calls is not None and calls_match(calls, expected)
            self.mismatch = not ok
            if ok:
                self.matched += len(expected)
        else:
            ok = narration_ok(reply, think)
            if ok:
                section = answer_section(reply) or ""
                self.apology = bool(_APOLOGY.search(section))
                self.asks_for_info = bool(_ASKS_FOR_INFO.search(section))
        reward = self.config.turn_reward if ok else 0.0
        last = turn + 1 >= len(self.task.expected)
        if not ok or last:
            self.finished = ok and last
            return Feedback(done=True, reward=reward, info={"turn_ok": ok})
        return Feedback(
            messages=[dict(m) for m in self.task.between[turn]], reward=reward, info={"turn_ok": ok}
        )


class MultiTurnToolCallingEnv(LocalServerDefaults, MultiTurnEnv):
    """Recorded tool-calling conversations replayed turn by turn (see the module docstring)."""

    name = "multiturn_tool_use"
    env_config_cls = MultiTurnToolUseConfig
    config: MultiTurnToolUseConfig
    default_model = "NousResearch/DeepHermes-3-Llama-3-8B-Preview"
    default_server_port = 9004
    default_server_settings = {"server_type": "vllm", "num_max_requests_at_once": 32}
    system_prompt = SYSTEM_PROMPT

    def __init__(self, config: MultiTurnToolUseConfig, server_configs, slurm=False, testing=False):
        super().__init__(config, server_configs, slurm, testing)
        self.train: list[ToolTask] = []
        self.test: list[ToolTask] = []

    @classmethod
    def default_env_config(cls) -> MultiTurnToolUseConfig:
        return MultiTurnToolUseConfig(
            total_steps=2000,
            batch_size=1024,
            max_token_length=4096 * 16,
            eval_handling=EvalHandlingEnum.LIMIT_TRAIN,
            eval_limit_ratio=0.1,
            eval_limit=128,
        )

    def _tasks(self, rows: list[dict[str, Any]], source: str) -> list[ToolTask]:
        cfg = self.config
        return tasks_of(
            rows, source, cfg.scenario_category, cfg.max_tool_call_turns_cap, self.system_prompt,
            cfg.generate_all_gpt_turns,
        )  # fmt: skip

    async def setup(self) -> None:
        cfg = self.config
        hub = cfg.dataset_name
        rows = load_rows(cfg.dataset_path, hub_split(hub, cfg.dataset_split), ["conversations"], hub)
        tasks = self._tasks(rows, str(cfg.dataset_path or hub))
        random.Random(42).shuffle(tasks)
        if cfg.eval_dataset_path or (cfg.eval_split and not cfg.dataset_path):
            eval_name = f"{hub} ({cfg.eval_split})"
            eval_rows = load_rows(
                cfg.eval_dataset_path, hub_split(hub, cfg.eval_split or "test"), ["conversations"], eval_name
            )
            self.train, self.test = tasks, self._tasks(eval_rows, str(cfg.eval_dataset_path or eval_name))
        else:
            held = max(1, round(0.05 * len(tasks)))
            self.train, self.test = (tasks[held:] or tasks), tasks[:held]

    async def get_next_item(self) -> ToolTask:
        return self.next_in_turn(self.train)

    def eval_items(self) -> list[ToolTask]:
        return self.test

    async def new_session(self, item: ToolTask, *, evaluation: bool = False) -> ReplaySession:
        return ReplaySession(item, self.config)

    def outcome_reward(self, session: ReplaySession, episode: Episode) -> float:
        cfg = self.config
        if session.task.total_calls == 0:  # relevance: the right reply calls nothing
            if not session.finished:
                return cfg.wrong_call_penalty
            return 1.0 + 0.1 * session.apology + 0.1 * session.asks_for_info
        score = session.matched / session.task.total_calls
        if session.matched == session.task.total_calls:
            score += cfg.all_correct_bonus
        if session.mismatch:
            score += cfg.wrong_call_penalty
        return score

    def episode_metrics(self, session: ReplaySession, episode: Episode) -> dict[str, float]:
        total = session.task.total_calls
        return {
            "call_accuracy": session.matched / total if total else float(session.finished),
            "all_turns_right": float(session.finished),
            "mismatch": float(session.mismatch),
        }

    def eval_sample_fields(self, item: ToolTask, session: ReplaySession, episode: Episode) -> dict[str, Any]:
        expected = [[{"name": c.name, "arguments": c.arguments} for c in turn] for turn in item.expected]
        return {"scenario": item.scenario, "expected_calls": json.loads(json.dumps(expected))}


if __name__ == "__main__":
    MultiTurnToolCallingEnv.cli()
