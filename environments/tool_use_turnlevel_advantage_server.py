"""Multi-turn tool calling with turn-level advantages (MT-GRPO).

The task of ``tool_use_multiturn_server.py`` (recorded Hermes conversations replayed turn by turn, the
model's calls checked against the recorded ones), trained with turn-level credit assignment as in
"Reinforcing Multi-Turn Reasoning in LLM Agents via Turn-Level Credit Assignment": each turn whose calls
match earns a turn reward (``turn_reward``, 1.0), the episode's outcome reward is the original's dense
score (share of calls matched, +0.5 when all, -0.2 on a mismatch), and every group carries per-token
``advantages`` (:func:`mt_grpo_advantages`): the tokens of turn ``t`` get ``turn_advantage_weight`` x the
group-standardised reward of turn ``t`` plus ``turn_level_advantage_lambda`` (λ, 0.5) x the
group-standardised outcome, and the tokens of the task's final turn the standardised outcome alone.
A group whose scores are all equal is still sent: its turn advantages carry the signal.

Defaults follow the original: ``interstellarninja/hermes_salesforce_apigen_tool_use`` (train, 5% held
out), ``multistep`` scenario, up to 3 tool-calling turns and then a narration turn (the model summarises the
last responses), replies must open with ``<think>``. Every
option of ``tool_use_multiturn_server.py`` applies (``--env.dataset_path`` for local conversations).

``python environments/tool_use_turnlevel_advantage_server.py {serve,process,evaluate} --openai.base_url ...``
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Optional

from pydantic import Field

from atroposlib.envs.episodes import Episode, standardised

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
    turn_level_advantage_lambda: float = Field(
        0.5,
        ge=0.0,
        description="λ: weight of the standardised outcome in each turn's advantage but the final turn's "
        "(turn t: turn_advantage_weight x its standardised turn reward + λ x the standardised outcome)",
    )


def mt_grpo_advantages(
    turn_rewards: Sequence[Sequence[float]],
    outcomes: Sequence[float],
    task_turns: int,
    lam: float,
    turn_weight: float = 1.0,
) -> list[list[float]]:
    """MT-GRPO advantages, one per played turn of each episode of a group playing one task.

    Turn ``t``'s rewards are standardised across the group's episodes, a turn an episode did not reach
    counting as a turn without reward (0); the outcomes across the group. Turn ``t`` of episode ``i`` gets
    ``turn_weight * turn_adv[t][i] + lam * outcome_adv[i]``, except the task's final turn (index
    ``task_turns - 1``), which gets ``outcome_adv[i]`` alone. Raises ValueError for an empty group or
    sequences of different lengths.
    """
    if not outcomes or len(turn_rewards) != len(outcomes):
        raise ValueError(f"{len(turn_rewards)} episodes of turn rewards and {len(outcomes)} outcomes")
    outcome_adv = standardised([float(o) for o in outcomes])
    longest = max(len(rewards) for rewards in turn_rewards)
    turn_adv = [
        standardised([float(rewards[t]) if t < len(rewards) else 0.0 for rewards in turn_rewards])
        for t in range(longest)
    ]
    return [
        [
            outcome_adv[i] if t == task_turns - 1 else turn_weight * turn_adv[t][i] + lam * outcome_adv[i]
            for t in range(len(rewards))
        ]
        for i, rewards in enumerate(turn_rewards)
    ]


class MultiTurnToolUseTurnLevelAdvantageEnv(MultiTurnToolCallingEnv):
    """Recorded tool-calling conversations trained with turn-level advantages (see the module docstring)."""

    name = "multiturn_tool_use_turnlevel_advantage"
    env_config_cls = MTGRPOEnvConfig
    config: MTGRPOEnvConfig

    @classmethod
    def default_env_config(cls) -> MTGRPOEnvConfig:
        base = MultiTurnToolCallingEnv.default_env_config()
        return MTGRPOEnvConfig(**base.model_dump(exclude_unset=True))

    def turn_advantages(
        self, item: Any, episodes: Sequence[Episode], outcomes: Sequence[float]
    ) -> list[list[float]]:
        """:func:`mt_grpo_advantages` of the group playing ``item`` (its expected calls give the task's turns)."""
        return mt_grpo_advantages(
            [episode.turn_rewards for episode in episodes],
            outcomes,
            len(item.expected),
            self.config.turn_level_advantage_lambda,
            self.config.turn_advantage_weight,
        )


if __name__ == "__main__":
    MultiTurnToolUseTurnLevelAdvantageEnv.cli()
