"""Blackjack with per-step alternatives valued by the environment (the original's "thinking" variant).

Each item is one seeded hand (``Blackjack-v1``). At every turn ``group_size`` alternative replies are sampled
from the same position (the assistant turn opens with ``<think>`` when ``thinking_active``); each makes its
move (``take_action`` tool call, as in ``blackjack_env.py``; a reply without a valid move sticks) in a copy of
the game, and is scored by its advantage under the game's exact optimal value::

    score_i = r_i + format_i + tiebreak_i + V*(s'_i) - V*(s)

``r_i`` is the move's reward (+1/-1/0 when it ends the hand), ``format_i`` +0.2 for a valid move (-0.2
otherwise) and +0.2 for a non-empty ``<think>`` block (-0.2 for a missing or empty one), ``tiebreak_i`` =
``tiebreak_token_factor * (1 - reply tokens / max_token_length)``. ``V*`` is computed exactly by playing every
hit/stick line out on copies of the game (its card draws are fixed by the hand's seed; 0 once the hand is
over). Each turn's alternatives form one group (only their replies are trained; the earlier turns, the
observations and the prefilled ``<think>`` are masked); the best alternative (highest score, then fewest
tokens) is played in the real hand, its thinking shortened to ``max_think_chars_history`` tokens in the
history. A hand lasts at most ``max_turns`` turns; a turn whose prompt would pass ``max_trajectory_tokens``
ends it.

Evaluation plays ``eval_episodes`` held-out hands with one reply per turn and reports the win rate
(``eval/percent_correct``), the mean return (``eval/mean_score``) and the share of invalid moves.

``python environments/game_environments/blackjack_env_thinking.py {serve,process,evaluate} --openai.base_url ...``
"""

from __future__ import annotations

import copy
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

import gymnasium as gym
from pydantic import Field

# Run as a script (``python environments/<this file>``), the repository root is not on the path yet.
sys.path.insert(0, str(Path(__file__).resolve().parents[2]))

from atroposlib.envs.config_defaults import LocalServerDefaults  # noqa: E402
from atroposlib.envs.games import (  # noqa: E402
    InvalidAction,
    SeededGames,
    action_instructions,
    action_tool_schema,
    parse_action,
)
from atroposlib.envs.groups import ScoredDataGroup  # noqa: E402
from atroposlib.envs.reporting import mean  # noqa: E402
from atroposlib.envs.single_turn import SingleTurnEnv, SingleTurnEnvConfig  # noqa: E402
from atroposlib.utils.best_of_n_selection import select_best_index  # noqa: E402
from atroposlib.utils.message_history_utils import truncate_thinking  # noqa: E402
from environments.game_environments.blackjack_env import MOVES, RULES, card_name, describe_hand  # noqa: E402

THINK_PREFILL = "<think>\n"
STICK = MOVES["stick"]
_THINK = re.compile(r"<think>(.*?)</think>", re.DOTALL)


class BlackjackThinkingEnvConfig(SingleTurnEnvConfig):
    """SingleTurnEnvConfig plus the original's settings of the thinking variant."""

    env_name: str = Field("Blackjack-v1", description="the Gymnasium environment id")
    temperature: float = Field(0.7, ge=0.0, description="sampling temperature of the alternatives")
    top_p: float = Field(0.9, gt=0.0, le=1.0, description="nucleus-sampling mass of the alternatives")
    max_turns: Optional[int] = Field(5, ge=1, description="turns per hand at most")
    thinking_active: bool = Field(True, description="open every assistant turn with <think>")
    eval_episodes: int = Field(100, ge=1, description="evaluation hands (seeds eval_seed ...)")
    max_think_chars_history: int = Field(3000, ge=1, description="thinking kept per earlier turn (tokens)")
    max_trajectory_tokens: int = Field(24576, ge=1, description="a turn's prompt may not grow past this")
    debug_mode: bool = Field(False, description="log every alternative's valuation")
    group_size: int = Field(16, ge=2, description="alternatives sampled per turn")
    tiebreak_token_factor: float = Field(0.01, ge=0.0, description="bonus scale of shorter replies")
    seed: int = Field(0, description="seed of the first training hand (hand k uses seed + k)")
    eval_seed: int = Field(1_000_000, description="seed of the first evaluation hand")


