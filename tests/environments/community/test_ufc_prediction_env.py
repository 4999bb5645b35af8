"""UFC fight predictions: reading the boxed winner, the two CSV files, ``process`` and ``evaluate``."""

from __future__ import annotations

import csv
import re
import shutil

import pytest

from atroposlib.envs.cli import parse_command
from environments.community.ufc_prediction_env import fight_data
from environments.community.ufc_prediction_env.fight_data import load_fighter_stats, load_fights, stats_card
from environments.community.ufc_prediction_env.prediction import named_corner, predicted_corner
from environments.community.ufc_prediction_env.ufc_server import UFCEnv, UFCEnvConfig
from tests.environments.community.community_runs import evaluate_local, process_local
from tests.helpers.cli_runs import FIXTURES
from tests.helpers.single_turn_runs import check_groups, offline_env, prompt_text, setup_failure

DATA = FIXTURES / "community" / "ufc_prediction_env"
FIGHTS = DATA / "fights_sample.csv"
STATS = DATA / "fighter_stats.csv"
TALK = "OH MY GOODNESS! The southpaw pressure, the reach, the cardio: this one is going all the way, folks!"


def _reply(name: str, think: str = "") -> str:
    return f"{think}{TALK}\n\\boxed{{{name}}}"


@pytest.mark.parametrize(
    ("reply", "corner"),
    [
        (_reply("José Álvarez"), "Red"),
        (_reply("jose   alvarez."), "Red"),  # case, accents, spacing, punctuation
        (_reply("Alvarez"), "Red"),  # an unambiguous last name
        (_reply("Tariq Bello") + " !!! 🥊", "Blue"),  # only punctuation and emoji after the box
        (_reply("Tariq Bello", "<think>Álvarez has the reach? no.</think>\n"), "Blue"),
        (f"{TALK} \\boxed{{Bello}} and again \\boxed{{Tariq Bello}}", "Blue"),  # the same fighter twice
    ],
)
def test_predictions_read(reply, corner):
    assert predicted_corner(reply, "José Álvarez", "Tariq Bello", 10) == corner


@pytest.mark.parametrize(
    "reply",
    [
        _reply("José Álvarez or Tariq Bello"),  # both in one box
        f"{TALK} \\boxed{{José Álvarez}} \\boxed{{Tariq Bello}}",  # a hedge over two boxes
        _reply("Red"),  # a corner colour, not a name
        _reply("fighter name"),  # the prompt's placeholder
        f"{TALK}\n\\boxed{{fighter name}} ... \\boxed{{Tariq Bello}}",  # prompt echo then a pick
        "<think>\\boxed{Tariq Bello}</think> The winner is obvious, trust me on this one, folks, really!",
        f"<think>{TALK}\n\\boxed{{Tariq Bello}}",  # reasoning never closed
        f"{TALK}\n\\boxed{{Tariq Bello}} but honestly Álvarez could take it",  # prose after the pick
        "\\boxed{Tariq Bello}",  # no commentary
        f"{TALK}\n\\boxed{{Tariq Bello",  # unclosed box
        TALK,  # no prediction
        "",
    ],
)
def test_no_prediction(reply):
    assert predicted_corner(reply, "José Álvarez", "Tariq Bello", 10) is None


def test_shared_last_name_needs_the_full_name():
    assert named_corner("Park", "Lena Park", "Ines Park") is None
    assert named_corner("ines park", "Lena Park", "Ines Park") == "Blue"


def test_reward_both_ways(tiny_model_dir):
    env = offline_env(UFCEnv, tiny_model_dir, dataset_path=str(FIGHTS), fighter_stats_path=str(STATS))
    fight = next(
        f for f in load_fights(str(FIGHTS), load_fighter_stats(str(STATS))) if f.red == "José Álvarez"
    )
    replies = [_reply("Bello"), _reply("Álvarez"), _reply("Bello", "<think>x</think>")[:-1], _reply("Red")]
    assert env.score_replies(replies, fight) == [1.0, -1.0, -1.0, -1.0]
    assert env.share_metrics() == {"train/format_rate": 0.5}


def test_files_and_prompt():
    stats = load_fighter_stats(str(STATS))
    fights = load_fights(str(FIGHTS), stats)
    assert len(fights) == 8 and "Colt Mercer" not in {f.red for f in fights}  # the draw has no winner
    assert fights[0].winner_name == "Marco Ruiz" and fights[1].winner_name == "Tariq Bello"
    assert "Reach: 182.88 cm  Stance: Orthodox" in fights[0].red_card and "Wins: 18" in fights[0].red_card
    assert stats_card("Paul Ostrowski", None) == "Paul Ostrowski: (No stats available)"
    assert stats_card("X", {"name": "X", "wins": None}).startswith("Name: X\nWins: ?  Losses: ?")


