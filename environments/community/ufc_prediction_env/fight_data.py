"""UFC fights and fighter statistics: reading the two CSV files and writing a fighter's statistics card.

The fights file has one row per fight with ``r_fighter`` and ``b_fighter`` (the red and blue corners' names)
and ``winner`` (``Red`` or ``Blue``); further columns are ignored. Fights without a winner (a draw or no
contest: ``winner`` empty, ``Draw``, ``NC`` or ``No Contest``) have nothing to predict and are left out.
The statistics file has one row per fighter keyed by ``name``; the columns of :data:`STAT_LINES` are shown
when present and ``?`` otherwise, and a fighter without a row is shown as having no statistics.
"""

from __future__ import annotations

import math
import os
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from atroposlib.envs.data_loading import DatasetError, check_rows, read_local_rows

#: Where the original's sample files live (its folder of NousResearch/atropos).
ORIGINAL_DATA_URL = (
    "https://raw.githubusercontent.com/NousResearch/atropos/main/environments/community/ufc_prediction_env"
)
CORNERS = ("Red", "Blue")
NO_WINNER = {"", "draw", "nc", "no contest"}
#: The statistics card's lines: (label, column, unit) for each value.
STAT_LINES: tuple[tuple[tuple[str, str, str], ...], ...] = (
    (("Wins", "wins", ""), ("Losses", "losses", ""), ("Age", "age", "")),
    (
        ("Height", "height", " cm"),
        ("Weight", "weight", " kg"),
        ("Reach", "reach", " cm"),
        ("Stance", "stance", ""),
    ),
    (
        ("SLpM", "SLpM", ""),
        ("Sig Str Acc", "sig_str_acc", ""),
        ("SApM", "SApM", ""),
        ("Str Def", "str_def", ""),
    ),
    (
        ("TD Avg", "td_avg", ""),
        ("TD Acc", "td_acc", ""),
        ("TD Def", "td_def", ""),
        ("Sub Avg", "sub_avg", ""),
    ),
)


@dataclass(frozen=True)
class Fight:
    """A fight to predict: the corners' names, their statistics cards and the winning corner."""

    red: str
    blue: str
    red_card: str
    blue_card: str
    winner: str  # "Red" or "Blue"

    @property
    def winner_name(self) -> str:
        """The winning fighter's name."""
        return self.red if self.winner == "Red" else self.blue


def _shown(value: Any) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)) or str(value).strip() == "":
        return "?"
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return str(value).strip()


def stats_card(name: str, stats: Mapping[str, Any] | None) -> str:
    """The statistics card of a fighter shown in the prompt (name first, one line per group of values)."""
    if not stats:
        return f"{name}: (No stats available)"
    lines = [f"Name: {name}"]
    for group in STAT_LINES:
        shown = [(label, _shown(stats.get(column)), unit) for label, column, unit in group]
        lines.append("  ".join(f"{label}: {v}{unit if v != '?' else ''}" for label, v, unit in shown))
    return "\n".join(lines)


def original_file(name: str, folder: Path) -> str:
    """The original's data file ``name``: ``folder/name`` when it is there, else a copy downloaded once from
    :data:`ORIGINAL_DATA_URL` into ``$UFC_DATA_CACHE_DIR`` (default ``~/.cache/ufc_prediction_env``).

    Raises :class:`DatasetError` (one line) when the download fails.
    """
    if (folder / name).is_file():
        return str(folder / name)
    cache = Path(os.environ.get("UFC_DATA_CACHE_DIR", Path.home() / ".cache" / "ufc_prediction_env"))
    target = cache / name
    if not target.is_file():
        url = f"{ORIGINAL_DATA_URL}/{name}"
        cache.mkdir(parents=True, exist_ok=True)
        partial = target.with_suffix(".part")
        try:
            urllib.request.urlretrieve(url, partial)
        except Exception as exc:  # no network, moved file: say what to pass instead
            raise DatasetError(
                f"{url}: cannot download the original's {name} ({exc}); pass --env.dataset_path FILE "
                "and --env.fighter_stats_path FILE"
            ) from None
        partial.replace(target)  # never leave a half-written file under the final name
    return str(target)


def load_fighter_stats(path: str) -> dict[str, dict[str, Any]]:
    """Rows of the statistics file by fighter name; :class:`DatasetError` for a row without ``name``."""
    rows = read_local_rows(path)
    check_rows(rows, ["name"], path)
    return {str(row["name"]).strip(): row for row in rows}


def load_fights(path: str, stats: Mapping[str, Mapping[str, Any]]) -> list[Fight]:
    """The fights of ``path`` with a winner; :class:`DatasetError` naming the row and field for a missing
    corner or winner, or a winner other than a corner or a no-winner value."""
    rows = read_local_rows(path)
    check_rows(rows, ["r_fighter", "b_fighter"], path)
    fights = []
    for index, row in enumerate(rows):
        red, blue = str(row["r_fighter"]).strip(), str(row["b_fighter"]).strip()
        if not red or not blue or red == blue:
            raise DatasetError(
                f"{path}: row {index}: fields 'r_fighter'/'b_fighter' need two different names"
            )
        winner = _shown(row.get("winner"))
        if winner.lower() in NO_WINNER or winner == "?":
            continue
        if winner.capitalize() not in CORNERS:
            raise DatasetError(f"{path}: row {index}: field 'winner' must be Red or Blue: {winner!r}")
        fights.append(
            Fight(
                red,
                blue,
                stats_card(red, stats.get(red)),
                stats_card(blue, stats.get(blue)),
                winner.capitalize(),
            )
        )
    if not fights:
        raise DatasetError(f"{path}: no fight with a winner")
    return fights
