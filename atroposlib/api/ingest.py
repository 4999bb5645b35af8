"""What the ingest routes and ``/batch`` do once a body is read: queue decoded groups, serve a batch.

The functions return response bodies and raise :class:`~atroposlib.api.errors.InvalidRequest`,
:class:`~atroposlib.api.records.QueueFull` or a storage error, which the app's exception handlers
answer (422, 503 with ``Retry-After``).
"""

from __future__ import annotations

import logging
import time
from typing import Any

from atroposlib.api.admission import check_groups
from atroposlib.api.decode import Group
from atroposlib.api.logs import event
from atroposlib.api.metrics import ApiMetrics
from atroposlib.api.records import NOT_REGISTERED_MESSAGE, NotRegistered
from atroposlib.api.state import TrajectoryState

logger = logging.getLogger("atroposlib.api")

NULL_BATCH = b'{"batch":null}'


def admit(
    state: TrajectoryState, metrics: ApiMetrics, groups: list[Group], started: float, *, in_list: bool
) -> dict[str, Any]:
    """Check ``groups`` against the registration and queue them, all or nothing.

    Returns the ``/scored_data`` answer (``received`` or ``buffered`` with ``buffer_size``) or, with
    ``in_list``, the ``/scored_data_list`` one (``groups_processed``, plus ``buffered`` and
    ``last_buffer_size`` when any group was buffered).
    """
    check_groups(groups, state.admission_rules(), in_list=in_list)
    results = state.ingest(groups) if groups else []
    metrics.ingest_latency.observe(time.perf_counter() - started)
    if not in_list:
        return results[0]
    response: dict[str, Any] = {"status": "received", "groups_processed": len(groups)}
    buffered = [r for r in results if r["status"] == "buffered"]
    if buffered:
        response["buffered"] = len(buffered)
        response["last_buffer_size"] = buffered[-1]["buffer_size"]
    return response


def serve_batch(state: TrajectoryState, metrics: ApiMetrics) -> bytes:
    """``GET /batch``: the next batch, ``{"batch":null}``, or the not-registered error body (all 200)."""
    started = time.perf_counter()
    try:
        served = state.next_batch()
    except NotRegistered:
        return b'{"status":"error","message":"%s","batch":[]}' % NOT_REGISTERED_MESSAGE.encode()
    if served is None:
        return NULL_BATCH
    metrics.batch_latency.observe(time.perf_counter() - started)
    event(
        logger,
        logging.INFO,
        f"Sending batch of {served.sequences} sequences",
        batch_id=served.batch_id,
        groups=served.groups,
        step=state.meta.step,
    )
    return served.body
