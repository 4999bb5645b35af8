"""Padres spatial: reading a move, the geometric reward after pybullet settles the scene, task rows and scenes,
``process`` and ``evaluate``."""

from __future__ import annotations

import json
import re

import pytest

from atroposlib.envs.cli import CliUsageError, parse_command
from environments.community.padres_spatial.actions import parse_move
from environments.community.padres_spatial.scene import generated_tasks, original_task
from environments.community.padres_spatial.spatial_env import (
    SpatialEnvironmentMVP,
    SpatialEnvironmentMVPConfig,
)
from tests.environments.community.community_runs import bad_rows_error, evaluate_local, process_local
from tests.helpers.cli_runs import FIXTURES
from tests.helpers.single_turn_runs import check_group, offline_env, prompt_text

SAMPLE = FIXTURES / "community" / "padres_spatial" / "tasks_sample.jsonl"
_OBJECT = re.compile(r"- ID: (\S+), Type: \w+, Size: \[([^\]]*)\], Current Position: \[([^\]]*)\]")
_ROLES = re.compile(r"Move the (\S+) next to the (\S+):")


def move(position, object_id="red_cube", **extra) -> str:
    return json.dumps(
        {"action_type": "move_object", "object_id": object_id, "target_position": position, **extra}
    )


@pytest.mark.parametrize(
    "reply",
    [
        move([-1, 0.5, 0.5]),
        '{"target_position": [-1.0, 0.5, 0.50], "object_id": "red_cube", "action_type": "move_object"}',
        "<think>the sphere is at x=-2, so x=-1 touches it</think>\n```json\n"
        + move([-1.0, 0.5, 0.5])
        + "\n```",
        "  " + move([-1e0, 5e-1, 0.5]) + "\n",
    ],
)
def test_equivalent_moves_read_alike(reply):
    assert parse_move(reply, "red_cube") == (-1.0, 0.5, 0.5)


@pytest.mark.parametrize(
    "reply",
    [
        "",
        "Here is my move: " + move([-1, 0.5, 0.5]),  # prose around the JSON
        move([-1, 0.5, 0.5]) + "\n" + move([-3, 0.5, 0.5]),  # a hedge
        move([-1, 0.5, 0.5]) + "\n" + move([-1, 0.5, 0.5]),  # stated twice
        move([-1, 0.5, 0.5], object_id="blue_sphere"),  # moves the reference instead
        move([-1, 0.5, 0.5]).replace("move_object", "push_object"),
        move(["-1", "0.5", "0.5"]),
        move([-1, 0.5]),
        move([-1, 0.5, 1e9]),  # outside the world
        move([-1, 0.5, 0.5], note="touching"),
        '{"action_type": "move_object", "object_id": "red_cube", "target_position": [NaN, 0, 0]}',
        '{"action_type": "move_object", "object_id": "red_cube", "object_id": "red_cube", "target_position": [1, 0, 0]}',
        "<think>" + move([-1, 0.5, 0.5]) + "</think>",  # only in the reasoning
        "<think>" + move([-1, 0.5, 0.5]),
    ],
)
def test_no_move(reply):
    assert parse_move(reply, "red_cube") is None


@pytest.fixture
async def env(tiny_model_dir):
    env = offline_env(
        SpatialEnvironmentMVP, tiny_model_dir, dataset_path=str(SAMPLE), eval_dataset_path=str(SAMPLE)
    )
    await env.setup()
    return env


