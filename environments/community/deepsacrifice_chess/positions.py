"""The positions of the DeepSacrifice environment, the policy's prompt and the judge's chat and verdict.

A position row has ``fen`` (the side to move is the policy's), optional ``moves`` (the SAN moves that led to
it, a list or one space-separated string) and ``name``. The judge's prompt follows the original's: rate the
move's aggression / brilliance from 1 to 10 and say whether a sacrifice is justified, as one JSON object.
"""

from __future__ import annotations

import json
import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Optional

import chess

from atroposlib.envs.data_loading import DatasetError, check_rows, seeded_split
from atroposlib.utils.replies import answer_section
from environments.community.deepsacrifice_chess.sacrifice import MoveAnalysis, analyse_move, reply_move

SYSTEM_PROMPT = (
    "You are DeepSacrifice, an aggressive attacking chess player. You prefer moves that attack the enemy "
    "king, captures and checks, and you sacrifice material when the attack justifies it.\n"
    "You may think before answering: put your reasoning inside <think> </think> tags. Then give exactly one "
    "move for the side to move inside <move> </move> tags, in standard algebraic notation, for example "
    "<move>Nxf7</move>."
)
JUDGE_SYSTEM = "You are a chess grandmaster evaluating move aggression, brilliance and sacrifices."
JUDGE_TEMPLATE = """Position before the move (FEN): {fen}
Moves so far: {history}
Move played by {side}: {san}
{material}

Evaluate the aggression or brilliance of this move from 1 (not aggressive) to 10 (extremely aggressive or
brilliant), and whether it is sound: a sacrifice is sound when the attack or position it gains justifies the
material; a move that gives nothing up is sound unless it blunders.
Respond ONLY with one JSON object, nothing else:
{{"score": <1-10>, "sound": <true or false>, "justification": "<one short sentence>"}}"""
_OBJECT = re.compile(r"[\[{].*[\]}]", re.DOTALL)


@dataclass(frozen=True)
class ChessPosition:
    """One position: its ``fen``, the SAN ``moves`` that led to it and a ``name``."""

    fen: str
    moves: tuple[str, ...] = ()
    name: str = ""


def _position(row: dict[str, Any], index: int, source: str) -> ChessPosition:
    try:
        board = chess.Board(str(row["fen"]))
    except ValueError as exc:
        raise DatasetError(f"{source}: row {index}: field 'fen' is not a FEN ({exc})") from None
    if not board.is_valid():
        raise DatasetError(f"{source}: row {index}: field 'fen' is not a legal position")
    if not any(board.legal_moves):
        raise DatasetError(f"{source}: row {index}: field 'fen' has no legal move (the game is over)")
    moves = row.get("moves") or ()
    if isinstance(moves, str):
        moves = moves.split()
    if not isinstance(moves, (list, tuple)) or not all(isinstance(m, str) for m in moves):
        raise DatasetError(f"{source}: row {index}: field 'moves' must be a list of SAN moves")
    return ChessPosition(board.fen(), tuple(moves), str(row.get("name") or ""))


def positions_from_rows(rows: Sequence[dict[str, Any]], source: str) -> list[ChessPosition]:
    """Positions of rows in the schema above; :class:`DatasetError` naming the source, row and field when
    ``fen`` is missing, not a legal position or one without a move, or ``moves`` is not a list of text."""
    check_rows(rows, ["fen"], source)
    return [_position(row, index, source) for index, row in enumerate(rows)]


def split_positions(positions: list[ChessPosition], seed: int) -> tuple[list, list]:
    """``(training, evaluation)`` positions: 80/20 after a shuffle seeded by ``seed`` (one position held out
    at least)."""
    return seeded_split(positions, seed)


def play(reply: str, position: ChessPosition) -> Optional[MoveAnalysis]:
    """The analysis of the reply's move on the position, or None for no, several or an illegal move."""
    board = chess.Board(position.fen)
    move = reply_move(board, answer_section(reply))
    return None if move is None else analyse_move(board, move)


def _side(board: chess.Board) -> str:
    return "White" if board.turn == chess.WHITE else "Black"


def policy_messages(position: ChessPosition) -> list[dict[str, str]]:
    """The policy's chat: the board, the side to move, the moves so far and the legal moves."""
    board = chess.Board(position.fen)
    legal = " ".join(sorted(board.san(m) for m in board.legal_moves))
    user = (
        f"You play {_side(board)}. Position (FEN): {position.fen}\n\n{board}\n\n"
        f"Moves so far: {' '.join(position.moves) or '(none given)'}\nLegal moves: {legal}\n\n"
        "Play the most aggressive sound move."
    )
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": user}]


def judge_messages(position: ChessPosition, move: MoveAnalysis, min_sacrifice: int) -> list[dict[str, str]]:
    """The judge's chat about ``move`` played in ``position`` (the policy's reply is never shown)."""
    board = chess.Board(position.fen)
    if move.offers >= min_sacrifice:
        material = f"The move gives up {move.offers} pawn(s) of material by exchange: it is a sacrifice."
    else:
        material = "The move gives up no material by exchange."
    user = JUDGE_TEMPLATE.format(
        fen=position.fen,
        history=" ".join(position.moves) or "(not given)",
        side=_side(board),
        san=move.san,
        material=material,
    )
    return [{"role": "system", "content": JUDGE_SYSTEM}, {"role": "user", "content": user}]


def parse_verdict(text: str) -> Optional[tuple[int, bool]]:
    """``(score, sound)`` of a judge's one JSON object (a ```json fence around it is fine; ``score`` a whole
    number 1-10 or its digits as text, ``sound`` true/false), or of a list holding just that object (the
    original's per-game answer); None for anything else, several objects included."""
    match = _OBJECT.search(text)
    if match is None:
        return None
    try:
        verdict = json.loads(match.group(0))
    except json.JSONDecodeError:
        return None
    if isinstance(verdict, list) and len(verdict) == 1:
        verdict = verdict[0]
    if not isinstance(verdict, dict):
        return None
    score, sound = verdict.get("score"), verdict.get("sound")
    if isinstance(score, str) and score.strip().isdigit():
        score = int(score.strip())
    if isinstance(score, bool) or not isinstance(score, int) or not 1 <= score <= 10:
        return None
    if not isinstance(sound, bool):
        return None
    return score, sound
