"""Generated pictures: drawing, questions, boxed answers, images on the wire and in groups, ``process``."""

from __future__ import annotations

import base64
import io
from collections import Counter

import pytest
from PIL import Image
from pydantic import ValidationError
from transformers import AutoTokenizer

from atroposlib.cli._tooling.images import group_images
from atroposlib.envs.base import APIServerConfig
from atroposlib.group import check_group
from atroposlib.testing.scripted_server import launch_scripted_server
from environments.multimodal_counting_server import (
    COLOURS,
    CountingEnvConfig,
    MultimodalCountingEnv,
    make_item,
    normalise_answer,
    score_reply,
)


def _picture(item) -> Image.Image:
    return Image.open(io.BytesIO(base64.b64decode(item.image_b64))).convert("RGB")


def test_pictures_are_seeded_and_show_their_shapes():
    config = CountingEnvConfig()
    item = make_item(7, config)
    assert make_item(7, config) == item and make_item(8, config).image_b64 != item.image_b64
    picture = _picture(item)
    assert picture.size == (256, 256)
    cell = 256 // config.grid
    occupied = {s.cell: s for s in item.shapes}
    assert config.min_shapes <= len(item.shapes) <= config.max_shapes and len(occupied) == len(item.shapes)
    assert len({s.colour for s in item.shapes}) <= config.num_colours
    for col in range(config.grid):
        for row in range(config.grid):
            centre = picture.getpixel((col * cell + cell // 2, row * cell + cell // 2))
            expected = COLOURS[occupied[(col, row)].colour] if (col, row) in occupied else (255, 255, 255)
            assert centre == expected


@pytest.mark.parametrize("kind", ["colour_shape", "colour", "shape", "total", "colour_of"])
def test_questions_have_the_right_answers(kind):
    config = CountingEnvConfig(question_kinds=[kind])
    for seed in range(30):
        item = make_item(seed, config)
        shapes = item.shapes
        q = item.question
        if q.startswith("What colour is the "):
            target = q.removeprefix("What colour is the ").split(" ")[0]
            assert [s.colour for s in shapes if s.kind == target] == [item.answer]
            continue
        if q == "How many shapes are in the picture in total?":
            assert item.answer == str(len(shapes))
            continue
        words = q.removeprefix("How many ").split(" are in")[0].split()
        if len(words) == 2 and words[1] == "shapes":
            expected = sum(s.colour == words[0] for s in shapes)
        elif len(words) == 2:
            expected = sum(s.colour == words[0] and s.kind + "s" == words[1] for s in shapes)
        else:
            expected = sum(s.kind + "s" == words[0] for s in shapes)
        assert item.answer == str(expected), q


def test_unknown_question_kinds_are_refused():
    with pytest.raises(ValidationError, match="unknown question kinds \\['size'\\]"):
        CountingEnvConfig(question_kinds=["total", "size"])


@pytest.mark.parametrize(
    "reply, answer, score",
    [
        ("<think>I count them.</think>\\boxed{3}", "3", 1.0),
        ("\\boxed{three}", "3", 1.0),
        ("\\boxed{03}", "3", 1.0),
        ("There are \\boxed{ Red. }", "red", 1.0),
        ("\\boxed{\\text{blue}}", "blue", 1.0),
        ("\\boxed{4}", "3", 0.0),
        ("\\boxed{3} or maybe \\boxed{4}", "3", 0.0),
        ("3", "3", 0.0),
        ("<think>\\boxed{3}</think>", "3", 0.0),
        ("\\boxed{crimson}", "red", 0.0),
    ],
)
def test_boxed_answers(reply, answer, score):
    assert score_reply(reply, answer) == score


def test_normalise_answer():
    assert normalise_answer("twenty") == "20" and normalise_answer("Green") == "green"
    assert normalise_answer("a few") is None


def answering_responder(config: CountingEnvConfig, seeds):
    """Right answers for even choice indices, wrong for odd ones, found by the picture in the request."""
    answers = {make_item(seed, config).image_b64: make_item(seed, config).answer for seed in seeds}
    seen = []

    def respond(messages, index):
        parts = messages[-1]["content"]
        url = next(p["image_url"]["url"] for p in parts if p["type"] == "image_url")
        seen.append(url)
        answer = answers[url.removeprefix("data:image/png;base64,")]
        if index % 2:
            names = sorted(COLOURS)
            answer = (
                str(int(answer) + 1) if answer.isdigit() else names[(names.index(answer) + 1) % len(names)]
            )
        return f"<think>Looking closely.</think>The answer is \\boxed{{{answer}}}."

    respond.seen = seen
    return respond


async def test_groups_carry_the_picture_and_train_only_the_reply(tiny_model_dir):
    config = CountingEnvConfig(tokenizer_name=str(tiny_model_dir), use_wandb=False, group_size=4)
    item = make_item(3, config)
    respond = answering_responder(config, [3])
    with launch_scripted_server(respond=respond, tokenizer=tiny_model_dir) as server:
        env = MultimodalCountingEnv(config, APIServerConfig(base_url=server.base_url, model_name="m"))
        group, _ = await env.collect_trajectories(item)
        body = server.requests[0]["body"]
    assert server.requests[0]["path"] == "/v1/chat/completions"
    parts = body["messages"][1]["content"]
    assert parts[0] == {"type": "image_url", "image_url": {"url": item.data_url}}
    assert parts[1] == {"type": "text", "text": item.question}
    assert group["images"] == [item.image_b64] * 4
    assert check_group(group) == []  # what the trajectory API accepts
    assert group["scores"] == [1.0, 0.0, 1.0, 0.0]
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    for tokens, masks, messages in zip(group["tokens"], group["masks"], group["messages"], strict=True):
        text = tokenizer.decode(tokens)
        assert f"<image>\n{item.question}" in text and "base64" not in text
        trained = tokenizer.decode([m for m in masks if m != -100], skip_special_tokens=False)
        assert trained.removesuffix("\n").removesuffix("<|im_end|>") == messages[-1]["content"]
    assert len(group_images(group)) == 1  # what view-run-multimodal shows


def test_process_writes_groups_with_images(scripted):
    config = CountingEnvConfig()
    groups = scripted.process(
        MultimodalCountingEnv,
        ["--env.group_size", "2", "--env.total_steps", "3"],
        answering_responder(config, range(0, 12)),
        server_type=None,  # the default server type: the pictures go by chat completions
    )
    assert len(groups) == 3
    for seed, group in enumerate(groups):
        assert group["images"] == [make_item(seed, config).image_b64] * 2
        assert sorted(group["scores"]) == [0.0, 1.0]
        assert group_images(group)[0].size == (256, 256)


def test_evaluate_on_held_out_pictures(scripted):
    config = CountingEnvConfig()
    evaluation = scripted.evaluation(
        MultimodalCountingEnv,
        ["--env.eval_size", "5"],
        answering_responder(config, range(1_000_000, 1_000_005)),
        server_type=None,
    )
    assert evaluation.metrics == {"eval/percent_correct": 1.0}
    assert Counter(s["seed"] for s in evaluation.samples) == Counter(range(1_000_000, 1_000_005))
