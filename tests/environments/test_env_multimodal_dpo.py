"""The vision environments of ``environments/multimodal_dpo/``: answers, local data (paths, bytes), bad rows,
the hub default, ``process`` with pictures in ``images`` and the HTML page, ``evaluate`` and ``serve``."""

from __future__ import annotations

import base64
import io
import json
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from PIL import Image
from transformers import AutoTokenizer

from atroposlib.envs.vision import VisionItem
from atroposlib.utils.images import image_base64
from atroposlib.utils.vqa_answers import point_score
from environments.multimodal_dpo.clevr_cogen_a_train import ClevrCogenATrainEnv
from environments.multimodal_dpo.clevr_complex import ClevrComplexEnv
from environments.multimodal_dpo.ocr_vqa import OcrVqaEnv
from environments.multimodal_dpo.pixmo_clocks import ClockDatasetEnv
from environments.multimodal_dpo.pixmo_count import PixmoCountEnv
from environments.multimodal_dpo.pixmo_point_explanations import PointExplanationsEnv
from tests.helpers.cli_runs import FIXTURES
from tests.helpers.single_turn_runs import offline_env, setup_failure, write_jsonl
from tests.helpers.vision_fixtures import book_cover, picture_answers, sent_picture, write_vision_fixtures

VISION = FIXTURES / "vision"


def _item(answer: Any) -> VisionItem:
    return VisionItem(0, "q", answer, None)


def _scores(env_cls: type, tiny_model_dir: Path, replies: list[str], answer: Any) -> list[float]:
    env = offline_env(env_cls, tiny_model_dir)
    return [env.score_answer(reply, _item(answer)) for reply in replies]


# -- answers ----------------------------------------------------------------------------------------------
@pytest.mark.parametrize("env_cls", [ClevrCogenATrainEnv, ClevrComplexEnv])
def test_clevr_boxed_answers(env_cls, tiny_model_dir):
    right = ["\\boxed{3}", "<think>one, two, three</think>There are \\boxed{three}.", "\\boxed{3.0}",
             "\\boxed{3} so \\boxed{3}"]  # fmt: skip
    wrong = ["\\boxed{4}", "\\boxed{3} or maybe \\boxed{4}", "<think>\\boxed{3}", "3", "", "<think>x</think>",
             "\\boxed{3 or 4}", "<think>\\boxed{3}</think>no idea"]  # fmt: skip
    assert _scores(env_cls, tiny_model_dir, right, "3") == [1.0] * len(right)
    assert _scores(env_cls, tiny_model_dir, wrong, "3") == [0.0] * len(wrong)
    assert _scores(env_cls, tiny_model_dir, ["\\boxed{Yes}", "\\boxed{yes.}", "\\boxed{no}"], "yes") == [
        1,
        1,
        0,
    ]


def test_ocr_vqa_answers(tiny_model_dir):
    right = ["<answer>J. K. Rowan</answer>", "<think>the cover says it</think><answer>j.k. rowan</answer>",
             "<answer>JK Rowan</answer>"]  # fmt: skip
    wrong = ["<answer>Rowan</answer>", "<answer>J.K. Rowan</answer><answer>Mira Vale</answer>", "J.K. Rowan",
             "<answer></answer>", "", "<think><answer>J.K. Rowan</answer>", "<answer>J.K. Rowan or Mira Vale</answer>"]  # fmt: skip
    assert _scores(OcrVqaEnv, tiny_model_dir, right, "J.K. Rowan") == [1.0] * len(right)
    assert _scores(OcrVqaEnv, tiny_model_dir, wrong, "J.K. Rowan") == [0.0] * len(wrong)
    assert _scores(OcrVqaEnv, tiny_model_dir, ["<answer>The Last Harbour.</answer>"], "The Last Harbour") == [
        1.0
    ]


def test_clock_answers(tiny_model_dir):
    right = ["<answer>3:05</answer>", "<answer>03:05</answer>", "<answer>15:05</answer>",
             "<answer>3:05 PM</answer>", "<answer>3:05:00</answer>", "<think>short hand on 3</think><answer>3:05</answer>"]  # fmt: skip
    wrong = ["<answer>3:50</answer>", "<answer>3:05 or 3:10</answer>", "<answer>25:05</answer>", "<answer>about 3</answer>",
             "<answer>3:05</answer><answer>4:05</answer>", "3:05", "", "<answer>13:05 pm</answer>"]  # fmt: skip
    assert _scores(ClockDatasetEnv, tiny_model_dir, right, "3:05") == [1.0] * len(right)
    assert _scores(ClockDatasetEnv, tiny_model_dir, wrong, "3:05") == [0.0] * len(wrong)
    assert _scores(
        ClockDatasetEnv, tiny_model_dir, ["<answer>0:00</answer>", "<answer>12:00 am</answer>"], "12:00"
    ) == [1, 1]


