"""view-run and view-run-multimodal in a real headless Chromium, against real data sources."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from atroposlib.testing.api_process import free_port
from tests.tools.helpers import (
    BROWSER_ARGS,
    CHROMIUM,
    ToolProcess,
    assert_png,
    make_group,
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


def wait_text(page, selector: str, text: str, timeout: float = 30_000) -> None:
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