@pytest.mark.parametrize(
    ("position", "reward"),
    [
        ([-1, 0.5, 0.5], 1.0),  # touching the sphere's inner face
        ([-3, 0.5, 0.5], 1.0),  # touching its outer face: the same placement by symmetry
        ([-2, 1.5, 0.5], 1.0),  # beside it along y
        ([-2, 0.5, 1.5], 1.0),  # resting on top of it
        ([-2, 0.5, 0.5], 0.6),  # stuffed into the sphere: pushed out on top, 1.52 away
        ([-1.5, 0.5, 0.5], 0.6),  # overlapping: pushed apart, 1.26 away
        ([-2, 0.5, 3.0], 0.4),  # dropped from above: still falling, 2.46 away
        ([0.5, 0.5, 0.5], 0.2),  # 2.5 away on the wrong side
        ([-0.4, 0.5, 0.5], 0.6),  # 1.6 away on the right side
        ([2, 0.5, 0.5], 0.0),  # left where it was
        ([-40, 0.5, 0.5], 0.2),  # far off on the right side
    ],
)
async def test_rewards_follow_the_settled_scene(env, position, reward):
    assert env.score_replies([move(position)], env.test[0]) == [reward]


async def test_hacks_and_malformed_replies_score_nothing(env):
    task = env.test[0]
    prompt_echo = prompt_text(env.prompt_messages(task))
    replies = ["<think>" + move([-1, 0.5, 0.5]) + "</think>\nI cannot decide.", prompt_echo,
               move([-1, 0.5, 0.5]) + move([-3, 0.5, 0.5]), "{}", move([-1, 0.5, 0.5], object_id="blue_sphere")]  # fmt: skip
    assert env.score_replies(replies, task) == [0.0] * len(replies)
    assert env.share_metrics()["train/valid_move"] == 0.0


async def test_other_scenes_of_the_sample(env):
    by_id = {task.task_id: task for task in env.test}
    assert [t.task_id for t in env.test] == ["original", "positive_side", "with_obstacle", "big_sphere"]
    # touching the outer face; 2 away on the sphere's side (x > 0), along x or y; 3 away on the other side
    replies = [move([3.5, -1, 0.5]), move([0.5, -1, 0.5]), move([2.5, 1.0, 0.5]), move([-0.5, -1, 0.5])]
    assert env.score_replies(replies, by_id["positive_side"]) == [1.0, 0.4, 0.4, 0.0]
    # the green cube stands where the red one is put: the two are pushed apart, the red one out of reach
    obstacle = env.score_replies([move([-3, 1.5, 0.5]), move([-3, -1.0, 0.5])], by_id["with_obstacle"])
    assert obstacle[0] < 1.0 and obstacle[1] == 1.0
    # against the big sphere's outer face; stuffed inside it
    big = env.score_replies([move([-3.5, 0, 1.0]), move([-2.0, 0, 0.5])], by_id["big_sphere"])
    assert big[0] == 1.0 and big[1] < 1.0


async def test_logged_shares(env):
    env.share_metrics()
    env.score_replies(
        [move([-1, 0.5, 0.5]), move([0.5, 0.5, 0.5]), "nope", move([-0.4, 0.5, 0.5])], env.test[0]
    )
    assert env.share_metrics() == {
        "train/valid_move": 0.75, "train/side_condition_met": 0.5, "train/within_target": 0.25,
    }  # fmt: skip


def test_generated_scenes_start_apart_on_opposite_sides():
    tasks = generated_tasks(50, 3, 1.0, "train")
    assert tasks == generated_tasks(50, 3, 1.0, "train") and tasks != generated_tasks(50, 4, 1.0, "train")
    for task in tasks:
        cube, sphere = task.object("red_cube"), task.object("blue_sphere")
        assert cube.position[0] * sphere.position[0] < 0 and abs(cube.position[0] - sphere.position[0]) >= 3
    assert {t.object("blue_sphere").position[0] > 0 for t in tasks} == {True, False}
    assert original_task().object("red_cube").position == (2.0, 0.5, 0.5)


