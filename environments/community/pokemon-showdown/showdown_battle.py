"""One side's view of a Showdown battle: the battle log and the server's ``|request|`` turned into state, the
legal choices of a request, and the text a model reads.

The battle log (``SIM-PROTOCOL.md``) tells what both sides did: switches, moves, damage in HP fractions,
faints, statuses, boosts, weather, fields and side conditions. The request tells this side's own team exactly
(HP, moves and their PP, what can be chosen). Move facts (power, accuracy, type) come from ``moves.json``
(Showdown's move table, keyed by move id).
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from showdown_protocol import to_id

MOVES_PATH = Path(__file__).with_name("moves.json")
_EVENT_LINES = {"move", "switch", "drag", "faint", "-damage", "-heal", "-status", "-supereffective", "-resisted",
                "-immune", "-crit", "-miss", "-fail", "-weather", "-sidestart", "-boost", "-unboost"}  # fmt: skip


class MoveTable:
    """Showdown's move facts by id: ``base_power``, ``describe`` (power, accuracy, type, category, priority)."""

    def __init__(self, path: Path = MOVES_PATH):
        self.moves: dict[str, list[Any]] = json.loads(Path(path).read_text())["moves"]

    def facts(self, move_id: str) -> Optional[list[Any]]:
        """``[basePower, accuracy or None (never misses), type, category, priority]``, or None when unknown.

        Some request ids carry the move's power (``hiddenpowerfire60``, ``return102``): those read as the base
        move with that power.
        """
        if move_id in self.moves:
            return self.moves[move_id]
        stem = move_id.rstrip("0123456789")
        base = "hiddenpower" if stem.startswith("hiddenpower") else stem
        if base not in self.moves or stem == move_id:
            return None
        return [int(move_id[len(stem) :]), *self.moves[base][1:]]

    def base_power(self, move_id: str) -> int:
        """The move's base power (0 for status moves and unknown ids)."""
        facts = self.facts(move_id)
        return int(facts[0]) if facts else 0

    def describe(self, move_id: str) -> str:
        facts = self.facts(move_id)
        if facts is None:
            return "unknown move"
        power, accuracy, kind, category, priority = facts
        hits = "always hits" if accuracy is None else f"accuracy {accuracy}%"
        text = f"{kind}, {category}, power {power}, {hits}"
        return text + (f", priority {priority:+d}" if priority else "")


@dataclass
class Choice:
    """A legal decision: what the model writes (``thunderbolt``, ``switch garchomp``) and what is sent."""

    name: str
    command: str  # "move 1" / "switch 3"
    is_move: bool


def legal_choices(request: dict[str, Any]) -> list[Choice]:
    """The decisions a ``|request|`` allows: usable moves (unless a switch is forced) and switches to
    healthy benched Pokémon (unless trapped). Empty for ``wait`` and team-preview requests."""
    if request.get("wait") or request.get("teamPreview"):
        return []
    choices: list[Choice] = []
    forced = any(request.get("forceSwitch") or [])
    active = (request.get("active") or [{}])[0]
    if not forced:
        for index, move in enumerate(active.get("moves") or [], start=1):
            if not move.get("disabled") and move.get("pp", 1) != 0:
                choices.append(Choice(move["id"], f"move {index}", True))
    if forced or not (active.get("trapped") or active.get("maybeTrapped")):
        for index, mon in enumerate(request["side"]["pokemon"], start=1):
            if not mon.get("active") and not mon["condition"].endswith("fnt"):
                choices.append(Choice(f"switch {to_id(_name(mon['ident']))}", f"switch {index}", False))
    return choices


def _name(ident: str) -> str:
    """``"p2a: Gyarados"`` -> ``"Gyarados"``."""
    return ident.split(":", 1)[1].strip() if ":" in ident else ident


def _side(ident: str) -> str:
    return ident[:2]


@dataclass
class Foe:
    """An opposing Pokémon as the log has shown it."""

    details: str
    hp: str = "100%"
    status: str = ""
    boosts: dict[str, int] = field(default_factory=dict)


