"""Building one group out of single scored rollouts (used by the default ``collect_trajectories``).

Pure function, no I/O: the caller logs the returned notes.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from atroposlib.group import ITEM_FIELDS, REQUIRED, ScoredDataGroup

#: Per-rollout optional keys copied into the group as one list entry per sequence (``group_overrides``
#: dicts are merged instead).
ITEM_SEQUENCE_KEYS = tuple(name for name in ITEM_FIELDS if name not in REQUIRED and name != "group_overrides")


def assemble_group(items: Sequence[Any]) -> tuple[ScoredDataGroup | None, list[str]]:
    """Combine ``ScoredDataItem`` dicts into one ``ScoredDataGroup``.

    * ``None`` entries (a rollout that was skipped) are dropped; a rollout that is not a mapping or lacks
      ``tokens``/``masks``/``scores`` is dropped with a note.
    * ``tokens``, ``masks``, ``scores`` become per-sequence lists.
    * Each optional per-sequence key (:data:`ITEM_SEQUENCE_KEYS`) is a list when every kept rollout supplied
      it, ``None`` when none did; when only some did it is set to ``None`` with a note, because a partial
      list would no longer line up with the sequences.
    * ``group_overrides`` dicts are merged (later rollouts win); ``None`` when no rollout gave any.
    * Other keys of a rollout (e.g. ``finish_reason``) are ignored.

    Returns ``(group, notes)``; ``group`` is ``None`` when no rollout was usable.
    """
    notes: list[str] = []
    kept: list[Mapping[str, Any]] = []
    for index, item in enumerate(items):
        if item is None:
            continue
        if not isinstance(item, Mapping):
            notes.append(f"rollout {index} is a {type(item).__name__}, not a ScoredDataItem dict; skipped")
            continue
        missing = [k for k in REQUIRED if item.get(k) is None]
        if missing:
            notes.append(f"rollout {index} lacks {', '.join(missing)}; skipped")
            continue
        kept.append(item)
    if not kept:
        return None, notes

    group = ScoredDataGroup({key: [item[key] for item in kept] for key in REQUIRED})
    for key in ITEM_SEQUENCE_KEYS:
        values = [item.get(key) for item in kept]
        present = sum(v is not None for v in values)
        if present == len(values):
            group[key] = values
        else:
            group[key] = None
            if present:
                notes.append(
                    f"only {present} of {len(values)} rollouts set {key!r}; dropped it for the group"
                )
    merged: dict[str, Any] = {}
    for item in kept:
        overrides = item.get("group_overrides")
        if isinstance(overrides, Mapping):
            merged.update(overrides)
    group["group_overrides"] = merged or None
    return group, notes


__all__ = ["ITEM_SEQUENCE_KEYS", "assemble_group"]