async def test_default_scenes_options_and_original_keys(tiny_model_dir, tmp_path):
    shipped = offline_env(SpatialEnvironmentMVP, tiny_model_dir, train_scenes=20, eval_scenes=5)
    await shipped.setup()
    assert len(shipped.train) == 20 and len(shipped.test) == 5 and shipped.train[0] != shipped.test[0]
    single = offline_env(SpatialEnvironmentMVP, tiny_model_dir, randomize_scenes=False)
    await single.setup()
    assert single.train[0].initial_objects == original_task().initial_objects and len(single.test) == 1
    config = SpatialEnvironmentMVPConfig()
    assert (config.simulation_steps, config.target_distance, config.eval_scenes) == (20, 1.0, 50)
    path = tmp_path / "padres.yaml"
    path.write_text("env:\n  num_turns: 5\n")
    with pytest.raises(CliUsageError, match="num_turns .* is not supported here: use --env.total_steps"):
        parse_command(SpatialEnvironmentMVP, ["process", "--config", str(path)]).resolve()


@pytest.mark.parametrize(
    ("row", "match"),
    [
        ({"target_object_id": "a", "reference_object_id": "b"}, "row 0: missing field 'initial_objects'"),
        ({"initial_objects": [{"id": "a", "type": "cone", "position": [0, 0, 0]}], "target_object_id": "a",
          "reference_object_id": "a"}, r"row 0: field 'initial_objects' \[0\]: field 'type'"),
        ({"initial_objects": [{"id": "a", "type": "cube", "position": [0, 0]}], "target_object_id": "a",
          "reference_object_id": "a"}, "row 0: field 'initial_objects' .*: field 'position' must be a list of 3"),
        ({"initial_objects": [{"id": "a", "type": "cube", "position": [0, 0, 0]}], "target_object_id": "a",
          "reference_object_id": "b"}, "row 0: field 'reference_object_id' names no object"),
        ({"initial_objects": [{"id": "a", "type": "cube", "position": [0, 0, 0], "scale": [0, 1, 1]}],
          "target_object_id": "a", "reference_object_id": "a"}, "field 'scale' must be a list of 3 positive"),
    ],
)  # fmt: skip
async def test_bad_rows_stop_with_one_line(tiny_model_dir, tmp_path, row, match):
    error = await bad_rows_error(SpatialEnvironmentMVP, tiny_model_dir, tmp_path, [row], match)
    assert "\n" not in str(error)


def _touching_move(prompt) -> str:
    """The target object put against the reference's outer face, at the reference's height."""
    text = prompt_text(prompt)
    target, reference = _ROLES.search(text).groups()
    objects = {name: ([float(v) for v in size.split(",")], [float(v) for v in at.split(",")])
               for name, size, at in _OBJECT.findall(text)}  # fmt: skip
    (target_size, _), (ref_size, ref_at) = objects[target], objects[reference]
    side = 1.0 if ref_at[0] > 0 else -1.0
    x = ref_at[0] + side * (target_size[0] + ref_size[0]) / 2
    return move([x, ref_at[1], ref_at[2]], object_id=target)


def _responder(prompt, index):
    """A touching move for even choices, the move stated twice (a hedge) for odd ones."""
    touching = _touching_move(prompt)
    return (
        f"<think>against its far face</think>\n{touching}" if index % 2 == 0 else touching + "\n" + touching
    )


def test_process_end_to_end(scripted):
    groups = process_local(scripted, SpatialEnvironmentMVP, SAMPLE, _responder, group_size=2, total_steps=2,
                           max_tokens=256)  # fmt: skip
    assert len(groups) == 2
    for group in groups:
        check_group(group, 2)
        assert sorted(group["scores"]) == [0.0, 1.0]


def test_evaluate_reports_moves(scripted):
    def responder(prompt, index):
        positive_side = "[2.50, -1.00, 0.50]" in prompt_text(prompt)
        return "no idea" if positive_side else _touching_move(prompt)

    metrics = evaluate_local(scripted, SpatialEnvironmentMVP, SAMPLE, responder, max_tokens=256).metrics
    assert metrics["eval/percent_correct"] == 0.75 and metrics["eval/mean_score"] == 0.75
    assert metrics["eval/valid_move_rate"] == 0.75
    assert 1.0 <= metrics["eval/mean_final_distance"] < 1.2