@dataclass
class BattleView:
    """One side's state of a battle (see the module docstring); :meth:`apply` reads each log line."""

    side: str = ""  # "p1" / "p2", from the request
    request: Optional[dict[str, Any]] = None
    turn: int = 0
    weather: str = ""
    fields: set[str] = field(default_factory=set)
    conditions: dict[str, set[str]] = field(default_factory=lambda: {"p1": set(), "p2": set()})
    foes: dict[str, Foe] = field(default_factory=dict)
    foe_active: str = ""
    boosts: dict[str, int] = field(default_factory=dict)
    events: list[str] = field(default_factory=list)
    winner: Optional[str] = None
    tie: bool = False

    @property
    def over(self) -> bool:
        return self.winner is not None or self.tie

    def set_request(self, request: dict[str, Any]) -> None:
        self.request = request
        self.side = request.get("side", {}).get("id", self.side)

    def _who(self, ident: str) -> str:
        own = _side(ident) == self.side
        return f"{'Your' if own else 'The opposing'} {_name(ident)}"

    def apply(self, line: list[str]) -> None:
        """Update the state from one battle-log line (split at ``|``)."""
        kind, args = line[0], line[1:]
        if kind == "turn":
            self.turn = int(args[0])
        elif kind == "win":
            self.winner = args[0]
        elif kind == "tie":
            self.tie = True
        elif kind in ("switch", "drag", "replace") and len(args) >= 2:
            self._switch(args)
        elif kind == "faint" and _side(args[0]) != self.side and _name(args[0]) in self.foes:
            self.foes[_name(args[0])].hp = "fainted"
        elif kind in ("-damage", "-heal", "-sethp") and len(args) >= 2 and _side(args[0]) != self.side:
            self._foe(args[0]).hp = _percent(args[1])
        elif kind == "-status":
            self._set_status(args[0], args[1])
        elif kind == "-curestatus":
            self._set_status(args[0], "")
        elif kind in ("-boost", "-unboost") and len(args) >= 3:
            boosts = self.boosts if _side(args[0]) == self.side else self._foe(args[0]).boosts
            step = int(args[2]) * (1 if kind == "-boost" else -1)
            boosts[args[1]] = max(-6, min(6, boosts.get(args[1], 0) + step))
        elif kind == "-weather":
            self.weather = "" if args[0] == "none" else args[0]
        elif kind in ("-fieldstart", "-fieldend"):
            (self.fields.add if kind == "-fieldstart" else self.fields.discard)(args[0].replace("move: ", ""))
        elif kind in ("-sidestart", "-sideend") and len(args) >= 2:
            target = self.conditions.setdefault(_side(args[0]), set())
            (target.add if kind == "-sidestart" else target.discard)(args[1].replace("move: ", ""))
        if kind in _EVENT_LINES and args:
            self.events.append(self._event(kind, args))

    def _foe(self, ident: str) -> Foe:
        return self.foes.setdefault(_name(ident), Foe(_name(ident)))

    def _switch(self, args: list[str]) -> None:
        if _side(args[0]) == self.side:
            self.boosts = {}
            return
        foe = self._foe(args[0])
        foe.details, foe.boosts = args[1], {}
        if len(args) > 2:
            foe.hp = _percent(args[2])
        self.foe_active = _name(args[0])

    def _set_status(self, ident: str, status: str) -> None:
        if _side(ident) != self.side:
            self._foe(ident).status = status

    def _event(self, kind: str, args: list[str]) -> str:
        """One log line as a sentence for the model (own and opposing Pokémon told apart)."""
        if kind in ("-weather", "-sidestart"):
            return f"{kind[1:]}: {' '.join(a.replace('move: ', '') for a in args)}"
        who = self._who(args[0])
        what = args[1] if len(args) > 1 else "?"
        amount = args[2] if len(args) > 2 else "?"
        hp = _percent(what) if len(args) > 1 else "?"
        texts = {
            "move": f"{who} used {what}.",
            "switch": f"{who} came in.",
            "drag": f"{who} was dragged in.",
            "faint": f"{who} fainted.",
            "-damage": f"{who} was hurt ({hp} left)." if hp != "fainted" else f"{who} was hurt (no HP left).",
            "-heal": f"{who} healed ({hp}).",
            "-status": f"{who} got status {what}.",
            "-boost": f"{who}'s {what} rose by {amount}.",
            "-unboost": f"{who}'s {what} fell by {amount}.",
        }
        return texts.get(kind, f"{kind.lstrip('-')}: {who}")


