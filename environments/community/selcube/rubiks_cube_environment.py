"""Rubik's cube solving, one move per turn, with a scramble curriculum and turn-level credit.

Each game (``{"seed": n, "level": l}``) scrambles a solved cube (``rubiks_cube_logic.py``) with a seeded
random sequence: ``scramble_moves`` deep, or, with ``use_curriculum`` (default), a depth of the current
curriculum level (``rubiks_cube_curriculum.py``: 1-3 moves at level 1 up to 18-22 at level 5, moving up as
the solve rate allows). Every episode of a group plays the same scramble. Each turn shows the cube (six
faces of colour letters), the moves made and the moves left; the model answers with one move (``U``,
``D``, ``L``, ``R``, ``F``, ``B``, each plain, ``'`` or ``2``) through the ``take_action`` tool (argument
``move``; ``--env.action_format tag`` for ``<action>R</action>``), after an optional ``<think>`` block that
never counts. A move sequence, an unknown move or no move ends the game with ``invalid_action_penalty``.

Reward per move: ``reward_per_correctly_placed_cubie`` (0.05) times the change in solved cubies (of 20),
minus ``reward_per_step_reduction`` (0.01); undoing a move gives back what it earned, so the shaping sums to
the net progress. Solving adds 1.0 plus the share of the allowed moves left over. The game ends when solved,
on an invalid move, or after ``max_steps`` moves (the level's allowance with the curriculum). With
``use_token_level_rewards`` (default, the original's name of ``turn_level_advantages``) each move's tokens get
its turn-level advantage, weighted by ``token_reward_scale``. Logged: ``train/won`` (solve rate),
``train/moves``, ``train/invalid_action``, ``train/curriculum_level``; evaluate plays ``eval_episodes``
games at the current level.

``python environments/community/selcube/rubiks_cube_environment.py {serve,process,evaluate} ...``
"""

from __future__ import annotations

import logging
import random
from typing import Any, Optional

from pydantic import Field

from atroposlib.envs.base import EvalHandlingEnum
from atroposlib.envs.episodes import Episode
from atroposlib.envs.games import GameEnv, GameEnvConfig, GameSession, InvalidAction, action_tool_schema

try:
    from environments.community.selcube import rubiks_cube_curriculum as curriculum
    from environments.community.selcube import rubiks_cube_logic as logic
except ModuleNotFoundError:  # run as a script: this folder is on the path
    import rubiks_cube_curriculum as curriculum
    import rubiks_cube_logic as logic

logger = logging.getLogger(__name__)

RULES = (
    "You solve Rubik's cubes one move at a time. Each turn shows the six faces (U up, R right, F front, D down, "
    "L left, B back) as 3x3 grids of colour letters, read as seen from outside the face (U with F at the "
    "bottom, D with F at the top, the side faces with U on top); a face is solved when all nine letters match "
    "its centre. Moves use standard notation: U, D, L, R, F, B turn that face clockwise as seen looking at it, "
    "U', D', L', R', F', B' counterclockwise and U2, D2, L2, R2, F2, B2 half a turn. You may think inside "
    "<think> </think> tags first; then make exactly one move."
)

IGNORED_KEYS = {
    "thinking_active": "replies may always open with a <think> block; nothing is prefilled",
    "max_think_chars_history": "episodes keep the whole chat, token-exact; max_token_length bounds it",
    "max_trajectory_tokens": "max_token_length bounds the episode's sequence",
    "tiebreak_token_factor": "groups are scored by their returns alone",
    "debug_mode": "logging is configured by the logging module",
    "generate_visualizations": "process writes an HTML page of every group it writes",
    "visualizations_dir": "see generate_visualizations",
    "save_best_episodes": "see generate_visualizations",
    "provide_solving_strategies": "the rules prompt is fixed; reasoning is never rewarded",
    "strategy_explanation_reward": "reasoning inside <think> never counts",
}


class RubiksCubeEnvConfig(GameEnvConfig):
    """GameEnvConfig plus the scramble, the curriculum and the reward settings (the original's names)."""

    ignored_original_keys = IGNORED_KEYS
    original_key_aliases = {
        "use_token_level_rewards": "turn_level_advantages",
        "token_reward_scale": "turn_advantage_weight",
    }

    max_steps: int = Field(20, ge=1, description="moves allowed without the curriculum")
    max_turns: int = Field(40, ge=1, description="model turns per episode at most (the longest allowance)")
    temperature: float = Field(0.7, ge=0.0, description="sampling temperature of training episodes")
    top_p: float = Field(0.9, gt=0.0, le=1.0, description="nucleus-sampling mass of training episodes")
    eval_episodes: int = Field(
        100, ge=1, description="evaluation games (seeds eval_seed ... + eval_episodes - 1)"
    )
    scramble_moves: int = Field(7, ge=1, description="scramble depth without the curriculum")
    cube_size: int = Field(3, ge=3, le=3, description="cube size (3x3 only)")
    reward_per_correctly_placed_cubie: float = Field(0.05, description="reward per cubie a move solves")
    reward_per_step_reduction: float = Field(0.01, description="cost of each move")
    use_curriculum: bool = Field(True, description="draw scramble depths from the curriculum's current level")
    curriculum_starting_level: int = Field(1, ge=1, le=5, description="curriculum level to start at")
    curriculum_max_level: int = Field(5, ge=1, le=5, description="highest curriculum level")
    curriculum_auto_progress: bool = Field(
        True, description="move up a level once the current one is mastered"
    )
    curriculum_success_threshold: float = Field(0.7, ge=0.0, le=1.0, description="solve rate that moves up")
    curriculum_advancement_window: int = Field(50, ge=1, description="recent episodes the solve rate is over")
    curriculum_min_solved: int = Field(
        25, ge=0, description="solved episodes needed in the window to move up"
    )
    turn_level_advantages: bool = Field(True, description="each move's tokens get its turn-level advantage")
    turn_advantage_weight: float = Field(
        0.1, ge=0.0, description="weight of per-move rewards in turn advantages"
    )


