"""The HTML a viewer shows for one group, and image extraction for multimodal groups."""

from __future__ import annotations

import base64
import re
import time

from PIL import Image

from atroposlib.cli._tooling.images import decode_image, group_images, text_prompt
from atroposlib.cli._tooling.render import build_display, histogram_svg, render_group, score_colors
from atroposlib.cli._tooling.sources import GroupRecord
from atroposlib.cli._tooling.store import GroupStore, navigate
from tests.helpers.cli_tools import png_data, png_data_uri


def test_display_prompt_once_sorted_completions_and_trained_spans(groups, tiny_tokenizer):
    _, group = groups[0]
    display = build_display(group, tiny_tokenizer)
    assert "What is two plus three?" in display.prompt
    assert display.prompt.endswith("<|im_start|>assistant\n")
    assert [c.score for c in display.completions] == sorted(group["scores"], reverse=True)
    best = display.completions[0]
    assert best.index == 0
    text = "".join(t for _, t in best.segments)
    assert text == "The answer is 5<|im_end|>"  # the prompt is not repeated in a completion
    assert all(trained for trained, t in best.segments if t.strip())  # the completion is the trained part
    assert best.trained == len(tiny_tokenizer.encode("The answer is 5<|im_end|>", add_special_tokens=False))
    assert best.total == len(group["tokens"][0])


def test_render_group_html(groups, tiny_tokenizer):
    _, group = groups[2]
    record = GroupRecord(group=group, seq=7, env_id=1, env_name="story_0", step=3, origin="seq 7")
    html = render_group(record, tiny_tokenizer, "group 2 of 5")
    assert html.count("Write a short story about a cat and the moon.") == 1
    for needle in ("story_0", "step 3", "seq 7", "env_id 1", "group 2 of 5", "<svg", 'class="av-trained"'):
        assert needle in html
    shown = [float(s) for s in re.findall(r'data-score="([^"]+)"', html)]
    assert shown == sorted(group["scores"], reverse=True)
    assert "&lt;|im_end|&gt;" in html  # special tokens kept and escaped


def test_render_without_tokenizer_uses_messages_then_token_ids(groups):
    _, group = groups[1]
    display = build_display(group, None)
    assert "How many apples" in display.prompt
    assert "assistant: she has three" in [c.segments[0][1] for c in display.completions]
    assert display.completions[0].trained > 0  # mask is known even without a tokenizer
    ids_only = dict(group, messages=None)
    display = build_display(ids_only, None)
    assert display.prompt == ""
    trained_text = "".join(t for trained, t in display.completions[0].segments if trained)
    assert trained_text.split()[0] == str(group["masks"][0][first_trained(group["masks"][0])])


def first_trained(mask):
    return next(i for i, m in enumerate(mask) if m != -100)


def test_score_colours_and_histogram():
    assert score_colors(1.0, -1.0, 1.0)[0].startswith("hsl(120")
    assert score_colors(-1.0, -1.0, 1.0)[0].startswith("hsl(0,")
    assert score_colors(0.3, 0.3, 0.3)[0].startswith("hsl(60")
    svg = histogram_svg([1.0, 1.0, -1.0, 0.5], "Scores")
    assert svg.startswith("<svg") and "(n=4)" in svg
    assert svg.count("<rect") == 3  # one bar per distinct value
    assert ">-1</text>" in svg and ">0.5</text>" in svg and ">1</text>" in svg
    wide = histogram_svg([i / 10 for i in range(100)], "Many")
    assert wide.count("<rect") == 10  # equal-width bins beyond 12 distinct values
    assert "no scores" in histogram_svg([])
    assert histogram_svg([2.0, 2.0]).count("<rect") == 1


def test_decode_image_variants():
    raw = png_data()
    assert decode_image(png_data_uri()).size == (24, 16)
    assert decode_image(base64.b64encode(raw).decode()).size == (24, 16)
    assert decode_image(raw).size == (24, 16)
    pil = Image.new("RGB", (5, 5))
    assert decode_image(pil) is pil
    assert decode_image({"image_url": {"url": png_data_uri()}}).size == (24, 16)
    assert decode_image("not an image") is None
    assert decode_image(base64.b64encode(b"plain text").decode()) is None
    assert decode_image(12) is None


def test_group_images_from_field_messages_and_prompt():
    red, blue = png_data_uri(color=(255, 0, 0)), png_data_uri(color=(0, 0, 255))
    assert len(group_images({"images": [red, [blue], "garbage", None]})) == 2
    assert len(group_images({"images": [red, red]})) == 1  # the same image once
    msg = [
        [
            {
                "role": "user",
                "content": [
                    {"type": "image_url", "image_url": {"url": blue}},
                    {"type": "text", "text": "hi"},
                ],
            }
        ]
    ]
    assert len(group_images({"images": None, "messages": msg})) == 1
    assert len(group_images({"images": None}, prompt_text=f"look {red} here")) == 1
    assert group_images({"images": None}) == []


def test_text_prompt_heuristics():
    assert (
        text_prompt('[{"type": "image"}, {"type": "text", "text": "What colour is \\"this\\"?"}]')
        == 'What colour is "this"?'
    )
    assert text_prompt("<img>[Image] Describe it. ") == "Describe it."
    assert text_prompt("plain question") == "plain question"


def test_store_navigation_and_env_filter():
    store = GroupStore(None, max_groups=3)
    recs = [GroupRecord(group={"scores": [1.0]}, env_name=n) for n in ("a", "b", "a", "b")]
    keys = store.add(recs)
    assert [k for k, _ in store.items()] == keys[1:]  # oldest dropped beyond max_groups
    assert store.env_labels() == ["b", "a"]
    assert [k for k, _ in store.items("a")] == [keys[2]]
    ks = [k for k, _ in store.items()]
    assert navigate(ks, None, "stay") == ks[-1]
    assert navigate(ks, ks[-1], "next") == ks[-1]
    assert navigate(ks, ks[-1], "prev") == ks[-2]
    assert navigate(ks, ks[1], "first") == ks[0]
    assert navigate([], None, "last") is None


def test_viewer_tokenizer_slot(tiny_model_dir):
    from atroposlib.cli.view_run import TokenizerSlot

    assert TokenizerSlot("none").tokenizer is None and TokenizerSlot("none").notice is None
    local = TokenizerSlot(str(tiny_model_dir))
    assert local.tokenizer is not None and not local.loading
    missing = TokenizerSlot("no-such-org/no-such-tokenizer")  # not cached; the hub is offline in tests
    deadline = time.monotonic() + 60
    while missing.loading and time.monotonic() < deadline:
        time.sleep(0.05)
    assert missing.tokenizer is None
    assert "cannot load tokenizer 'no-such-org/no-such-tokenizer'" in missing.notice
