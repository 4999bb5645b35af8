"""Per-reply training shares (0/1 or fractional values) logged with each wandb log.

:class:`TrainShares` goes before the environment's base class: :meth:`TrainShares.record_share` collects values
under a name, and each ``wandb_log`` logs their mean as ``train/<name>`` and starts over.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any, Optional

from atroposlib.envs.reporting import mean


class TrainShares:
    """Collects values per name between wandb logs (see the module docstring)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._shares: dict[str, list[float]] = {}

    def record_share(self, name: str, values: Iterable[float]) -> None:
        """Add ``values`` to those logged as ``train/<name>``."""
        self._shares.setdefault(name, []).extend(float(v) for v in values)

    def share_metrics(self) -> dict[str, float]:
        """The mean of each name's values since the last log, as ``train/<name>``, then start over."""
        metrics = {f"train/{name}": mean(values) for name, values in self._shares.items() if values}
        self._shares = {}
        return metrics

    async def wandb_log(self, wandb_metrics: Optional[dict] = None) -> None:
        await super().wandb_log({**(wandb_metrics or {}), **self.share_metrics()})  # type: ignore[misc]
