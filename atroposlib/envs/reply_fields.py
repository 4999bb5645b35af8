"""Per-reply fields in a single-turn environment's evaluation samples.

:class:`ReplyFields` goes before :class:`~atroposlib.envs.single_turn.SingleTurnEnv` in an environment's
bases; its :meth:`ReplyFields.reply_fields` returns fields read from an evaluation reply (the query or
pattern it gave, whether that ran, ...), which are written with the sample to ``samples.jsonl`` and are there
for ``extra_eval_metrics``.
"""

from __future__ import annotations

import asyncio
from typing import Any, Optional


class ReplyFields:
    """Adds :meth:`reply_fields` of each evaluation reply to its sample."""

    def reply_fields(self, reply: str, item: Any) -> dict[str, Any]:
        """Fields of the evaluation ``reply`` to ``item`` (default none)."""
        return {}

    async def _eval_one(self, item: Any, sem: asyncio.Semaphore) -> Optional[dict[str, Any]]:
        sample = await super()._eval_one(item, sem)  # type: ignore[misc]
        if sample is not None:
            sample.update(self.reply_fields(sample["messages"][-1]["content"], item))
        return sample
