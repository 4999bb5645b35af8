#!/usr/bin/env python3
"""Render the scored groups of a JSONL file (as written by ``process`` or ``data_path_to_save_groups``)
into one static HTML page.

Each input line is an object with ``messages`` and ``scores``. Every group becomes a collapsible
``<details>`` section; every item shows its pictures (the group's ``images``: base64 or data URIs), its
markdown-rendered messages and its reward, coloured by sign.

Command line: ``python -m atroposlib.frontend.jsonl2html INPUT.jsonl [OUTPUT.html]``.
"""

from __future__ import annotations

import argparse
import html
import json
import sys
from pathlib import Path
from typing import Any

import markdown

TEMPLATE_FILE = Path(__file__).resolve().parent / "template.html"
MARKDOWN_EXTENSIONS = ["fenced_code", "tables", "nl2br"]
NO_DATA_HTML = "<p>No data to display. Input file might be empty or contain invalid data.</p>"


def _warn(message: str) -> None:
    print(message, file=sys.stderr)


def _fail(message: str) -> None:
    print(message, file=sys.stderr)
    sys.exit(1)


def get_score_class(score: Any) -> str:
    """CSS class for a reward: ``reward-positive`` (> 0), ``reward-negative`` (< 0), ``reward-zero`` (0), or
    ``""`` when the score is not numeric."""
    try:
        value = float(score)
    except (TypeError, ValueError):
        return ""
    if value > 0:
        return "reward-positive"
    if value < 0:
        return "reward-negative"
    if value == 0:
        return "reward-zero"
    return ""  # NaN


