"""UFC fight predictions from fighter pictures: reading the boxed corner, the picture folder, ``process`` with
both pictures in ``images`` and ``evaluate``.

``tests/fixtures/community/ufc_prediction_env/fighter_images/`` is the output of :func:`write_fighter_pictures`
(one small drawn JPEG per fighter of the fights sample, none for Dario Fenn, so his fight is left out).
"""

from __future__ import annotations

import base64
import csv
import hashlib
import io
import json
from pathlib import Path

import pytest
from PIL import Image, ImageDraw
from transformers import AutoTokenizer

from atroposlib.envs.cli import parse_command
from atroposlib.utils.images import image_base64
from environments.community.ufc_prediction_env.fight_data import Fight
from environments.community.ufc_prediction_env.prediction import predicted_colour
from environments.community.ufc_prediction_env.ufc_image_env import UFCImageEnv, picture_path
from tests.environments.community.community_runs import env_flags
from tests.helpers.cli_runs import FIXTURES
from tests.helpers.single_turn_runs import offline_env, setup_failure

DATA = FIXTURES / "community" / "ufc_prediction_env"
FIGHTS = DATA / "fights_sample.csv"
STATS = DATA / "fighter_stats.csv"
PICTURES = DATA / "fighter_images"
UNPICTURED = {"Dario Fenn"}
TALK = (
    "OH MY GOODNESS! Look at that reach, that frame, that southpaw stance: this one goes the distance, folks!"
)
ROWS = list(csv.DictReader(FIGHTS.open(encoding="utf-8")))
FIGHTERS = sorted({row[corner] for row in ROWS for corner in ("r_fighter", "b_fighter")})


def _reply(box: str, think: str = "") -> str:
    return f"{think}{TALK}\n\\boxed{{{box}}}"


def fighter_picture(name: str) -> Image.Image:
    """A 48x64 drawing of a fighter: background and trunks coloured from the name, so each one differs."""
    digest = hashlib.sha256(name.encode()).digest()
    image = Image.new("RGB", (48, 64), tuple(digest[:3]))
    draw = ImageDraw.Draw(image)
    draw.ellipse((16, 4, 32, 20), fill=(230, 190, 160))  # head
    draw.rectangle((14, 22, 34, 42), fill=(230, 190, 160))  # torso
    draw.rectangle((14, 42, 34, 52), fill=tuple(digest[3:6]))  # trunks
    return image


def write_fighter_pictures(folder: Path) -> None:
    """One JPEG per fighter of the fights sample (but :data:`UNPICTURED`), named as the environment reads."""
    folder.mkdir(parents=True, exist_ok=True)
    for name in FIGHTERS:
        if name not in UNPICTURED:
            fighter_picture(name).save(picture_path(folder, name), format="JPEG", quality=90)


# -- reading the prediction --------------------------------------------------------------------------------
@pytest.mark.parametrize(
    ("reply", "corner"),
    [
        (_reply("Red"), "Red"),
        (_reply("blue"), "Blue"),
        (_reply(" BLUE. ") + " !!! 🥊", "Blue"),  # case, spacing, trailing punctuation and emoji
        (_reply("Red corner"), "Red"),
        (_reply("Blue", "<think>Red has the reach? \\boxed{Red}</think>\n"), "Blue"),  # think never counts
        (f"{TALK} \\boxed{{Red}} and once more \\boxed{{red}}", "Red"),  # the same corner twice
    ],
)
def test_colours_read(reply, corner):
    assert predicted_colour(reply, 10) == corner


@pytest.mark.parametrize(
    "reply",
    [
        _reply("Red or Blue"),  # both in one box
        f"{TALK} \\boxed{{Red}} \\boxed{{Blue}}",  # a hedge over two boxes
        _reply("José Álvarez"),  # a name: the prompt shows no names
        _reply("fighter name"),
        "<think>\\boxed{Red}</think> The red corner is obviously the stronger fighter here, trust me, folks!",
        f"<think>{TALK}\n\\boxed{{Red}}",  # reasoning never closed
        f"{TALK}\n\\boxed{{Blue}} but honestly red could take it",  # prose after the pick
        "\\boxed{Blue}",  # no commentary
        f"{TALK}\n\\boxed{{Blue",  # unclosed box
        TALK,
        "",
    ],
)
def test_no_prediction(reply):
    assert predicted_colour(reply, 10) is None


def test_reward_both_ways(tiny_model_dir):
    env = offline_env(UFCImageEnv, tiny_model_dir, dataset_path=str(FIGHTS), fighter_stats_path=str(STATS))
    fight = Fight("José Álvarez", "Tariq Bello", "", "", "Blue")
    replies = [_reply("Blue"), _reply("Red"), _reply("Tariq Bello"), _reply("Blue", "<think>x")]
    assert env.score_replies(replies, fight) == [1.0, -1.0, -1.0, -1.0]
    assert env.share_metrics() == {"train/format_rate": 0.5}


# -- data ---------------------------------------------------------------------------------------------------
def test_the_fixture_pictures_are_the_generators(tmp_path):
    write_fighter_pictures(tmp_path)
    assert sorted(p.name for p in PICTURES.iterdir()) == sorted(p.name for p in tmp_path.iterdir())
    assert picture_path(PICTURES, "José Álvarez").name == "josé-álvarez.jpg"
    for path in PICTURES.iterdir():
        with Image.open(path) as picture:
            assert picture.format == "JPEG" and picture.size == (48, 64)


