"""view-run and view-run-multimodal in a real headless Chromium, against real data sources."""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

import pytest

from atroposlib.testing.api_process import free_port
from tests.helpers.cli_tools import (
    BROWSER_ARGS,
    CHROMIUM,
    LiveRun,
    ToolProcess,
    assert_png,
    fixture_groups,
    make_group,
    png_data_uri,
)

pytestmark = pytest.mark.browser


@pytest.fixture(scope="module")
def browser():
    if not os.path.exists(CHROMIUM):
        pytest.fail("Debian chromium is required for the browser tests: apt-get install -y chromium")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as pw:
        b = pw.chromium.launch(executable_path=CHROMIUM, args=BROWSER_ARGS)
        yield b
        b.close()


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 1400})
    pg = context.new_page()
    yield pg
    context.close()


def start_viewer(tmp_path: Path, module: str, *args) -> tuple[ToolProcess, str]:
    port = free_port()
    proc = ToolProcess(module, ["--port", port, "--refresh-interval", "1", *args], tmp_path / f"{module}.log")
    url = f"http://127.0.0.1:{port}"
    proc.wait_http(url + "/")
    return proc, url


def group_text(page) -> str:
    return page.inner_text("#av-group")


def wait_text(page, selector: str, text: str, timeout: float = 90_000) -> None:
    page.wait_for_function(
        "([sel, txt]) => { const el = document.querySelector(sel); return el && el.innerText.includes(txt); }",
        arg=[selector, text],
        timeout=timeout,
    )


def test_view_run_on_a_process_jsonl(tmp_path, page, process_jsonl, tiny_model_dir, tiny_tokenizer):
    viewer, url = start_viewer(tmp_path, "view_run", "--jsonl", process_jsonl, "--tokenizer", tiny_model_dir)
    try:
        page.goto(url)
        wait_text(page, "#av-group", "Write a short story")  # follows the newest group
        text = group_text(page)
        assert text.count("Write a short story about a cat and the moon.") == 1
        for needle in (
            "arith_process",
            "The cat looked at the moon every day.",
            "Score 0.9",
            "Score -1",
            "group 3 of 3",
        ):
            assert needle in text
        assert "Groups loaded: 3" in page.inner_text("#av-status")
        scores = page.eval_on_selector_all(".av-comp", "els => els.map(e => parseFloat(e.dataset.score))")
        assert scores == [0.9, 0.7, -0.5, -1.0]
        assert page.locator("#av-group .av-trained").count() >= 4
        assert page.locator("#av-group svg.av-hist").count() == 1

        page.get_by_role("button", name="‹ Previous").click()
        wait_text(page, "#av-group", "How many apples")
        assert "group 2 of 3" in group_text(page)
        page.get_by_role("button", name="« Oldest").click()
        wait_text(page, "#av-group", "What is two plus three?")
        text = group_text(page)
        assert "The answer is 5" in text and "Score 1" in text and "sequence 0" in text

        shot = tmp_path / "view_run_jsonl.png"
        page.screenshot(path=str(shot), full_page=True)
        assert_png(shot)

        # live: a group appended by a still-running `process` shows up without reloading
        page.get_by_role("button", name="Newest »").click()
        new = make_group(
            tiny_tokenizer, [{"role": "user", "content": "Give a number."}], ["nine", "ten"], [0.25, 0.75]
        )
        with process_jsonl.open("a") as fh:
            fh.write(json.dumps(new) + "\n")
        wait_text(page, "#av-group", "Give a number.")
        assert "group 4 of 4" in group_text(page)
    finally:
        assert viewer.stop() in (0, -15)


def test_view_run_against_a_live_api_is_read_only(tmp_path, page, api, tiny_model_dir, tiny_tokenizer):
    run = LiveRun(api)
    run.register_trainer(batch_size=64)
    env_ids = {"arith": run.register_env("arith", 4), "story": run.register_env("story", 4)}
    for _, group in fixture_groups(tiny_tokenizer, env_ids):
        run.post("/scored_data", group)
    before = run.snapshot()
    viewer, url = start_viewer(tmp_path, "view_run", "--api-url", api.url, "--tokenizer", tiny_model_dir)
    try:
        page.goto(url)
        wait_text(page, "#av-group", "Write a short story")
        text = group_text(page)
        for needle in (
            "story_0",
            "env_id 1",
            "step 0",
            "The cat sat under the moon and the sun.",
            "Score 0.7",
            "Score -0.5",
        ):
            assert needle in text
        assert "Groups loaded: 3" in page.inner_text("#av-status")

        page.get_by_label("Environment").click()
        page.get_by_role("option", name="arith_0").click()
        wait_text(page, "#av-group", "How many apples")
        assert "arith_0" in group_text(page) and "group 2 of 2" in group_text(page)
        page.get_by_role("button", name="‹ Previous").click()
        wait_text(page, "#av-group", "What is two plus three?")
        assert "I think it is 5" in group_text(page)

        shot = tmp_path / "view_run_api.png"
        page.screenshot(path=str(shot), full_page=True)
        assert_png(shot)
        time.sleep(2.5)  # let a few live refreshes happen
        assert run.snapshot() == before  # queue, step, registration and envs untouched

        # live refresh: a newly posted arith group is followed by the arith filter
        page.get_by_role("button", name="Newest »").click()
        extra = make_group(
            tiny_tokenizer,
            [{"role": "user", "content": "What is nine minus two?"}],
            ["7", "6", "7", "5"],
            [1, -1, 1, -1],
            env_id=env_ids["arith"],
        )
        run.post("/scored_data", extra)
        wait_text(page, "#av-group", "What is nine minus two?")
        assert "group 3 of 3" in group_text(page)
    finally:
        assert viewer.stop() in (0, -15)
    assert "Traceback" not in viewer.log()
    assert "gradio.live" not in viewer.log() and "share=True" not in viewer.log()
    assert "serving on http://127.0.0.1:" in viewer.log()