class CubeSession(GameSession):
    """One game: the scrambled cube, its move allowance and the move rewards."""

    argument = "move"

    def __init__(self, config: RubiksCubeEnvConfig, scrambled: list[str], limit: int, level: int):
        super().__init__(config.action_format, config.invalid_action_penalty)
        self.config = config
        self.cube = logic.Cube.solved()
        for move in scrambled:
            self.cube.rotate(move)
        self.scrambled = scrambled
        self.limit = limit
        self.level = level
        #: whether this is a training game (which counts for the curriculum)
        self.training = True
        schema = action_tool_schema("move", "one move in standard notation", list(logic.MOVES))
        self.open(RULES, schema, "R", self.observation())

    def observation(self) -> str:
        made = ", ".join(self.moves) if self.moves else "none"
        return (
            f"Current state of the cube:\n```\n{self.cube.render()}\n```\nMoves made: {made}\n"
            f"Moves left: {self.limit - len(self.moves)}\nSolved cubies: {self.cube.solved_cubies()} of 20"
        )

    def parse_move(self, text: str) -> str:
        move = text.strip().replace("’", "'")
        if move not in logic.MOVES:
            raise InvalidAction(f"{text!r} is not one move of U D L R F B (plain, ' or 2)")
        return move

    async def apply(self, move: str) -> tuple[float, bool, str]:
        before = self.cube.solved_cubies()
        self.cube.rotate(move)
        cfg = self.config
        reward = cfg.reward_per_correctly_placed_cubie * (self.cube.solved_cubies() - before)
        reward -= cfg.reward_per_step_reduction
        if self.cube.is_solved():
            self.won = True
            reward += 1.0 + (self.limit - len(self.moves)) / self.limit
            return reward, True, "The cube is solved."
        return reward, len(self.moves) >= self.limit, self.observation()


def cube_game(item: dict[str, int], config: RubiksCubeEnvConfig) -> tuple[list[str], int]:
    """The seeded scramble of an item ``{"seed": n, "level": l}`` (level 0: ``scramble_moves`` deep, else a
    depth of that curriculum level) and the moves allowed to solve it."""
    rng = random.Random(f"selcube:{item['seed']}")
    level = int(item.get("level", 0))
    if level:
        tier = curriculum.LEVELS[level]
        return logic.scramble(rng, tier.scramble_length(rng)), tier.max_steps
    return logic.scramble(rng, config.scramble_moves), config.max_steps


class RubiksCubeEnv(GameEnv):
    """Scrambled cubes solved move by move (see the module docstring)."""

    name = "rubiks_cube"
    env_config_cls = RubiksCubeEnvConfig
    config: RubiksCubeEnvConfig
    default_server_port = 9004

    def __init__(self, config: RubiksCubeEnvConfig, server_configs, slurm=False, testing=False):
        super().__init__(config, server_configs, slurm, testing)
        self.curriculum: Optional[curriculum.RubiksCubeCurriculum] = None
        if config.use_curriculum:
            self.curriculum = curriculum.RubiksCubeCurriculum(
                config.curriculum_starting_level,
                config.curriculum_max_level,
                config.curriculum_auto_progress,
                config.curriculum_success_threshold,
                config.curriculum_advancement_window,
                config.curriculum_min_solved,
            )

    @classmethod
    def default_env_config(cls) -> RubiksCubeEnvConfig:
        return RubiksCubeEnvConfig(
            group_size=16,
            max_num_workers=128,
            total_steps=2000,
            batch_size=1024,
            steps_per_eval=20,
            max_token_length=1024 * 16,
            eval_handling=EvalHandlingEnum.LIMIT_TRAIN,
            eval_limit_ratio=0.1,
        )

    def _level(self) -> int:
        return self.curriculum.current_level if self.curriculum else 0

    async def get_next_item(self) -> dict[str, int]:
        item = await super().get_next_item()
        return {**item, "level": self._level()}

    def eval_items(self) -> list[dict[str, int]]:
        return [{**item, "level": self._level()} for item in super().eval_items()]

    def game(self, item: dict[str, int]) -> tuple[list[str], int]:
        """The scramble of an item and the moves allowed to solve it (:func:`cube_game`)."""
        return cube_game(item, self.config)

    async def make_session(self, seed: int) -> CubeSession:
        """A game at the curriculum's current level (``new_session`` keeps the item's own level)."""
        return await self.new_session({"seed": seed, "level": self._level()})

    async def new_session(self, item: dict[str, int], *, evaluation: bool = False) -> CubeSession:
        scrambled, limit = self.game(item)
        session = CubeSession(
            self.config, scrambled, min(limit, self.config.max_turns), int(item.get("level", 0))
        )
        session.training = not evaluation
        return session

    def episode_metrics(self, session: CubeSession, episode: Episode) -> dict[str, float]:
        """The game's metrics; a training game at the current level also counts for the curriculum."""
        if self.curriculum and session.training and session.level == self.curriculum.current_level:
            if self.curriculum.record(session.won):
                logger.info("%s: curriculum moved up to level %d", self.name, self.curriculum.current_level)
        return {**session.metrics(), "curriculum_level": float(session.level)}

    def eval_sample_fields(self, item: Any, session: CubeSession, episode: Episode) -> dict[str, Any]:
        return {**super().eval_sample_fields(item, session, episode), "scramble": session.scrambled}


if __name__ == "__main__":
    RubiksCubeEnv.cli()
