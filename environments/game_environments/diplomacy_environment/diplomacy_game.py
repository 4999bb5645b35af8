"""Standard-map Diplomacy on the ``diplomacy`` engine: the board as text, orders, opponents, the score.

The engine (``pip install diplomacy``) adjudicates everything. Orders are the engine's own strings
(``A PAR - BUR``, ``F BRE S A PAR - PIC``, ``A MUN H``, ``F LON B``); an order the engine cannot carry out
is dropped by the engine and that unit holds, exactly as in a game on the engine's own server.
"""

from __future__ import annotations

import random
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Optional

from diplomacy import Game

POWERS = ("AUSTRIA", "ENGLAND", "FRANCE", "GERMANY", "ITALY", "RUSSIA", "TURKEY")
STARTING_SUPPLY_CENTERS = {power: 4 if power == "RUSSIA" else 3 for power in POWERS}
_ORDER_SPLIT = re.compile(r"[;\n]")
_SPACES = re.compile(r"\s+")
_PHASE_KINDS = {"M": "movement", "R": "retreats", "A": "adjustments"}


def normalize_order(text: str) -> str:
    """One order in the engine's spelling: upper case, single spaces."""
    return _SPACES.sub(" ", text.strip()).upper()


def split_orders(text: str) -> list[str]:
    """The orders of a move text: separated by ``;`` or new lines, normalised, blanks dropped."""
    return [order for part in _ORDER_SPLIT.split(text) if (order := normalize_order(part))]


def phase_year(phase: str) -> Optional[int]:
    """The year of an engine phase name (``S1901M`` -> 1901); None for ``COMPLETED`` or other names."""
    found = re.fullmatch(r"[SFW](\d{4})[MRA]", phase)
    return int(found.group(1)) if found else None


def orderable(game: Game, power: str) -> dict[str, list[str]]:
    """``{location: the engine's possible orders there}`` for the power's units that must order now."""
    possible = game.get_all_possible_orders()
    return {loc: sorted(possible[loc]) for loc in game.get_orderable_locations(power) if possible.get(loc)}


def submit_orders(game: Game, power: str, orders: list[str]) -> list[str]:
    """Give ``orders`` to the engine for ``power``; the orders it rejected (those units hold)."""
    game.set_orders(power, orders)
    kept = {normalize_order(o) for o in game.get_orders(power)}
    return [order for order in orders if order not in kept]


def random_orders(game: Game, power: str, rng: random.Random) -> list[str]:
    """One order drawn uniformly from the engine's possible orders at each location the power must order."""
    return [rng.choice(choices) for _, choices in sorted(orderable(game, power).items())]


def centre_counts(game: Game) -> dict[str, int]:
    """Supply centres owned by each power."""
    return {power: len(game.get_power(power).centers) for power in POWERS}


def winner(game: Game) -> Optional[str]:
    """The power that won (a solo: the engine's victory condition), else None."""
    if game.is_game_done and len(game.outcome) == 2:
        return str(game.outcome[1])
    return None


def render_board(game: Game, power: str) -> str:
    """The observation of ``power``: phase, every power's centres and units, and its own orderable units
    with each unit's possible orders."""
    phase = game.get_current_phase()
    kind = _PHASE_KINDS.get(phase[-1:], "")
    lines = [f"Phase: {phase} ({kind}). You are {power}."]
    for other in POWERS:
        state = game.get_power(other)
        lines.append(
            f"{other}{' (you)' if other == power else ''}: {len(state.centers)} centres "
            f"[{' '.join(sorted(state.centers))}]; units: {', '.join(sorted(state.units)) or 'none'}"
        )
    choices = orderable(game, power)
    if kind == "adjustments":
        delta = len(game.get_power(power).centers) - len(game.get_power(power).units)
        lines.append(f"Adjustments: you may {'build' if delta > 0 else 'must disband'} {abs(delta)} unit(s).")
    lines.append("Possible orders, by location:")
    lines.extend(f"- {loc}: {' | '.join(options)}" for loc, options in sorted(choices.items()))
    lines.append("Your orders?")
    return "\n".join(lines)


@dataclass(frozen=True)
class ScoreWeights:
    """How a game's result becomes a score (see :func:`game_score`)."""

    supply_center_weight: float = 1.0
    survival_bonus: float = 0.1
    win_bonus: float = 5.0


def game_score(
    centres: Mapping[str, int], phases_played: int, won_by: Optional[str], power: str, weights: ScoreWeights
) -> float:
    """``(centres - starting centres) * supply_center_weight + survival_bonus * phases played
    + win_bonus`` when ``power`` won."""
    gained = (centres.get(power, 0) - STARTING_SUPPLY_CENTERS[power]) * weights.supply_center_weight
    return gained + weights.survival_bonus * phases_played + (weights.win_bonus if won_by == power else 0.0)


def game_summary(game: Game) -> dict[str, Any]:
    """What a finished (or stopped) game leaves: phases played, centres, winner."""
    return {
        "phases_played": len(game.get_phase_history()),
        "final_centers": centre_counts(game),
        "winner": winner(game),
        "last_phase": game.get_current_phase(),
    }