def test_count_answers(tiny_model_dir):
    right = ["<answer>5</answer>", "<answer>five</answer>", "<answer> 5. </answer>", "<answer>5.0</answer>"]
    wrong = ["<answer>6</answer>", "<answer>5 or 6</answer>", "<answer>about five</answer>", "5", "",
             "<answer>5</answer><answer>6</answer>", "<think>5"]  # fmt: skip
    assert _scores(PixmoCountEnv, tiny_model_dir, right, "5") == [1.0] * len(right)
    assert _scores(PixmoCountEnv, tiny_model_dir, wrong, "5") == [0.0] * len(wrong)


def test_point_answers(tiny_model_dir):
    gold = [(20.0, 70.0), (70.0, 30.0)]
    exact = '<points x1="70" y1="30" x2="20.0" y2="70.0" alt="dots">dots</points>'
    separate = '<think>two dots</think><point x="20" y="70" alt="dot">dot</point> and <point x="70" y="30">dot</point>'
    near = '<point x="23" y="74">dot</point><point x="70" y="30">dot</point>'  # the first 5 units off
    one = '<point x="20" y="70">dot</point>'
    extra = exact + '<point x="95" y="5">x</point>'
    assert _scores(PointExplanationsEnv, tiny_model_dir, [exact, separate], gold) == [1.0, 1.0]
    assert _scores(PointExplanationsEnv, tiny_model_dir, [near], gold) == [pytest.approx((0.5 + 1.0) / 2)]
    assert _scores(PointExplanationsEnv, tiny_model_dir, [one, extra], gold) == [0.5, pytest.approx(2 / 3)]
    malformed = ['<point x="120" y="30">x</point>', '<point x="20">x</point>', '<points x1="2" y2="3">', "",
                 "the dots are left and right", f"<think>{exact}</think>no idea", f"<think>{exact}"]  # fmt: skip
    assert _scores(PointExplanationsEnv, tiny_model_dir, malformed, gold) == [0.0] * len(malformed)
    assert point_score([], [], 10) == 1.0 and point_score([(1, 1)], [], 10) == 0.0


# -- data ---------------------------------------------------------------------------------------------------
async def test_rows_become_items_with_their_pictures(tiny_model_dir, tmp_path):
    files = write_vision_fixtures(tmp_path)
    env = offline_env(OcrVqaEnv, tiny_model_dir, dataset_path=str(files["ocr_vqa"]))
    await env.setup()
    assert len(env.train) == len(env.test) == 12  # every question of a row is an item
    assert [i.answer for i in env.train[:4]] == ["Gardens of Stone", "Mira Vale", "Yes", "No"]
    picture = Image.open(io.BytesIO(base64.b64decode(await env.picture(env.train[0]))))
    assert picture.size == (160, 220)
    assert env.prompt_messages(env.train[0])[1]["content"] == "<image>\nWhat is the title of this book?"


@pytest.mark.parametrize("as_dict", [True, False], ids=["hub-image-dict", "raw-bytes"])
async def test_pictures_as_bytes_in_parquet(tiny_model_dir, tmp_path, as_dict):
    import pyarrow as pa
    import pyarrow.parquet as pq

    buffer = io.BytesIO()
    book_cover("Bytes Book", "A. Writer").save(buffer, format="PNG")
    picture = {"bytes": buffer.getvalue(), "path": None} if as_dict else buffer.getvalue()
    rows = [{"image": picture, "questions": ["Title?", "Author?"], "answers": ["Bytes Book", "A. Writer"]}]
    path = tmp_path / "ocr.parquet"
    pq.write_table(pa.Table.from_pylist(rows), path)
    env = offline_env(OcrVqaEnv, tiny_model_dir, dataset_path=str(path))
    await env.setup()
    expected = image_base64(buffer.getvalue())
    assert [await env.picture(item) for item in env.train] == [expected, expected]