def _content_text(content: Any) -> str:
    """Text of a message content: a string, or the text parts of a multimodal content list."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for part in content:
            if isinstance(part, dict) and part.get("type") == "text":
                parts.append(str(part.get("text", "")))
            elif isinstance(part, str):
                parts.append(part)
            else:
                parts.append(str(part))
        return "\n".join(parts)
    return "" if content is None else str(content)


def message_to_markdown(message: Any) -> str:
    """Markdown for one item's messages: a string as is; a list of message dicts as
    ``**Role**: content`` paragraphs (other entries stringified); anything else stringified."""
    if isinstance(message, str):
        return message
    if isinstance(message, list):
        parts = []
        for entry in message:
            if isinstance(entry, dict):
                role = str(entry.get("role", "unknown")).capitalize()
                text = _content_text(entry.get("content", ""))
                # A fenced block or table must start its own line to render as one.
                separator = "\n" if text.startswith(("```", "~~~", "|")) else " "
                parts.append(f"**{role}**:{separator}{text}")
            else:
                parts.append(str(entry))
        return "\n\n".join(parts)
    return str(message)


def _image_sources(images: Any) -> list[str]:
    """``src`` values of one sequence's pictures: base64 strings become PNG data URIs, data URIs and URLs
    stay as they are, anything else is left out."""
    if images is None:
        return []
    if not isinstance(images, list):
        images = [images]
    sources = []
    for image in images:
        if isinstance(image, str) and image.startswith(("data:image/", "http://", "https://")):
            sources.append(image)
        elif isinstance(image, str) and image:
            sources.append(f"data:image/png;base64,{image}")
    return sources


def create_html_for_group(group_data: dict, index: int) -> str:
    """HTML of one group (``<details>`` with one ``div.item`` per message/score pair), or ``""`` when the
    group has no items. On a messages/scores length mismatch both are cut to the shorter (with a warning)."""
    messages = group_data.get("messages") or []
    scores = group_data.get("scores") or []
    if len(messages) != len(scores):
        _warn(
            f"Warning: Group {index} has mismatched lengths for messages ({len(messages)}) and scores "
            f"({len(scores)}). Skipping items."
        )
        shortest = min(len(messages), len(scores))
        messages, scores = messages[:shortest], scores[:shortest]

    images = group_data.get("images") or []
    items = []
    for i, (message, score) in enumerate(zip(messages, scores, strict=False)):
        rendered = markdown.markdown(message_to_markdown(message), extensions=MARKDOWN_EXTENSIONS)
        pictures = "".join(
            f'<img class="item-image" alt="image {i}" style="max-width:320px" src="{html.escape(src)}">\n'
            for src in _image_sources(images[i] if i < len(images) else None)
        )
        items.append(
            f'<div class="item {get_score_class(score)}" id="group-{index}-item-{i}">\n'
            f"<h4>Content {i}</h4>\n"
            f"{pictures}"
            f'<div class="content-block">\n{rendered}\n</div>\n'
            f"<p><strong>Reward:</strong> {html.escape(str(score))}</p>\n"
            f"</div>\n"
        )
    if not items:
        _warn(f"Warning: Group {index} resulted in no items after length correction.")
        return ""
    # A group written although its scores are all equal (it teaches nothing; see ``ensure_scores_are_not_same``).
    uniform = " (scores all equal)" if group_data.get("scores_all_equal") else ""
    # No re-indentation: it would change the text inside <pre> blocks.
    return (
        "<details>\n"
        f"<summary>Group {index}{uniform}</summary>\n"
        '<div class="group-content">\n'
        f"{''.join(items)}"
        "</div>\n"
        "</details>\n"
    )


def _groups_html(input_path: Path) -> list[str]:
    groups: list[str] = []
    with open(input_path, encoding="utf-8") as f:
        for line_num, raw in enumerate(f, 1):
            line = raw.strip()
            if not line:
                continue
            try:
                data = json.loads(line)
            except json.JSONDecodeError:
                _warn(f"Warning: Skipping line {line_num}. Invalid JSON: {line[:100]}...")
                continue
            if not (isinstance(data, dict) and "messages" in data and "scores" in data):
                _warn(
                    f"Warning: Skipping line {line_num}. Invalid format (missing 'messages' or 'scores'): "
                    f"{line[:100]}..."
                )
                continue
            group_html = create_html_for_group(data, len(groups))
            if group_html:
                groups.append(group_html)
    return groups


def generate_html(input_path: str, output_path: str | None = None) -> None:
    """Write the HTML page for ``input_path`` to ``output_path`` (default: the input with a ``.html``
    suffix; parent directories are created) and print its absolute path.

    A missing input file or template, or an I/O error, prints a message to stderr and exits with status 1.
    """
    source = Path(input_path)
    if not source.is_file():
        _fail(f"Error: Input file not found: {source}")
    target = source.with_suffix(".html") if output_path is None else Path(output_path)

    try:
        template = TEMPLATE_FILE.read_text(encoding="utf-8")
    except FileNotFoundError:
        _fail(f"Error: Template file not found: {TEMPLATE_FILE}")
    except OSError as exc:
        _fail(f"Error reading template file {TEMPLATE_FILE}: {exc}")

    try:
        groups = _groups_html(source)
    except (OSError, UnicodeDecodeError) as exc:
        _fail(f"Error reading input file {source}: {exc}")

    if not groups:
        _warn("Warning: No valid groups found to render in the input file.")
    title = html.escape(f"Rendered Messages - {source.name}")
    try:
        page = template.format(title=title, groups_html="\n".join(groups) if groups else NO_DATA_HTML)
    except (KeyError, IndexError, ValueError) as exc:
        _fail(f"Error: Template file '{TEMPLATE_FILE}' is malformed or missing a placeholder: {exc}")

    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(page, encoding="utf-8")
    except OSError as exc:
        _fail(f"Error writing output file {target}: {exc}")
    print(f"Successfully generated HTML file: {target.absolute()}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m atroposlib.frontend.jsonl2html",
        description="Render scored groups from a JSONL file as a static HTML page.",
    )
    parser.add_argument("input_path", nargs="?", help="JSONL file of groups with 'messages' and 'scores'")
    parser.add_argument("output_path", nargs="?", help="HTML file to write (default: INPUT with .html)")
    # compat: the flag spellings of atroposlib 0.4.0's fire-based command line.
    parser.add_argument("--input_path", "--input-path", dest="input_flag", help=argparse.SUPPRESS)
    parser.add_argument("--output_path", "--output-path", dest="output_flag", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    input_path = args.input_flag or args.input_path
    output_path = args.output_flag or args.output_path
    if not input_path:
        parser.error("the input JSONL path is required")
    generate_html(input_path, output_path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