def optimal_value(env: gym.Env) -> float:
    """``V*`` of the position ``env`` is in: the best return hit/stick play reaches from it, found by trying
    both moves on copies (the copies draw the same cards the game would)."""
    stick = copy.deepcopy(env)
    _, stick_reward, _, _, _ = stick.step(STICK)
    hit = copy.deepcopy(env)
    _, hit_reward, terminated, truncated, _ = hit.step(MOVES["hit"])
    hit_value = float(hit_reward) if terminated or truncated else float(hit_reward) + optimal_value(hit)
    return max(float(stick_reward), hit_value)


@dataclass
class Hand:
    """One hand being played: the real game, the chat so far and the moves made."""

    seed: int
    env: gym.Env
    messages: list[dict[str, str]]
    moves: list[str] = field(default_factory=list)
    total_reward: float = 0.0
    invalid_moves: int = 0
    over: bool = False


@dataclass
class Alternative:
    """One sampled reply from a position: its move, the game after it and its score."""

    reply: str
    move: int
    valid: bool
    env: gym.Env
    reward: float
    over: bool
    observation: Any = None
    score: float = 0.0


class BlackjackThinkingEnv(LocalServerDefaults, SeededGames, SingleTurnEnv):
    """Blackjack trained on per-turn alternatives valued by the game (see the module docstring)."""

    name = "blackjack_thinking"
    env_config_cls = BlackjackThinkingEnvConfig
    config: BlackjackThinkingEnvConfig
    default_server_settings = {"server_type": "vllm"}

    @classmethod
    def default_env_config(cls) -> BlackjackThinkingEnvConfig:
        return BlackjackThinkingEnvConfig(batch_size=1024, max_token_length=2048, wandb_name="blackjack")

    # -- the game ---------------------------------------------------------------------------------------
    def new_hand(self, seed: int) -> Hand:
        env = gym.make(self.config.env_name)
        observation, _ = env.reset(seed=seed)
        schema = action_tool_schema("action", "your move", list(MOVES))
        system = f"{RULES}\n\n{action_instructions('tool_call', 'action', 'hit', schema)}"
        return Hand(seed, env, [{"role": "system", "content": system},
                                {"role": "user", "content": self.describe(env, observation)}])  # fmt: skip

    @staticmethod
    def describe(env: gym.Env, observation) -> str:
        total, dealer_up, usable_ace = (int(v) for v in observation)
        return describe_hand(list(env.unwrapped.player), dealer_up, total, bool(usable_ace))

    def play(self, hand: Hand, reply: str) -> Alternative:
        """``reply``'s move played on a copy of the hand's game (an invalid reply sticks)."""
        try:
            move, valid = MOVES[parse_action(reply, "tool_call").lower()], True
        except (InvalidAction, KeyError):
            move, valid = STICK, False
        env = copy.deepcopy(hand.env)
        observation, reward, terminated, truncated, _ = env.step(move)
        return Alternative(reply, move, valid, env, float(reward), bool(terminated or truncated), observation)

    def format_reward(self, alternative: Alternative) -> float:
        """The original's shaping: +-0.2 for a valid move, +-0.2 for non-empty thinking, a length tiebreak."""
        bonus = 0.2 if alternative.valid else -0.2
        think = _THINK.search(alternative.reply)
        bonus += 0.2 if think and think.group(1).strip() else -0.2
        tokens = (
            len(self.tokenizer.encode(alternative.reply, add_special_tokens=False))
            if alternative.reply
            else 0
        )
        ratio = min(1.0, tokens / self.config.max_token_length)
        return bonus + self.config.tiebreak_token_factor * (1.0 - ratio)

    def value_alternatives(self, hand: Hand, replies: list[str]) -> list[Alternative]:
        """Every reply played and scored by its advantage ``r + format + V*(s') - V*(s)``."""
        value_now = optimal_value(hand.env)
        alternatives = [self.play(hand, reply) for reply in replies]
        for alt in alternatives:
            value_next = 0.0 if alt.over else optimal_value(alt.env)
            alt.score = alt.reward + self.format_reward(alt) + value_next - value_now
        return alternatives

    def advance(self, hand: Hand, chosen: Alternative) -> None:
        """Play the chosen alternative in the real hand and extend the chat."""
        hand.env = chosen.env
        hand.moves.append([name for name, move in MOVES.items() if move == chosen.move][0])
        hand.total_reward += chosen.reward
        hand.invalid_moves += 0 if chosen.valid else 1
        shortened = truncate_thinking(chosen.reply, self.tokenizer, self.config.max_think_chars_history)
        hand.messages.append({"role": "assistant", "content": shortened})
        hand.over = chosen.over
        if chosen.over:
            dealer = ", ".join(card_name(c) for c in hand.env.unwrapped.dealer)
            hand.messages.append({"role": "user", "content": f"The hand is over (dealer's cards: {dealer})."})
        else:
            hand.messages.append({"role": "user", "content": self.describe(hand.env, chosen.observation)})

    # -- single-turn hooks: a turn's prompt is the hand's chat so far -------------------------------------
    def prompt_messages(self, item: Hand) -> list[dict[str, str]]:
        return list(item.messages)

    def prefill(self, item: Hand) -> str:
        return THINK_PREFILL if self.config.thinking_active else ""

    async def setup(self) -> None:
        """Nothing to load: hands are dealt from their seeds."""

    def _prompt_tokens(self, hand: Hand) -> int:
        rendered = self.tokenizer.apply_chat_template(
            hand.messages, add_generation_prompt=True, tokenize=False
        )
        return len(self.tokenizer.encode(rendered, add_special_tokens=False))

    async def collect_trajectories(self, item: dict[str, int]) -> tuple[list[ScoredDataGroup], list]:
        """One hand: a group of alternatives per turn."""
        hand = self.new_hand(int(item["seed"]))
        groups: list[ScoredDataGroup] = []
        try:
            for _turn in range(self.config.max_turns or 5):
                if hand.over or self._prompt_tokens(hand) > self.config.max_trajectory_tokens:
                    break
                sampled = await self.sample_group(hand)
                if sampled is None:
                    break
                messages, replies, nodes = sampled
                alternatives = self.value_alternatives(hand, replies)
                scores = [alt.score for alt in alternatives]
                self.record_valued_turn(hand, alternatives)
                groups.append(self.build_group(messages, replies, nodes, scores))
                best = select_best_index(scores, [len(node.tokens) for node in nodes])
                self.advance(hand, alternatives[best])
        finally:
            hand.env.close()
        self.percent_correct_buffer.append(1.0 if hand.total_reward > 0 else 0.0)
        return groups, []

    def record_valued_turn(self, hand: Hand, alternatives: list[Alternative]) -> None:
        if self.config.debug_mode:
            for alt in alternatives:
                print(f"[blackjack_thinking] seed {hand.seed} turn {len(hand.moves) + 1}: move {alt.move} "
                      f"valid {alt.valid} reward {alt.reward:+g} score {alt.score:+.3f}", file=sys.stderr)  # fmt: skip

    # -- evaluation: whole hands, one reply per turn ------------------------------------------------------
    async def _eval_one(self, item: dict[str, int], sem) -> dict[str, Any]:
        hand = self.new_hand(int(item["seed"]))
        try:
            for _turn in range(self.config.max_turns or 5):
                if hand.over:
                    break
                _, reply = await self.sample_eval_reply(hand, sem)
                self.advance(hand, self.play(hand, reply))
        finally:
            hand.env.close()
        return {
            "messages": hand.messages,
            "seed": hand.seed,
            "moves": hand.moves,
            "invalid_moves": hand.invalid_moves,
            "score": hand.total_reward,
            "correct": hand.total_reward > 0,
        }

    def extra_eval_metrics(self, samples: list[dict[str, Any]]) -> dict[str, float]:
        moves = sum(len(s["moves"]) for s in samples)
        return {"eval/invalid_action_rate": sum(s["invalid_moves"] for s in samples) / max(1, moves),
                "eval/mean_moves": mean([float(len(s["moves"])) for s in samples])}  # fmt: skip


if __name__ == "__main__":
    BlackjackThinkingEnv.cli()
