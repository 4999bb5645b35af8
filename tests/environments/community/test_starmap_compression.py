"""The star map compression environment: fields, the worth of a kept subset, the reply's answer, catalogues,
``process`` and ``evaluate``."""

from __future__ import annotations

import random
import re

import numpy as np
import pytest

from environments.community.starmap_compression.starfield import StarField, generate_field
from environments.community.starmap_compression.starmap_compression import (
    StarMapCompressionEnv,
    field_prompt,
    map_score,
)
from tests.helpers.cli_runs import FIXTURES
from tests.helpers.single_turn_runs import check_groups, offline_env, prompt_text, setup_failure

DATA = FIXTURES / "community" / "starmap_compression"
# Star 0 is seen from both views, stars 1 and 2 from one each, star 3 from none; two may be kept.
FIELD = StarField(
    stars=((0.0, 0.0, 0.0), (10.0, 0.0, 0.0), (-10.0, 0.0, 0.0), (100.0, 100.0, 0.0)),
    views=((6.0, 0.0, 0.0), (-6.0, 0.0, 0.0)),
    radius=6.5,
    budget=2,
)


def test_values_optimum_and_prompt():
    assert FIELD.values() == [2, 1, 1, 0] and FIELD.optimum() == 3
    prompt = field_prompt(FIELD)
    assert "star 3: (100.0, 100.0, 0.0)" in prompt and "View radius: 6.5" in prompt
    assert prompt.endswith("Keep at most 2 of the 4 stars.")


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        ("<answer>0, 1</answer>", 1.0),
        ("<think>Star 0 is seen twice.</think><answer> 2 ;0 </answer>", 1.0),  # another optimum, any spacing
        ("<answer>1 0 1</answer>", 1.0),  # a repeat counts once
        ("<answer>0</answer>", 2 / 3),  # under the budget
        ("<answer>1, 2</answer>", 2 / 3),
        ("<answer>3</answer>", 0.0),  # a star nobody sees
        ("<answer>0, 1</answer> to be sure <answer>0, 1</answer>", 1.0),  # the same answer twice
        ("<answer>0, 1, 2</answer>", -1.0),  # over the budget
        ("<answer>0, 1, 2, 3</answer>", -1.0),  # every star
        ("<answer>0, 1</answer><answer>0, 2</answer>", -1.0),  # two different answers
        ("<answer>0, 7</answer>", -1.0),  # no star 7
        ("<answer>stars 0 and 1</answer>", -1.0),
        ("<answer>0-1</answer>", -1.0),
        ("<think><answer>0, 1</answer></think>", -1.0),  # only inside the reasoning
        ("<think><answer>0, 1</answer>", -1.0),  # reasoning never closes
        ("0, 1", -1.0),  # no answer tags
        ("<answer></answer>", -1.0),
        ("", -1.0),
    ],
)
def test_reward(reply, score):
    assert map_score(reply, FIELD) == pytest.approx(score)


def test_generated_fields_are_seeded_and_about_half_seen():
    one = generate_field(random.Random("a"), 30, 3, 0.3)
    assert (
        one
        == generate_field(random.Random("a"), 30, 3, 0.3)
        != generate_field(random.Random("b"), 30, 3, 0.3)
    )
    assert one.budget == 9 and len(one.stars) == 30 and len(one.views) == 3
    seen = sum(1 for v in one.values() if v > 0)
    assert 15 <= seen <= 17 and one.optimum() >= one.budget


async def test_catalogue_fields(tiny_model_dir):
    env = offline_env(StarMapCompressionEnv, tiny_model_dir, data_path=str(DATA / "stars.npy"),
                      views_path=str(DATA / "views.npy"), n_stars=12, n_views=2)  # fmt: skip
    await env.setup()
    field = env.field({"seed": 4})
    stars = [tuple(round(float(v), 1) for v in row[:3]) for row in np.load(DATA / "stars.npy")]
    views = [tuple(round(float(v), 1) for v in row) for row in np.load(DATA / "views.npy")]
    assert len(field.stars) == 12 and set(field.stars) <= set(stars) and set(field.views) <= set(views)
    assert field == env.field({"seed": 4}) and env.eval_items()[0] == {"seed": 1_000_000}


