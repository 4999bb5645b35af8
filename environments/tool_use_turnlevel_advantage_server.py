"""Multi-turn tool calling with turn-level advantages (MT-GRPO).

The task of ``tool_use_multiturn_server.py`` (recorded Hermes conversations replayed turn by turn, the
model's calls checked against the recorded ones), trained with turn-level credit assignment as in
"Reinforcing Multi-Turn Reasoning in LLM Agents via Turn-Level Credit Assignment": each turn whose calls
match earns a turn reward (``turn_reward``, 1.0), the episode's outcome reward is the original's dense
score (share of calls matched, +0.5 when all, -0.2 on a mismatch), and every group carries per-token
``advantages``: the tokens of turn ``t`` get ``turn_advantage_weight`` x the group-normalised turn rewards
from ``t`` on plus the group-normalised outcome (:func:`atroposlib.envs.episodes.turn_level_advantages`).
A group whose scores are all equal is still sent: its turn advantages carry the signal.

Defaults follow the original: ``interstellarninja/hermes_salesforce_apigen_tool_use`` (train, 5% held
out), ``multistep`` scenario, up to 3 tool-calling turns and then a narration turn (the model summarises the
last responses), replies must open with ``<think>``. Every
option of ``tool_use_multiturn_server.py`` applies (``--env.dataset_path`` for local conversations).

``python environments/tool_use_turnlevel_advantage_server.py {serve,process,evaluate} --openai.base_url ...``
"""

from __future__ import annotations

from typing import Optional

from pydantic import Field

try:
    from environments.tool_use_multiturn_server import MultiTurnToolCallingEnv, MultiTurnToolUseConfig
except (
    ModuleNotFoundError
):  # run as a script: this file's folder is on the path, the repository root may not be
    from tool_use_multiturn_server import MultiTurnToolCallingEnv, MultiTurnToolUseConfig


class MTGRPOEnvConfig(MultiTurnToolUseConfig):
    """The multi-turn tool-use settings with turn-level advantages on."""

    ignored_original_keys = {
        **MultiTurnToolUseConfig.ignored_original_keys,
        "use_parallel_requests": "chose between one request for the group's first turns and one request per "
        "episode; the same replies are sampled either way (here: one request per episode)",
    }
    unsupported_original_keys = {
        **MultiTurnToolUseConfig.unsupported_original_keys,
        "turn_level_advantage_lambda": "the outcome advantage has weight 1 here; weigh the turn advantages "
        "against it with --env.turn_advantage_weight (advantage = weight x turn part + outcome part)",
    }

    dataset_name: str = Field(
        "interstellarninja/hermes_salesforce_apigen_tool_use", description="hub set of Hermes conversations"
    )
    max_tool_call_turns_cap: Optional[int] = Field(
        3, ge=1, description="tool-calling turns played per episode at most (None: all)"
    )
    generate_all_gpt_turns: bool = Field(
        True, description="single/multistep: after the last call's responses the model also narrates"
    )
    validate_think_blocks: bool = Field(True, description="every reply must open with a <think> block")
    turn_reward: float = Field(1.0, description="reward of each turn whose calls match (the turn rewards)")
    turn_level_advantages: bool = Field(True, description="send MT-GRPO per-token advantages")


class MultiTurnToolUseTurnLevelAdvantageEnv(MultiTurnToolCallingEnv):
    """Recorded tool-calling conversations trained with turn-level advantages (see the module docstring)."""

    name = "multiturn_tool_use_turnlevel_advantage"
    env_config_cls = MTGRPOEnvConfig
    config: MTGRPOEnvConfig

    @classmethod
    def default_env_config(cls) -> MTGRPOEnvConfig:
        base = MultiTurnToolCallingEnv.default_env_config()
        return MTGRPOEnvConfig(**base.model_dump(exclude_unset=True))


if __name__ == "__main__":
    MultiTurnToolUseTurnLevelAdvantageEnv.cli()
