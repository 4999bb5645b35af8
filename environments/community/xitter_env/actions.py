"""Reading one Xitter action from a reply.

A reply may open with ``<think>...</think>``; nothing inside it counts. The rest must be exactly one action
on one line (surrounding quotes or backticks are dropped, the verb's case does not matter):

* ``POST <text>``;
* ``LIKE <post_id>``;
* ``COMMENT <post_id> <text>``;
* ``DO_NOTHING``.

Anything else is no action: an empty reply, prose around the action, several lines holding actions (a
hedge), a verb without its arguments.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

from atroposlib.utils.replies import answer_section

_ACTION = re.compile(
    r"^(?:(?P<post>POST)\s+(?P<post_text>\S.*)"
    r"|(?P<like>LIKE)\s+(?P<like_id>\S+)"
    r"|(?P<comment>COMMENT)\s+(?P<comment_id>\S+)\s+(?P<comment_text>\S.*)"
    r"|(?P<nothing>DO_NOTHING))$",
    re.IGNORECASE,
)
_QUOTES = "\"'`"


@dataclass(frozen=True)
class Action:
    """An action: ``kind`` (``post``, ``like``, ``comment`` or ``do_nothing``), the post it targets and its
    text (empty where the kind has none)."""

    kind: str
    post_id: str = ""
    text: str = ""


def parse_action(reply: str) -> Optional[Action]:
    """The one action of ``reply`` (see the module docstring), or None."""
    section = answer_section(reply)
    if section is None:
        return None
    lines = [line.strip().strip(_QUOTES).strip() for line in section.strip().splitlines() if line.strip()]
    if len(lines) != 1:
        return None
    match = _ACTION.match(lines[0])
    if match is None:
        return None
    if match["post"]:
        return Action("post", text=match["post_text"].strip())
    if match["like"]:
        return Action("like", post_id=match["like_id"])
    if match["comment"]:
        return Action("comment", post_id=match["comment_id"], text=match["comment_text"].strip())
    return Action("do_nothing")