@pytest.mark.parametrize(
    ("data", "views", "extra", "message"),
    [
        ("missing.npy", None, {}, "missing.npy: cannot read the star catalogue"),
        ("flat.npy", None, {}, "flat.npy: the star catalogue must be an N x 3 array"),
        ("nan.npy", None, {}, "nan.npy: row 2: a coordinate is not a finite number"),
        (None, "views.npy", {}, "--env.views_path needs --env.data_path"),
        ("stars.npy", None, {"n_stars": 500}, "stars.npy: 80 stars, fewer than n_stars=500"),
    ],
)
async def test_bad_catalogues(tiny_model_dir, tmp_path, data, views, extra, message):
    np.save(tmp_path / "flat.npy", np.zeros(5))
    bad = np.zeros((4, 3))
    bad[2, 1] = np.nan
    np.save(tmp_path / "nan.npy", bad)
    (tmp_path / "stars.npy").write_bytes((DATA / "stars.npy").read_bytes())
    (tmp_path / "views.npy").write_bytes((DATA / "views.npy").read_bytes())
    paths = {"data_path": data and str(tmp_path / data), "views_path": views and str(tmp_path / views)}
    env = offline_env(StarMapCompressionEnv, tiny_model_dir, **paths, **extra)
    await setup_failure(env, re.escape(message))


def _field_of(text: str) -> StarField:
    """The field a prompt shows (what a solver would read)."""
    point = r"\((-?[\d.]+), (-?[\d.]+), (-?[\d.]+)\)"
    stars = tuple(tuple(map(float, m)) for m in re.findall(rf"star \d+: {point}", text))
    views = tuple(tuple(map(float, m)) for m in re.findall(rf"view \d+: {point}", text))
    radius = float(re.search(r"View radius: ([\d.]+)", text).group(1))
    budget = int(re.search(r"Keep at most (\d+) of", text).group(1))
    return StarField(stars, views, radius, budget)


def _best(field: StarField) -> list[int]:
    values = field.values()
    return sorted(range(len(values)), key=lambda i: -values[i])[: field.budget]


def _responder(prompt, index):
    """An optimal map for choice 0, every star (over the budget) for the others."""
    field = _field_of(prompt_text(prompt))
    kept = _best(field) if index == 0 else range(len(field.stars))
    return f"<think>Counting views.</think><answer>{', '.join(map(str, kept))}</answer>"


def test_process_writes_scored_groups(scripted):
    args = ["--env.group_size", "2", "--env.total_steps", "3", "--env.max_tokens", "256"]
    groups = scripted.process(StarMapCompressionEnv, args, _responder)
    check_groups(groups, 3, [-1.0, 1.0])
    prompts = {g["messages"][0][1]["content"] for g in groups}
    assert len(prompts) == 3 and all(p.startswith("Stars:\nstar 0: (") for p in prompts)


def _optimal_unless_west(prompt, index):
    """An optimal map, or one optimal star only when star 0 lies west (x < 0)."""
    field = _field_of(prompt_text(prompt))
    kept = _best(field) if field.stars[0][0] >= 0 else _best(field)[:1]
    return f"<answer>{', '.join(map(str, kept))}</answer>"


def test_evaluate_reports_exact_metrics(scripted):
    evaluation = scripted.evaluation(
        StarMapCompressionEnv, ["--env.eval_episodes", "6", "--env.max_tokens", "256"], _optimal_unless_west
    )
    metrics, samples = evaluation.metrics, evaluation.samples
    fields = [generate_field(random.Random(f"starmap:{1_000_000 + k}"), 30, 3, 0.3) for k in range(6)]
    east = [f.stars[0][0] >= 0 for f in fields]
    assert 0 < sum(east) < 6 and len(samples) == 6 and metrics["eval/valid_rate"] == 1.0
    assert metrics["eval/percent_correct"] == pytest.approx(sum(east) / 6)
    assert metrics["eval/mean_kept"] == pytest.approx(sum(9 if e else 1 for e in east) / 6)
    expected = [1.0 if e else max(f.values()) / f.optimum() for f, e in zip(fields, east, strict=True)]
    assert [s["score"] for s in sorted(samples, key=lambda s: s["seed"])] == pytest.approx(expected)