@pytest.mark.parametrize(
    "row, message",
    [
        ({"questions": ["q"], "answers": ["a"]}, "row 1: missing field 'image'"),
        ({"image": "images/none.png", "questions": ["q"], "answers": ["a"]}, "row 1: field 'image': no such picture file"),
        ({"image": "bm90IGEgcGljdHVyZQ==", "questions": ["q"], "answers": ["a"]}, "row 1: field 'image': the image is not a picture"),
        ({"image": "images/book0.png", "questions": ["q", "r"], "answers": ["a"]}, "row 1: fields 'questions' and 'answers'"),
    ],
)  # fmt: skip
async def test_bad_rows_stop_setup_with_one_line(tiny_model_dir, tmp_path, row, message):
    files = write_vision_fixtures(tmp_path)
    good = json.loads(files["ocr_vqa"].read_text().splitlines()[0])
    path = write_jsonl(tmp_path / "bad.jsonl", [good, row])
    error = await setup_failure(offline_env(OcrVqaEnv, tiny_model_dir, dataset_path=path), message)
    assert str(error).startswith(str(path)) and "\n" not in str(error)


@pytest.mark.parametrize(
    "env_cls, hub",
    [(OcrVqaEnv, "howard-hou/OCR-VQA"), (ClevrCogenATrainEnv, "leonardPKU/clevr_cogen_a_train"),
     (ClevrComplexEnv, "MMInstruction/Clevr_CoGenT_TrainA_70K_Complex"), (ClockDatasetEnv, "junyeong-nero/clock-dataset"),
     (PixmoCountEnv, "allenai/pixmo-count"), (PointExplanationsEnv, "allenai/pixmo-point-explanations")],
)  # fmt: skip
async def test_the_hub_set_is_the_default(env_cls, hub, tiny_model_dir, hub_offline):
    await setup_failure(offline_env(env_cls, tiny_model_dir), f"{hub}: cannot load from the hub")


def test_a_bad_file_stops_the_command_in_one_line(scripted, tmp_path):
    path = write_jsonl(tmp_path / "bad.jsonl", [{"image_url": "x.png", "label": "dots"}])
    stderr = scripted.failure(PixmoCountEnv, path)
    assert "row 0: missing field 'count'" in stderr and "Traceback" not in stderr


# -- runs -------------------------------------------------------------------------------------------------
def _gold(env_cls: type) -> tuple[str, str, Callable[[dict], Any]]:
    """(fixture key, picture field, the row's answer as the responder writes it)."""
    return {
        ClevrCogenATrainEnv: ("clevr", "image", lambda r: f"\\boxed{{{r['solution'].split()[1]}}}"),
        ClevrComplexEnv: ("clevr", "image", lambda r: f"\\boxed{{{r['solution'].split()[1]}}}"),
        OcrVqaEnv: ("ocr_vqa", "image", lambda r: {q: f"<answer>{a}</answer>" for q, a in zip(r["questions"], r["answers"], strict=True)}),
        ClockDatasetEnv: ("pixmo_clocks", "image", lambda r: f"<answer>{r['hour']}:{r['minute']:02d}</answer>"),
        PixmoCountEnv: ("pixmo_count", "image_url", lambda r: f"<answer>{r['count']}</answer>"),
        PointExplanationsEnv: ("pixmo_point_explanations", "image_url",
                               lambda r: "".join(f'<point x="{p["x"]}" y="{p["y"]}">dot</point>' for p in r["points"])),
    }[env_cls]  # fmt: skip


def _responder(env_cls: type, data_file: Path, right: Callable[[int, str], bool]):
    """Answers the picture's gold answer when ``right(choice index, picture)``, else a wrong one."""
    _, field, answer_of = _gold(env_cls)
    answers = picture_answers(data_file, answer_of, field)
    order = list(answers)

    def respond(messages, index):
        picture = sent_picture(messages)
        answer = answers[picture]
        if isinstance(answer, dict):  # OCR-VQA: one answer per question
            answer = answer[messages[-1]["content"][-1]["text"]]
        if right(index, order.index(picture)):
            return f"<think>Looking at the picture.</think>{answer}"
        return "<think>Looking at the picture.</think><answer>something else</answer> \\boxed{something}"

    return respond


ALL = [OcrVqaEnv, ClevrCogenATrainEnv, ClevrComplexEnv, ClockDatasetEnv, PixmoCountEnv, PointExplanationsEnv]


