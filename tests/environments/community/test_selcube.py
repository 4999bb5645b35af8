"""The Rubik's cube environment: the simulator, moves and rewards, the curriculum, the original's settings,
``process`` and ``evaluate``."""

from __future__ import annotations

import itertools
import random
import re

import pytest

from environments.community.selcube.rubiks_cube_curriculum import LEVELS, RubiksCubeCurriculum
from environments.community.selcube.rubiks_cube_environment import (
    CubeSession,
    RubiksCubeEnv,
    RubiksCubeEnvConfig,
    cube_game,
)
from environments.community.selcube.rubiks_cube_logic import FACES, MOVES, Cube, inverse, scramble
from tests.environments.community.community_runs import numbered_episodes
from tests.helpers.multi_turn_runs import take_action
from tests.helpers.single_turn_runs import prompt_text


def _turned(*moves: str) -> Cube:
    cube = Cube.solved()
    for move in moves:
        cube.rotate(move)
    return cube


@pytest.mark.parametrize("move", MOVES)
def test_every_move_is_undone_by_its_inverse_and_four_quarter_turns(move):
    assert not _turned(move).is_solved()
    assert _turned(move, inverse(move)).is_solved() and _turned(*[move[0]] * 4).is_solved()
    assert _turned(move[0], move[0]).stickers == _turned(move[0] + "2").stickers


def test_turn_directions_and_known_identities():
    cube = _turned("R")  # the front's right column moves up to the top
    assert [cube.face("U")[i] for i in (2, 5, 8)] == ["G"] * 3 and [cube.face("F")[i] for i in (2, 5, 8)] == [
        "Y"
    ] * 3
    assert _turned("U").face("F")[:3] == ["R"] * 3  # U brings the right face's top row to the front
    assert _turned("F").face("R")[0::3] == ["W"] * 3  # F brings the top face's bottom row to the right
    assert (
        _turned(*["R", "U", "R'", "U'"] * 6).is_solved()
        and not _turned(*["R", "U", "R'", "U'"] * 5).is_solved()
    )
    assert Cube.solved().solved_cubies() == 20 and _turned("R").solved_cubies() == 12
    with pytest.raises(ValueError):
        Cube.solved().rotate("M")


def test_scrambles_are_seeded_and_turn_a_new_face_each_move():
    moves = scramble(random.Random(3), 25)
    assert moves == scramble(random.Random(3), 25) and len(moves) == 25
    assert all(a[0] != b[0] for a, b in zip(moves, moves[1:], strict=False))


def _session(scrambled, **config):
    return CubeSession(RubiksCubeEnvConfig(**config), list(scrambled), 5, 1)


async def test_rewards_for_progress_solving_and_invalid_moves():
    session = _session(["R", "U"])
    assert (
        "Moves left: 5" in session.messages[1]["content"]
        and "Solved cubies: " in session.messages[1]["content"]
    )
    first = await session.step(take_action("U'", "move"), 0)
    before, after = _turned("R", "U").solved_cubies(), _turned("R").solved_cubies()
    assert first.reward == pytest.approx(0.05 * (after - before) - 0.01) and not first.done
    last = await session.step(f"<think>undo R</think>{take_action('R’', 'move')}", 1)  # a typographic prime
    assert (
        last.done and session.won and last.reward == pytest.approx(0.05 * (20 - after) - 0.01 + 1.0 + 3 / 5)
    )
    undo = _session(["R", "U"])
    rewards = [(await undo.step(take_action(m, "move"), t)).reward for t, m in enumerate(["F", "F'"])]
    assert sum(rewards) == pytest.approx(-0.02)  # undoing a move gives back what it earned
    for reply in [
        take_action("R U", "move"),
        take_action("M", "move"),
        "R",
        f"<think>{take_action('R', 'move')}</think>",
    ]:
        bad = _session(["R"])
        feedback = await bad.step(reply, 0)
        assert feedback.done and feedback.reward == -1.0 and not bad.won
    tag = _session(["R"], action_format="tag")
    assert (await tag.step("<action>R'</action>", 0)).done and tag.won


async def test_the_game_ends_after_its_allowance():
    session = _session(["R", "U", "F"])
    for turn, move in enumerate(["L", "L'", "L", "L'"]):
        assert not (await session.step(take_action(move, "move"), turn)).done
    assert (await session.step(take_action("D", "move"), 4)).done and not session.won