def test_view_run_multimodal_shows_the_image(tmp_path, page, api, tiny_model_dir, tiny_tokenizer):
    run = LiveRun(api)
    run.register_trainer(batch_size=64)
    env_id = run.register_env("vision", 2)
    image = png_data_uri(color=(20, 160, 60), size=(64, 48))
    prompt = [
        {
            "role": "user",
            "content": [
                {"type": "image_url", "image_url": {"url": image}},
                {"type": "text", "text": "What colour is the square?"},
            ],
        }
    ]
    group = make_group(tiny_tokenizer, prompt, ["green", "red"], [1.0, -1.0], env_id=env_id, images=[image])
    run.post("/scored_data", group)
    before = run.snapshot()
    viewer, url = start_viewer(
        tmp_path, "view_run_multimodal", "--api-url", api.url, "--tokenizer", tiny_model_dir
    )
    try:
        page.goto(url)
        wait_text(page, "#av-group", "vision_0")
        text = group_text(page)
        assert "Score 1" in text and "green" in text and "red" in text
        page.wait_for_function(
            "() => [...document.querySelectorAll('#av-images img')].some(i => i.complete && i.naturalWidth > 0)",
            timeout=90_000,
        )
        sizes = page.eval_on_selector_all(
            "#av-images img", "els => els.map(i => [i.naturalWidth, i.naturalHeight])"
        )
        assert [64, 48] in sizes
        assert "What colour is the square?" in page.input_value("#av-text-prompt textarea")
        shot = tmp_path / "view_run_multimodal.png"
        page.screenshot(path=str(shot), full_page=True)
        assert_png(shot)
        assert run.snapshot() == before
    finally:
        assert viewer.stop() in (0, -15)


def test_view_run_consume_grabs_a_batch_on_request(tmp_path, page, api, tiny_model_dir, tiny_tokenizer):
    run = LiveRun(api)
    run.register_trainer(batch_size=8)
    env_id = run.register_env("arith", 4)
    for _, group in fixture_groups(tiny_tokenizer, {"arith": env_id, "story": env_id})[:2]:
        run.post("/scored_data", group)
    viewer, url = start_viewer(tmp_path, "view_run", "--api-url", api.url, "--tokenizer", "none", "--consume")
    try:
        page.goto(url)
        wait_text(page, "#av-group", "No groups yet")
        time.sleep(1.5)
        assert run.get("/status")["queue_size"] == 2  # nothing is taken until the button is pressed
        page.get_by_role("button", name="Grab Next Batch (takes it from the trainer)").click()
        wait_text(page, "#av-group", "How many apples")
        assert "group 2 of 2" in group_text(page) and "arith_0" in group_text(page)
        assert "no tokenizer: showing messages" in group_text(page)
        assert run.get("/status") == {"current_step": 1, "queue_size": 0}
        assert run.post("/batch/replay", {})["batches"] == 0  # acknowledged
    finally:
        assert viewer.stop() in (0, -15)


def test_view_run_bad_input_exits_with_a_message(tmp_path):
    from tests.helpers.cli_tools import run_tool

    proc = run_tool("view_run", "--jsonl", tmp_path / "missing.jsonl", "--tokenizer", "none")
    assert proc.returncode == 1 and "does not exist" in proc.stderr
    proc = run_tool("view_run", "--register", "--tokenizer", "none")
    assert proc.returncode == 1 and "--register only makes sense with --consume" in proc.stderr


def test_navigation_holds_while_live_refreshes_run(
    tmp_path, page, process_jsonl, tiny_model_dir, tiny_tokenizer
):
    """A refresh that was already on its way when the user navigated must not undo the navigation."""
    viewer, url = start_viewer(
        tmp_path,
        "view_run",
        "--jsonl", process_jsonl,
        "--tokenizer", tiny_model_dir,
        "--refresh-interval", "0.1",
    )  # fmt: skip
    stop = threading.Event()

    def grow() -> None:  # a still-running `process`: every refresh finds new data
        i = 0
        while not stop.wait(0.05):
            i += 1
            new = make_group(
                tiny_tokenizer, [{"role": "user", "content": f"Filler {i}."}], ["a", "b"], [0, 1]
            )
            with process_jsonl.open("a") as fh:
                fh.write(json.dumps(new) + "\n")

    writer = threading.Thread(target=grow, daemon=True)
    try:
        page.goto(url)
        wait_text(page, "#av-group", "Write a short story")
        writer.start()
        wait_text(page, "#av-group", "Filler")  # following the newest group
        page.get_by_role("button", name="« Oldest").click()
        wait_text(page, "#av-group", "What is two plus three?")
        steps = [
            ("Next ›", "How many apples"),
            ("Next ›", "Write a short story"),
            ("Next ›", "Filler 1."),
            ("‹ Previous", "Write a short story"),
            ("‹ Previous", "How many apples"),
            ("Next ›", "Write a short story"),
        ]
        for step, (button, needle) in enumerate(steps):
            page.get_by_role("button", name=button).click()
            try:
                wait_text(page, "#av-group", needle, timeout=15_000)
            except Exception:
                raise AssertionError((step, button, needle, group_text(page)[:300])) from None
            time.sleep(0.6)  # several refreshes with new data
            assert needle in group_text(page), (step, group_text(page)[:200])
            assert not page.get_by_label("Follow newest").is_checked()
        page.get_by_label("Follow newest").check()  # following again: the next refresh moves on
        wait_text(page, "#av-group", "Filler")
    finally:
        stop.set()
        assert viewer.stop() in (0, -15)
