"""The accessibility auto-fixer: the WCAG rules, the original's reward, local rows, ``process`` and
``evaluate``."""

from __future__ import annotations

import pytest
from bs4 import BeautifulSoup

from environments.community.accessibility_env.accessibility_env import AccessibilityEnv, Snippet, score_fix
from environments.community.accessibility_env.accessibility_rules import alt_text_ok, labels_ok, link_text_ok
from tests.environments.community.community_runs import evaluate_local, process_local
from tests.helpers.cli_runs import FIXTURES, read_jsonl
from tests.helpers.single_turn_runs import check_groups, offline_env, prompt_text, setup_failure, write_jsonl

SAMPLE = FIXTURES / "community" / "accessibility_sample.jsonl"
MIXED = Snippet(
    "m", '<section><img src="c.png"><input id="n"><a href="/more"></a></section>',
    ("missing_alt_text", "missing_label", "missing_link_text"),
)  # fmt: skip


def _soup(html: str) -> BeautifulSoup:
    return BeautifulSoup(html, "lxml")


def test_rules():
    assert alt_text_ok(_soup('<img alt="Sales chart">')) and not alt_text_ok(_soup('<img src="x">'))
    assert not alt_text_ok(_soup('<img alt=" ">')) and alt_text_ok(_soup('<img alt="" role="presentation">'))
    assert labels_ok(_soup('<label for="e">E-mail</label><input id="e">'))
    assert labels_ok(_soup("<label>E-mail <input></label>")) and labels_ok(
        _soup('<input aria-label="E-mail">')
    )
    assert labels_ok(_soup('<span id="l">E-mail</span><input aria-labelledby="l">'))
    assert labels_ok(_soup('<input type="submit"><input type="hidden">'))
    assert not labels_ok(_soup('<label>E-mail</label><input id="e">')) and not labels_ok(
        _soup("<textarea></textarea>")
    )
    assert link_text_ok(
        _soup('<a href="/">Home</a><a href="/x" aria-label="X"></a><a href="/h"><img alt="Home"></a>')
    )
    assert not link_text_ok(_soup('<a href="/h"><img src="h.svg"></a>')) and link_text_ok(
        _soup("<a name='top'></a>")
    )


FIXED = '<section><img src="c.png" alt="Chart"><label for="n">Name</label><input id="n"><a href="/more">More</a></section>'


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        (f"```html\n{FIXED}\n```", 1.0),
        (f"<think>three issues</think>\n{FIXED}", 1.0),  # no code block: the rest of the reply
        (
            '```html\n<section><img src="c.png" alt="Chart"><input id="n" aria-label="Name"><a href="/more" aria-label="More"></a></section>\n```',
            1.0,
        ),
        (
            '```html\n<section><img src="c.png" alt="Chart"><input id="n"><a href="/more"></a></section>\n```',
            0.266667,
        ),
        (
            '```html\n<section><img alt="Chart"><input aria-label="n"></section>\n```',
            -0.5,
        ),  # the link deleted
        (f"```html\n{MIXED.html}\n```", -0.5),  # unchanged
        ("I would add alt text.", -1.0),  # no HTML
        (f"<think>{FIXED}</think>", -1.0),  # only inside the reasoning
        ("", -1.0),
    ],
)
def test_scoring(reply, score):
    assert score_fix(reply, MIXED) == pytest.approx(score)


async def test_rows_and_no_default_data(tiny_model_dir, tmp_path):
    env = offline_env(AccessibilityEnv, tiny_model_dir, dataset_path=str(SAMPLE))
    await env.setup()
    assert len(env.test) == 1 and len(env.train) == 3
    await setup_failure(offline_env(AccessibilityEnv, tiny_model_dir), "no published data set")
    bad = write_jsonl(tmp_path / "bad.jsonl", [{"html": "<p>x</p>", "issues_to_fix": ["contrast"]}])
    await setup_failure(
        offline_env(AccessibilityEnv, tiny_model_dir, dataset_path=bad), "row 0: field 'issues_to_fix'"
    )


FIXES = {
    row["id"]: html
    for row, html in zip(
        read_jsonl(SAMPLE),
        [
            '<div><img src="logo.png" alt="Company logo"><p>Welcome</p></div>',
            '<form><label for="email">E-mail</label><input type="text" id="email"><button>Send</button></form>',
            '<nav><a href="/home"><img src="home.svg" alt="Home"></a></nav>',
            '<section><img src="chart.png" alt="Chart"><label for="n">Name</label><input id="n"><a href="/more">More</a></section>',
        ],
        strict=True,
    )
}
ORIGINALS = {row["html"]: row["id"] for row in read_jsonl(SAMPLE)}


def _snippet_id(prompt) -> str:
    return ORIGINALS[prompt_text(prompt).split("```html\n", 1)[1].split("\n```", 1)[0]]


def _fixer(prompt, index):
    """The fixed snippet for even choices, the snippet unchanged for odd ones."""
    snippet = _snippet_id(prompt)
    html = FIXES[snippet] if index % 2 == 0 else next(h for h, i in ORIGINALS.items() if i == snippet)
    return f"```html\n{html}\n```"


def test_process_with_local_rows(scripted):
    groups = process_local(
        scripted, AccessibilityEnv, SAMPLE, _fixer, group_size=2, total_steps=2, max_tokens=256
    )
    check_groups(groups, 2, [-0.5, 1.0])


def test_evaluate_reports_fixed_snippets(scripted):
    evaluation = evaluate_local(
        scripted,
        AccessibilityEnv,
        SAMPLE,
        lambda prompt, index: _fixer(prompt, 0) if _snippet_id(prompt) in ("img-1", "form-1") else "no",
        max_tokens=256,
    )
    # two snippets fixed (1.0), two answered without HTML (-1.0)
    assert evaluation.metrics["eval/percent_correct"] == 0.5 and evaluation.metrics["eval/mean_score"] == 0.0
