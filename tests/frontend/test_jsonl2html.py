"""jsonl2html: the group/item markup, page assembly, warnings and the command line."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest

from atroposlib.frontend import jsonl2html
from atroposlib.frontend.jsonl2html import create_html_for_group, generate_html, get_score_class

NO_DATA = "<p>No data to display. Input file might be empty or contain invalid data.</p>"


def write_jsonl(path: Path, rows: list) -> Path:
    path.write_text(
        "".join((r if isinstance(r, str) else json.dumps(r)) + "\n" for r in rows), encoding="utf-8"
    )
    return path


# -- the original's expectations -----------------------------------------------------------------------


class TestCreateHtmlForGroup:
    def test_string_messages_format(self):
        html = create_html_for_group(
            {"messages": ["Hello, world!", "This is a test message."], "scores": [0.5, 0.8]}, 0
        )
        assert "Hello, world!" in html and "This is a test message." in html
        assert "0.5" in html and "0.8" in html

    def test_nested_messages_format(self):
        group = {
            "messages": [
                [
                    {"role": "system", "content": "You are a helpful assistant."},
                    {"role": "user", "content": "What is 2+2?"},
                    {"role": "assistant", "content": "2+2 equals 4."},
                ],
                [{"role": "user", "content": "Hello!"}, {"role": "assistant", "content": "Hi there!"}],
            ],
            "scores": [1.0, 0.9],
        }
        html = create_html_for_group(group, 0)
        for text in ["You are a helpful assistant", "What is 2+2?", "2+2 equals 4", "Hello!", "Hi there!"]:
            assert text in html
        for role in ["System", "User", "Assistant"]:
            assert role in html

    def test_empty_messages(self, capsys):
        assert create_html_for_group({"messages": [], "scores": []}, 0) == ""
        assert "Group 0 resulted in no items" in capsys.readouterr().err

    def test_mismatched_lengths(self, capsys):
        html = create_html_for_group(
            {"messages": ["Message 1", "Message 2", "Message 3"], "scores": [0.5]}, 0
        )
        assert "Message 1" in html and "Message 2" not in html and "Message 3" not in html
        assert "mismatched lengths for messages (3) and scores (1)" in capsys.readouterr().err


class TestGenerateHtml:
    def test_generate_html_with_nested_messages(self, tmp_path):
        row = {
            "messages": [
                [
                    {"role": "system", "content": "Be helpful."},
                    {"role": "user", "content": "Test question"},
                    {"role": "assistant", "content": "Test answer"},
                ]
            ],
            "scores": [0.75],
        }
        src = write_jsonl(tmp_path / "test.jsonl", [row])
        out = tmp_path / "test.html"
        generate_html(str(src), str(out))
        html = out.read_text()
        assert "Test question" in html and "Test answer" in html

    def test_generate_html_with_string_messages(self, tmp_path):
        src = write_jsonl(
            tmp_path / "test_strings.jsonl", [{"messages": ["Simple string message"], "scores": [0.5]}]
        )
        out = tmp_path / "test_strings.html"
        generate_html(str(src), str(out))
        assert "Simple string message" in out.read_text()


# -- exact markup ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("score", "cls"),
    [(1, "reward-positive"), (0.01, "reward-positive"), (-2, "reward-negative"), (0, "reward-zero"), (0.0, "reward-zero"),
     ("3.5", "reward-positive"), ("-1", "reward-negative"), ("n/a", ""), (None, ""), ([1], ""), (float("nan"), "")],
)  # fmt: skip
def test_get_score_class(score, cls):
    assert get_score_class(score) == cls


def test_group_markup():
    group = {
        "messages": [
            [{"role": "user", "content": "Compute **2+2**"}, {"role": "assistant", "content": "4"}],
            "plain <b>html</b> & text",
            {"unexpected": "shape"},
        ],
        "scores": [1.0, -0.5, "bad <score>"],
    }
    html = create_html_for_group(group, 3)
    assert html.startswith("<details>\n<summary>Group 3</summary>\n")
    assert html.count('<div class="group-content">') == 1 and html.rstrip().endswith("</details>")
    items = re.findall(r'<div class="item ([^"]*)" id="(group-3-item-\d)">', html)
    assert items == [
        ("reward-positive", "group-3-item-0"),
        ("reward-negative", "group-3-item-1"),
        ("", "group-3-item-2"),
    ]
    for i in range(3):
        assert f"<h4>Content {i}</h4>" in html
    assert html.count('<div class="content-block">') == 3
    assert "<p><strong>User</strong>: Compute <strong>2+2</strong></p>" in html
    assert "<p><strong>Assistant</strong>: 4</p>" in html
    assert "plain <b>html</b> &amp; text" in html  # raw HTML in content is kept (markdown semantics)
    assert "<p>{'unexpected': 'shape'}</p>" in html
    assert "<p><strong>Reward:</strong> 1.0</p>" in html
    assert "<p><strong>Reward:</strong> bad &lt;score&gt;</p>" in html


def test_markdown_extensions_fenced_code_tables_nl2br():
    content = "Here:\n\n```python\ndef f():\n    return 1\n```\n\n| a | b |\n|---|---|\n| 1 | 2 |\n\nline one\nline two"
    html = create_html_for_group({"messages": [content], "scores": [1]}, 0)
    assert '<pre><code class="language-python">def f():\n    return 1\n</code></pre>' in html
    assert "<table>" in html and "<th>a</th>" in html and "<td>2</td>" in html
    assert "line one<br />\nline two" in html


def test_message_lists_join_roles_and_stringify_other_entries():
    msgs = [
        {
            "role": "tool",
            "content": [{"type": "text", "text": "part one"}, {"type": "text", "text": "part two"}],
        },
        42,
    ]
    md = jsonl2html.message_to_markdown(msgs)
    assert md == "**Tool**: part one\npart two\n\n42"
    assert jsonl2html.message_to_markdown([{"content": "x"}]) == "**Unknown**: x"
    assert jsonl2html.message_to_markdown(7) == "7"
    # a reply that starts with a fence still renders as a code block
    html = create_html_for_group(
        {"messages": [[{"role": "assistant", "content": "```\ncode\n```"}]], "scores": [1]}, 0
    )
    assert "<p><strong>Assistant</strong>:</p>\n<pre><code>code\n</code></pre>" in html


# -- the page ------------------------------------------------------------------------------------------


def test_page_structure_title_and_group_numbering(tmp_path, capsys):
    rows = [
        {"messages": ["first"], "scores": [1]},
        "{broken json",
        {"messages": ["no scores"]},
        {"messages": [], "scores": []},  # empty: skipped, does not consume a group number
        {"messages": ["second"], "scores": [0]},
        "",
    ]
    src = write_jsonl(tmp_path / "run <1>.jsonl", rows)
    generate_html(str(src))
    out = tmp_path / "run <1>.html"  # default output: the input with .html
    html = out.read_text(encoding="utf-8")
    assert "<title>Rendered Messages - run &lt;1&gt;.jsonl</title>" in html
    assert "<h1>Rendered Messages - run &lt;1&gt;.jsonl</h1>" in html
    assert re.findall(r"<summary>Group (\d+)</summary>", html) == ["0", "1"]
    assert 'id="group-1-item-0"' in html and "second" in html
    assert NO_DATA not in html
    captured = capsys.readouterr()
    assert f"Successfully generated HTML file: {out.absolute()}" in captured.out
    assert "Warning: Skipping line 2. Invalid JSON: {broken json..." in captured.err
    assert "Warning: Skipping line 3. Invalid format (missing 'messages' or 'scores'): " in captured.err
    assert "Group 1 resulted in no items" in captured.err


def test_page_without_valid_groups(tmp_path, capsys):
    src = write_jsonl(tmp_path / "empty.jsonl", ["not json", {"a": 1}])
    generate_html(str(src), str(tmp_path / "nested" / "dir" / "out.html"))
    html = (tmp_path / "nested" / "dir" / "out.html").read_text()
    assert NO_DATA in html and "<details>" not in html
    assert "No valid groups found" in capsys.readouterr().err


def test_template_placeholders_and_keyboard_script():
    template = jsonl2html.TEMPLATE_FILE.read_text(encoding="utf-8")
    page = template.format(title="T", groups_html="<!--groups-->")
    assert "<title>T</title>" in page and "<h1>T</h1>" in page and "<!--groups-->" in page
    assert "ArrowDown" in page and "ArrowUp" in page and "closest('details')" in page
    assert ".reward-positive" in page and ".reward-negative" in page and ".reward-zero" in page


def test_missing_input_exits_1(tmp_path, capsys):
    with pytest.raises(SystemExit) as exc:
        generate_html(str(tmp_path / "nope.jsonl"))
    assert exc.value.code == 1
    assert "Error: Input file not found" in capsys.readouterr().err


def test_missing_template_exits_1(tmp_path, monkeypatch, capsys):
    src = write_jsonl(tmp_path / "ok.jsonl", [{"messages": ["x"], "scores": [1]}])
    monkeypatch.setattr(jsonl2html, "TEMPLATE_FILE", tmp_path / "missing-template.html")
    with pytest.raises(SystemExit) as exc:
        generate_html(str(src))
    assert exc.value.code == 1
    assert "Error: Template file not found" in capsys.readouterr().err
    assert not (tmp_path / "ok.html").exists()


def test_unwritable_output_exits_1(tmp_path, capsys):
    src = write_jsonl(tmp_path / "ok.jsonl", [{"messages": ["x"], "scores": [1]}])
    blocker = tmp_path / "file"
    blocker.write_text("")
    with pytest.raises(SystemExit) as exc:
        generate_html(str(src), str(blocker / "out.html"))
    assert exc.value.code == 1
    assert "Error writing output file" in capsys.readouterr().err


# -- command line --------------------------------------------------------------------------------------


def run_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "atroposlib.frontend.jsonl2html", *args],
        capture_output=True,
        text=True,
        timeout=60,
    )


def test_cli_positional_and_flag_forms(tmp_path):
    src = write_jsonl(tmp_path / "g.jsonl", [{"messages": ["cli content"], "scores": [2]}])
    proc = run_cli(str(src))
    assert proc.returncode == 0, proc.stderr
    assert "cli content" in (tmp_path / "g.html").read_text()
    proc = run_cli(str(src), str(tmp_path / "x.html"))
    assert proc.returncode == 0 and (tmp_path / "x.html").exists()
    proc = run_cli(f"--input_path={src}", f"--output_path={tmp_path / 'y.html'}")
    assert proc.returncode == 0 and (tmp_path / "y.html").exists()


def test_cli_errors(tmp_path):
    proc = run_cli(str(tmp_path / "missing.jsonl"))
    assert proc.returncode == 1 and "Error: Input file not found" in proc.stderr
    proc = run_cli()
    assert proc.returncode == 2 and "input JSONL path is required" in proc.stderr
