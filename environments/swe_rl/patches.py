"""SEARCH/REPLACE edits as SWE-RL scores them: parsed from a reply, applied to the files of the issue's code
context, turned into a unified diff and compared with the gold patch by ``difflib.SequenceMatcher``.

The reward follows the SWE-RL paper (Wei et al., 2025, arXiv:2502.18449): -1 when the reply has no well-formed
edits (no ``### path`` / ``<<<<<<< SEARCH`` / ``=======`` / ``>>>>>>> REPLACE`` block, a block cut short, an edit
of a file the context does not show, a SEARCH text not found in its file once the edits before it are made, or a malformed
think block); otherwise
the similarity ratio in [0, 1] between the diff the edits make and the gold patch (1.0 = the same change).

Code contexts are read in the SWE-bench "oracle" form: each file between ``[start of PATH]`` and
``[end of PATH]``, every line led by its line number. A context without such blocks (any other form) has no files
to apply edits to; then the edits themselves, written back in canonical form, are compared with the gold patch,
as the original environment does for every context.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass
from typing import Optional

from atroposlib.utils.replies import answer_section

MALFORMED = -1.0
_FILE_BLOCK = re.compile(r"^\[start of (?P<path>[^\]\n]+)\]\n(?P<body>.*?)^\[end of (?P=path)\]", re.M | re.S)
_NUMBERED = re.compile(r"^\d+ ?")


@dataclass(frozen=True)
class Edit:
    """One SEARCH/REPLACE edit of the file at ``path``."""

    path: str
    search: str
    replace: str


def parse_edits(text: str) -> Optional[list[Edit]]:
    """The SEARCH/REPLACE edits of ``text``, or None when there are none or one is cut short.

    An edit is a ``### path`` line, ``<<<<<<< SEARCH``, lines, ``=======``, lines, ``>>>>>>> REPLACE``; text
    around the edits (code fences, explanations) is ignored, as SWE-RL's parser does.
    """
    lines = [line.rstrip("\r") for line in text.splitlines()]
    edits: list[Edit] = []

    def until(marker: str, start: int) -> Optional[int]:
        for position in range(start, len(lines)):
            if lines[position].strip() == marker:
                return position
        return None

    index = 0
    while index < len(lines) - 1:
        line = lines[index].strip()
        if not (
            line.startswith("### ") and line[4:].strip() and lines[index + 1].strip() == "<<<<<<< SEARCH"
        ):
            index += 1
            continue
        divider = until("=======", index + 2)
        end = until(">>>>>>> REPLACE", divider + 1) if divider is not None else None
        if end is None:
            return None
        search, replace = lines[index + 2 : divider], lines[divider + 1 : end]
        edits.append(Edit(line[4:].strip(), "\n".join(search), "\n".join(replace)))
        index = end + 1
    return edits or None


def context_files(code_context: str) -> dict[str, str]:
    """The files of a SWE-bench oracle context (``[start of PATH]`` ... ``[end of PATH]``, numbered lines),
    path -> text without the line numbers; empty when the context has no such blocks."""
    files = {}
    for match in _FILE_BLOCK.finditer(code_context):
        body = match.group("body")
        files[match.group("path").strip()] = "".join(
            _NUMBERED.sub("", line, count=1) for line in body.splitlines(keepends=True)
        )
    return files


def canonical_edits(edits: list[Edit]) -> str:
    """The edits written back in the SEARCH/REPLACE form, one block after another."""
    blocks = []
    for edit in edits:
        blocks += [
            f"### {edit.path}",
            "<<<<<<< SEARCH",
            edit.search,
            "=======",
            edit.replace,
            ">>>>>>> REPLACE",
        ]
    return "\n".join(blocks)


def apply_edits(files: dict[str, str], edits: list[Edit]) -> Optional[dict[str, str]]:
    """The files after the edits, in order (each replaces the first occurrence of its SEARCH text), or None
    when an edit names a file not shown or its SEARCH text is empty or not in the file."""
    changed = dict(files)
    for edit in edits:
        text = changed.get(edit.path)
        if text is None or not edit.search.strip():
            return None
        search, replace = edit.search, edit.replace
        if search not in text:
            return None
        changed[edit.path] = text.replace(search, replace, 1)
    return changed


def unified_patch(before: dict[str, str], after: dict[str, str]) -> str:
    """A git-style unified diff (``diff --git a/PATH b/PATH`` headers) of every file that changed."""
    parts = []
    for path in sorted(before):
        if before[path] == after[path]:
            continue
        diff = difflib.unified_diff(
            before[path].splitlines(keepends=True),
            after[path].splitlines(keepends=True),
            fromfile=f"a/{path}",
            tofile=f"b/{path}",
        )
        parts.append(f"diff --git a/{path} b/{path}\n" + "".join(diff))
    return "".join(parts)


def predicted_patch(reply: str, code_context: str) -> Optional[str]:
    """The patch a reply's edits make to its context (see the module docstring), or None when malformed."""
    section = answer_section(reply)
    edits = parse_edits(section) if section is not None else None
    if edits is None:
        return None
    files = context_files(code_context)
    if not files:
        return canonical_edits(edits)
    after = apply_edits(files, edits)
    return unified_patch(files, after) if after is not None else None


def similarity(predicted: str, gold: str) -> float:
    """SWE-RL's reward of a well-formed patch: ``SequenceMatcher(None, gold, predicted).ratio()``."""
    return difflib.SequenceMatcher(None, gold, predicted, autojunk=False).ratio()


def patch_reward(reply: str, code_context: str, gold_patch: str) -> float:
    """-1 for a malformed reply, else the similarity of its patch to ``gold_patch``."""
    patch = predicted_patch(reply, code_context)
    return MALFORMED if patch is None else similarity(patch, gold_patch)