async def test_bad_rows(tiny_model_dir, tmp_path):
    rows = list(csv.DictReader(FIGHTS.open(encoding="utf-8")))
    rows[2]["winner"] = "Ines"
    bad = tmp_path / "bad.csv"
    with bad.open("w", encoding="utf-8", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]))
        writer.writeheader()
        writer.writerows(rows)
    env = offline_env(UFCEnv, tiny_model_dir, dataset_path=str(bad), fighter_stats_path=str(STATS))
    error = await setup_failure(env, "row 2: field 'winner' must be Red or Blue")
    assert str(bad) in str(error)


async def test_default_data_is_the_originals_downloaded_once(tiny_model_dir, tmp_path, monkeypatch):
    remote = tmp_path / "remote"
    remote.mkdir()
    shutil.copy(FIGHTS, remote / "large_dataset.csv")
    shutil.copy(STATS, remote / "fighter_stats.csv")
    monkeypatch.setattr(fight_data, "ORIGINAL_DATA_URL", remote.as_uri())
    monkeypatch.setenv("UFC_DATA_CACHE_DIR", str(tmp_path / "cache"))
    env = offline_env(UFCEnv, tiny_model_dir)
    await env.setup()
    assert len(env.train) + len(env.test) == 8
    assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == [
        "fighter_stats.csv",
        "large_dataset.csv",
    ]
    (remote / "large_dataset.csv").unlink()
    await env.setup()  # the cached copy is used
    monkeypatch.setenv("UFC_DATA_CACHE_DIR", str(tmp_path / "empty"))
    await setup_failure(
        offline_env(UFCEnv, tiny_model_dir), "cannot download the original's large_dataset.csv"
    )


def test_an_original_config_file(tmp_path):
    path = tmp_path / "ufc.yaml"
    path.write_text(f"env:\n  fight_data_path: {FIGHTS}\n  max_steps: 1\n  top_p: 0.9\n")
    config = parse_command(UFCEnv, ["process", "--config", str(path)]).resolve().env_config
    assert (
        config.dataset_path == str(FIGHTS) and config.top_p == 0.9 and "max_steps" not in config.model_dump()
    )


async def test_split_and_original_keys(tiny_model_dir):
    env = offline_env(UFCEnv, tiny_model_dir, fight_data_path=str(FIGHTS), fighter_stats_path=str(STATS))
    await env.setup()
    assert len(env.test) == 1 and len(env.train) == 7
    config = UFCEnvConfig(max_steps=1, temperature=0.7, top_p=0.95)
    assert config.top_p == 0.95 and UFCEnv.default_env_config().max_tokens == 2048
    prompt = env.prompt_messages(env.train[0])
    assert "\\boxed{fighter name}" in prompt[1]["content"] and "In the red corner" in prompt[1]["content"]


WINNERS = {
    (row["r_fighter"], row["b_fighter"]): row["r_fighter"] if row["winner"] == "Red" else row["b_fighter"]
    for row in csv.DictReader(FIGHTS.open(encoding="utf-8"))
    if row["winner"]
}


def _fighters(prompt) -> tuple[str, str]:
    text = prompt_text(prompt)
    red, blue = (
        re.search(rf"{corner} corner[^\n]*:\n(?:Name: )?([^\n:]+)", text).group(1).strip()
        for corner in ("red", "blue")
    )
    return red, blue


def _responder(prompt, index):
    """Picks the winner on even choices and the loser on odd ones."""
    red, blue = _fighters(prompt)
    winner = WINNERS[(red, blue)]
    return _reply(winner if index % 2 == 0 else (blue if winner == red else red))


def test_process_end_to_end(scripted):
    groups = process_local(
        scripted,
        UFCEnv,
        FIGHTS,
        _responder,
        fighter_stats_path=STATS,
        group_size=2,
        total_steps=2,
        max_tokens=128,
    )
    check_groups(groups, 2, [-1.0, 1.0])


def test_evaluate_reports_predictions(scripted):
    def red_picker(prompt, index):
        return _reply(_fighters(prompt)[0]) if "Kenji" not in prompt_text(prompt) else "no idea"

    evaluation = evaluate_local(
        scripted, UFCEnv, FIGHTS, red_picker, fighter_stats_path=STATS, max_tokens=128
    )
    metrics = evaluation.metrics
    # 8 fights: red won 4 of them, one reply (Kenji Mori's fight, a red win) gives no prediction
    assert metrics["eval/percent_correct"] == pytest.approx(3 / 8)
    assert metrics["eval/format_rate"] == pytest.approx(7 / 8) and metrics["eval/red_pick_rate"] == 1.0