def test_curriculum_moves_up_on_a_full_window_of_successes():
    curriculum = RubiksCubeCurriculum(1, 3, True, 0.7, 4, 3)
    assert [curriculum.record(s) for s in (True, False, True)] == [False] * 3  # the window is not full
    assert curriculum.record(True) and curriculum.current_level == 2 and not curriculum.recent
    for _ in range(8):
        curriculum.record(True)
    assert curriculum.current_level == 3  # the highest level allowed
    fixed = RubiksCubeCurriculum(1, 5, False, 0.7, 2, 1)
    assert not any(fixed.record(True) for _ in range(5)) and fixed.current_level == 1
    assert (LEVELS[1].min_scramble_moves, LEVELS[5].max_scramble_moves, LEVELS[5].max_steps) == (1, 22, 40)


def test_original_settings():
    config, server = RubiksCubeEnv.config_init()
    assert (config.group_size, config.max_steps, config.scramble_moves, config.temperature) == (
        16,
        20,
        7,
        0.7,
    )
    assert (
        config.use_curriculum
        and config.turn_level_advantages
        and server.base_url == "http://localhost:9004/v1"
    )
    original = RubiksCubeEnvConfig(use_token_level_rewards=False, token_reward_scale=0.3, debug_mode=True,
                                   generate_visualizations=True, provide_solving_strategies=True)  # fmt: skip
    assert not original.turn_level_advantages and original.turn_advantage_weight == 0.3
    with pytest.raises(ValueError):
        RubiksCubeEnvConfig(cube_size=4)


def _solution(cube: Cube, depth: int = 4) -> list[str]:
    """A shortest solving sequence of at most ``depth`` moves (iterative deepening)."""
    for length in range(depth + 1):
        for moves in itertools.product(MOVES, repeat=length):
            if any(a[0] == b[0] for a, b in zip(moves, moves[1:], strict=False)):
                continue
            trial = Cube(list(cube.stickers))
            for move in moves:
                trial.rotate(move)
            if trial.is_solved():
                return list(moves)
    raise AssertionError("no solution found")


def _shown_cube(text: str) -> Cube:
    block = text.rsplit("```\nU:", 1)[1].split("```", 1)[0]
    faces = {
        m.group(1): m.group(2).split()
        for m in re.finditer(r"([URFDLB]):\n((?:[A-Z] [A-Z] [A-Z]\n?){3})", "U:" + block)
    }
    return Cube([c for f in FACES for c in faces[f]])


def solver(spoil_every: int = 0):
    """Solves each shown cube a move at a time; episode ``k`` (in order of arrival) plays an invalid move
    instead when ``spoil_every`` and ``k % spoil_every == 1``."""

    def act(prompt, spoiled):
        text = prompt_text(prompt) if isinstance(prompt, list) else str(prompt)
        return take_action("X" if spoiled else _solution(_shown_cube(text))[0], "move")

    return numbered_episodes(act, spoil_every)


def test_process_writes_turn_level_groups(scripted):
    args = ["--env.group_size", "2", "--env.total_steps", "2", "--env.max_num_workers", "1",
            "--env.max_tokens_per_turn", "64", "--env.max_token_length", "8192"]  # fmt: skip
    groups = scripted.process(RubiksCubeEnv, args, solver(spoil_every=2))
    assert len(groups) == 2
    for group in groups:
        solved, spoiled = sorted(group["scores"], reverse=True)
        assert solved > 1.0 and spoiled == pytest.approx(-1.0)
        assert len(group["advantages"]) == 2 and all(
            len(a) == len(t) for a, t in zip(group["advantages"], group["tokens"], strict=True)
        )
        assert group["messages"][0][1]["content"].startswith("Current state of the cube:")


def test_evaluate_solves_level_one_scrambles(scripted):
    evaluation = scripted.evaluation(
        RubiksCubeEnv,
        ["--env.eval_episodes", "3", "--env.max_tokens_per_turn", "64", "--env.max_token_length", "8192"],
        solver(),
    )
    metrics, samples = evaluation.metrics, evaluation.samples
    games = [cube_game({"seed": 1_000_000 + k, "level": 1}, RubiksCubeEnvConfig())[0] for k in range(3)]
    lengths = [len(_solution(_turned(*moves))) for moves in games]
    assert metrics["eval/percent_correct"] == 1.0 and metrics["eval/won"] == 1.0
    assert (
        metrics["eval/moves"] == pytest.approx(sum(lengths) / 3) and metrics["eval/curriculum_level"] == 1.0
    )
    assert sorted(len(s["moves"]) for s in samples) == sorted(lengths)
