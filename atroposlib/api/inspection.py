"""Read-only views of the state for ``GET /inspect/recent`` and ``GET /inspect/envs``."""

from __future__ import annotations

from typing import Any

import msgspec

from atroposlib.api.responses import dumps
from atroposlib.api.state import TrajectoryState
from atroposlib.api.store import GroupRow


def recent_groups(state: TrajectoryState, limit: int, env_id: int | None = None) -> bytes:
    """The newest received groups (at most ``limit``, newest first), never consuming anything.

    Only groups within the last ``inspect_history`` received are visible; ``env_id`` filters by env.
    """
    low = state.next_group_id - 1 - state.inspect_history
    picked: list[GroupRow] = []
    group_id = state.next_group_id - 1
    while group_id > low and group_id > 0 and len(picked) < limit:
        row = state.groups.get(group_id)
        if row is not None and (env_id is None or row.env_id == env_id):
            picked.append(row)
        group_id -= 1
    blobs = state.store.read_groups([r.group_id for r in picked])
    entries = []
    for row, blob in zip(picked, blobs, strict=True):
        env = state.env(row.env_id)
        entries.append(
            {
                "seq": row.group_id,
                "env_id": row.env_id,
                "env_name": env.real_name if env else None,
                "received_step": row.received_step,
                "received_at": row.received_at,
                "group": msgspec.Raw(blob),
            }
        )
    return dumps({"groups": entries, "current_step": state.meta.step})


def env_records(state: TrajectoryState) -> list[dict[str, Any]]:
    """One entry per registered env (disconnected ones included), by env id."""
    return [
        {
            "env_id": e.registered_id,
            "real_name": e.real_name,
            "desired_name": e.desired_name,
            "group_size": e.group_size,
            "max_context_len": e.max_context_len,
            "weight": e.weight,
            "connected": e.connected,
            "min_batch_allocation": e.min_batch_allocation,
        }
        for e in state.envs
    ]