@pytest.mark.parametrize("env_cls", ALL, ids=lambda c: c.name)
def test_process_sends_pictures_and_trains_the_reply(env_cls, scripted, tmp_path):
    key = _gold(env_cls)[0]
    data_file = write_vision_fixtures(tmp_path / "fixtures")[key]
    args = ["--env.dataset_path", data_file, "--env.group_size", "2", "--env.total_steps", "2",
            "--env.max_tokens", "256"]  # fmt: skip
    respond = _responder(env_cls, data_file, lambda index, row: index == 0)
    groups = scripted.process(
        env_cls, args, respond, server_type=None
    )  # the default: an OpenAI-type chat route
    assert len(groups) == 2
    tokenizer = AutoTokenizer.from_pretrained(scripted.tokenizer_dir)
    for group in groups:
        assert sorted(group["scores"]) == [0.0, 1.0]
        assert len(group["images"]) == 2 and group["images"][0] == group["images"][1]
        Image.open(io.BytesIO(base64.b64decode(group["images"][0]))).load()  # a real PNG
        for tokens, masks, messages in zip(group["tokens"], group["masks"], group["messages"], strict=True):
            assert len(tokens) == len(masks) and masks[0] == -100
            assert "<image>" in messages[-2]["content"] and "base64" not in json.dumps(messages)
            trained = tokenizer.decode([m for m in masks if m != -100])
            assert trained == messages[-1]["content"] + "<|im_end|>\n"
            assert "<image>" in tokenizer.decode(tokens) and "<image>" not in trained
    html = (tmp_path / "data" / f"{env_cls.name}.html").read_text()
    assert html.count('<img class="item-image"') == 4 and groups[0]["images"][0][:40] in html


@pytest.mark.parametrize("env_cls", ALL, ids=lambda c: c.name)
def test_evaluate_reports_exact_accuracy(env_cls, scripted, tmp_path):
    key = _gold(env_cls)[0]
    data_file = write_vision_fixtures(tmp_path / "fixtures")[key]
    respond = _responder(env_cls, data_file, lambda index, row: row % 2 == 0)  # right on the even rows
    evaluation = scripted.evaluation(
        env_cls, ["--env.dataset_path", data_file, "--env.max_tokens", "256"], respond, server_type=None
    )
    rows = [json.loads(line) for line in data_file.read_text().splitlines()]
    per_row = [len(r["questions"]) if env_cls is OcrVqaEnv else 1 for r in rows]
    expected = sum(n for k, n in enumerate(per_row) if k % 2 == 0) / sum(per_row)
    assert len(evaluation.samples) == sum(per_row)
    assert evaluation.metrics["eval/percent_correct"] == pytest.approx(expected)
    assert evaluation.metrics["eval/mean_score"] == pytest.approx(expected)
    assert all("base64" not in json.dumps(s["messages"]) for s in evaluation.samples)
    assert {s["row"] for s in evaluation.samples if s["correct"]} == {
        k for k in range(len(rows)) if k % 2 == 0
    }


def test_serve_sends_groups_with_pictures_from_a_chat_endpoint(scripted, api, tmp_path):
    data_file = write_vision_fixtures(tmp_path / "fixtures")["pixmo_clocks"]
    respond = _responder(ClockDatasetEnv, data_file, lambda index, row: index == 0)
    served = scripted.serve(
        ClockDatasetEnv, ["--env.dataset_path", data_file, "--env.group_size", "2", "--env.max_tokens", "256"],
        respond, api, server_type=None,
    )  # fmt: skip
    assert served.registration["desired_name"] == "pixmo_clocks"
    assert len(served.group["images"]) == 2 and sorted(served.group["scores"]) == [0.0, 1.0]
    assert all(r["path"] == "/v1/chat/completions" for r in served.requests)


def test_a_picture_that_cannot_be_fetched_leaves_its_item_out(scripted, tmp_path):
    data_file = write_vision_fixtures(tmp_path / "fixtures")["pixmo_count"]
    rows = [json.loads(line) for line in data_file.read_text().splitlines()]
    gone = {"image_url": "http://127.0.0.1:9/gone.png", "label": "dots", "count": 1, "image_sha256": "x"}
    path = write_jsonl(data_file.parent / "with_gone.jsonl", [*rows[:2], gone, *rows[2:]])
    respond = _responder(PixmoCountEnv, data_file, lambda index, row: row % 2 == 0)
    evaluation = scripted.evaluation(
        PixmoCountEnv, ["--env.dataset_path", path, "--env.max_tokens", "64"], respond, server_type=None
    )
    assert [s["row"] for s in evaluation.samples] == [0, 1, 3, 4]  # row 2's picture is unreachable
    assert evaluation.metrics["eval/percent_correct"] == 0.5 and len(evaluation.requests) == 4


async def test_training_skips_an_item_whose_picture_cannot_be_fetched(tiny_model_dir, tmp_path):
    gone = {"image_url": "http://127.0.0.1:9/gone.png", "label": "dots", "count": 1}
    env = offline_env(PixmoCountEnv, tiny_model_dir, dataset_path=write_jsonl(tmp_path / "r.jsonl", [gone]))
    await env.setup()  # URLs are not fetched at start-up
    assert await env.collect_trajectories(env.train[0]) == (None, [])