def _percent(condition: str) -> str:
    """``"45/100 par"`` -> ``"45%"``; ``"0 fnt"`` -> ``"fainted"``; exact HP fractions as percentages."""
    value = condition.split()[0]
    if value == "0" or condition.endswith("fnt"):
        return "fainted"
    if "/" in value:
        now, full = value.split("/")
        return f"{round(100 * int(now) / int(full))}%"
    return value


def _boosts(boosts: dict[str, int]) -> str:
    shown = [f"{stat} {value:+d}" for stat, value in sorted(boosts.items()) if value]
    return f", boosts {' '.join(shown)}" if shown else ""


def render(view: BattleView, table: MoveTable, choices: list[Choice]) -> str:
    """The observation of a decision: field, what happened since the last decision, this side's team and
    moves, the opposing Pokémon seen so far, and the legal choices."""
    request = view.request or {}
    lines = [f"Turn {view.turn}." + (f" Weather: {view.weather}." if view.weather else "")]
    if view.fields:
        lines.append(f"Field: {', '.join(sorted(view.fields))}.")
    for side, label in ((view.side, "Your side"), (_other(view.side), "Opposing side")):
        if view.conditions.get(side):
            lines.append(f"{label}: {', '.join(sorted(view.conditions[side]))}.")
    if view.events:
        lines += ["Since your last decision:", *(f"- {event}" for event in view.events[-16:])]
    team = request.get("side", {}).get("pokemon", [])
    for mon in team:
        if mon.get("active"):
            lines.append(f"Your active Pokémon: {_describe_own(mon)}{_boosts(view.boosts)}")
    moves = (request.get("active") or [{}])[0].get("moves") or []
    if moves and not any(request.get("forceSwitch") or []):
        lines.append("Its moves:")
        for move in moves:
            pp = f"PP {move.get('pp', '?')}/{move.get('maxpp', '?')}"
            note = ", disabled" if move.get("disabled") else ""
            lines.append(f"- {move['id']}: {table.describe(move['id'])}, {pp}{note}")
    bench = [mon for mon in team if not mon.get("active")]
    if bench:
        lines += ["Your other Pokémon:", *(f"- {_describe_own(mon)}" for mon in bench)]
    for name, foe in view.foes.items():
        role = "Opposing active Pokémon" if name == view.foe_active else "Opposing Pokémon seen"
        status = f", status {foe.status}" if foe.status else ""
        lines.append(
            f"{role}: {foe.details}, HP {foe.hp}{status}{_boosts(foe.boosts) if name == view.foe_active else ''}"
        )
    if any(request.get("forceSwitch") or []):
        lines.append("Your active Pokémon fainted or must leave: choose a switch.")
    lines.append(f"Legal choices: {', '.join(choice.name for choice in choices)}")
    return "\n".join(lines)


def _other(side: str) -> str:
    return "p2" if side == "p1" else "p1"


def _describe_own(mon: dict[str, Any]) -> str:
    condition = mon.get("condition", "")
    parts = condition.split()
    hp = "fainted" if condition.endswith("fnt") else (parts[0] if parts else "?")
    status = f", status {parts[1]}" if len(parts) > 1 and parts[1] != "fnt" else ""
    item = f", item {mon['item']}" if mon.get("item") else ""
    ability = f", ability {mon['ability']}" if mon.get("ability") else ""
    return f"{mon.get('details', _name(mon.get('ident', '?')))} (id {to_id(_name(mon.get('ident', '')))}), HP {hp}{status}{item}{ability}"