async def test_fights_without_both_pictures_are_left_out(tiny_model_dir):
    env = offline_env(UFCImageEnv, tiny_model_dir, **_local(eval_dataset_path=str(FIGHTS)))
    await env.setup()
    # 8 fights with a winner; Dario Fenn's has no picture of him
    assert len(env.train) == len(env.test) == 7 and "Dario Fenn" not in {f.red for f in env.train}
    prompt = env.prompt_messages(env.train[0])
    assert prompt[1]["content"].endswith("<image>\n<image>") and "\\boxed{Red}" in prompt[0]["content"]
    assert "Marco Ruiz" not in json.dumps(prompt)  # pictures only: no names, no statistics
    red, blue = await env.picture(env.train[0])
    assert red == image_base64(str(picture_path(PICTURES, "Marco Ruiz"))) and red != blue


async def test_a_missing_folder_or_unreadable_picture_stops_setup(tiny_model_dir, tmp_path):
    missing = offline_env(UFCImageEnv, tiny_model_dir, **_local(image_folder=str(tmp_path / "none")))
    await setup_failure(missing, "no folder of fighter pictures; pass --env.image_folder")
    empty = offline_env(UFCImageEnv, tiny_model_dir, **_local(image_folder=str(tmp_path)))
    await setup_failure(empty, "no training fight has both fighters' pictures")
    write_fighter_pictures(tmp_path)
    picture_path(tmp_path, "Tariq Bello").write_text("not a picture")
    broken = offline_env(UFCImageEnv, tiny_model_dir, **_local(image_folder=str(tmp_path)))
    error = await setup_failure(broken, "the image is not a picture")
    assert str(error).startswith(str(picture_path(tmp_path, "Tariq Bello"))) and "\n" not in str(error)


def test_an_original_config_file(tmp_path):
    path = tmp_path / "ufc_image.yaml"
    path.write_text(
        f"env:\n  fight_data_path: {FIGHTS}\n  fighter_stats_path: {STATS}\n  image_folder: {PICTURES}\n"
        "  max_steps: 1\n  temperature: 0.7\n  top_p: 0.95\n"
    )
    config = parse_command(UFCImageEnv, ["process", "--config", str(path)]).resolve().env_config
    assert config.dataset_path == str(FIGHTS) and config.image_folder == str(PICTURES)
    assert UFCImageEnv.default_env_config().group_size == 2


# -- runs -------------------------------------------------------------------------------------------------
def _local(**values) -> dict:
    return {
        "dataset_path": str(FIGHTS),
        "fighter_stats_path": str(STATS),
        "image_folder": str(PICTURES),
        **values,
    }


NAMES = {image_base64(str(picture_path(PICTURES, n))): n for n in FIGHTERS if n not in UNPICTURED}
WINNERS = {
    (row["r_fighter"], row["b_fighter"]): row["winner"]
    for row in ROWS
    if row["winner"] and not {row["r_fighter"], row["b_fighter"]} & UNPICTURED
}


def _corners(messages) -> tuple[str, str]:
    """The names of the two fighters whose pictures a request sends, red first."""
    parts = [part for m in messages if isinstance(m["content"], list) for part in m["content"]]
    red, blue = (NAMES[p["image_url"]["url"].split(",", 1)[1]] for p in parts if p["type"] == "image_url")
    return red, blue


def _responder(messages, index):
    """Names the winning corner on even choices and the losing one on odd ones."""
    winner = WINNERS[_corners(messages)]
    return _reply(winner if index % 2 == 0 else ("Blue" if winner == "Red" else "Red"))


def test_process_sends_both_pictures_and_trains_the_reply(scripted, tmp_path):
    args = env_flags(**_local(group_size=2, total_steps=2, max_tokens=128))
    groups = scripted.process(UFCImageEnv, args, _responder, server_type=None)
    assert len(groups) == 2 and all(sorted(group["scores"]) == [-1.0, 1.0] for group in groups)
    tokenizer = AutoTokenizer.from_pretrained(scripted.tokenizer_dir)
    for group in groups:
        assert len(group["images"]) == 2 and group["images"][0] == group["images"][1]
        red, blue = group["images"][0]
        assert NAMES[red] != NAMES[blue]
        Image.open(io.BytesIO(base64.b64decode(red))).load()  # a real picture
        for tokens, masks, messages in zip(group["tokens"], group["masks"], group["messages"], strict=True):
            assert len(tokens) == len(masks) and masks[0] == -100
            assert "base64" not in json.dumps(messages) and messages[-2]["content"].count("<image>") == 2
            assert (
                tokenizer.decode([m for m in masks if m != -100]) == messages[-1]["content"] + "<|im_end|>\n"
            )
    html = (tmp_path / "data" / f"{UFCImageEnv.name}.html").read_text()
    assert groups[0]["images"][0][1][:40] in html


def test_evaluate_reports_predictions(scripted):
    def red_picker(messages, index):
        return _reply("Red") if _corners(messages)[0] != "Kenji Mori" else "no idea"

    evaluation = scripted.evaluation(
        UFCImageEnv,
        env_flags(**_local(eval_dataset_path=FIGHTS, max_tokens=128)),
        red_picker,
        server_type=None,
    )
    metrics = evaluation.metrics
    # 7 pictured fights: red won 4 of them, one reply (Kenji Mori's fight, a red win) gives no prediction
    assert len(evaluation.samples) == 7 and metrics["eval/percent_correct"] == pytest.approx(3 / 7)
    assert metrics["eval/format_rate"] == pytest.approx(6 / 7) and metrics["eval/red_pick_rate"] == 1.0
    assert all("base64" not in json.dumps(s["messages"]) for s in evaluation.samples)
