"""Reading the move of a reply.

A reply may open with ``<think>...</think>``; nothing inside it counts. The rest must be one JSON object and
nothing else (a fenced ```json block around it is fine)::

    {"action_type": "move_object", "object_id": "red_cube", "target_position": [x, y, z]}

Keys in any order, coordinates JSON numbers (integers or decimals), finite and within ``WORLD_LIMIT`` of the
origin. No move: an empty reply, prose around the object, several objects (a hedge), a move of another object,
another ``action_type``, coordinates as strings, a repeated key, a move only inside the reasoning.
"""

from __future__ import annotations

import math
import re
from typing import Any, Optional

from atroposlib.utils.replies import answer_section
from atroposlib.utils.tool_calls import ToolCallError, load_json

#: Coordinates beyond this are outside the simulated world.
WORLD_LIMIT = 1000.0
_FENCE = re.compile(r"^```[ \t]*(?:json)?[ \t]*\n?(.*?)\n?```$", re.DOTALL | re.IGNORECASE)


def _position(value: Any) -> Optional[tuple[float, float, float]]:
    if not isinstance(value, list) or len(value) != 3:
        return None
    if not all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in value):
        return None
    if not all(math.isfinite(v) and abs(v) <= WORLD_LIMIT for v in value):
        return None
    return (float(value[0]), float(value[1]), float(value[2]))


def parse_move(reply: str, object_id: str) -> Optional[tuple[float, float, float]]:
    """The target position of the one move of ``object_id`` in ``reply`` (see the module), or None."""
    section = answer_section(reply)
    if section is None:
        return None
    text = section.strip()
    fenced = _FENCE.match(text)
    if fenced:
        text = fenced.group(1).strip()
    try:
        action = load_json(text)
    except ToolCallError:
        return None
    if not isinstance(action, dict) or set(action) != {"action_type", "object_id", "target_position"}:
        return None
    if action["action_type"] != "move_object" or action["object_id"] != object_id:
        return None
    return _position(action["target_position"])
