"""Reading a chess move from a reply and measuring what it gives up, with the ``chess`` package.

:func:`reply_move` reads the one move of a reply (``<move>...</move>`` after the reasoning, in SAN or UCI);
:func:`analyse_move` says whether the move mates, checks, captures, and how much material it offers: the
static exchange on its destination square (the opponent captures with its least valuable attacker, each side
stopping when a capture would lose) on the square of each of the mover's pieces after the move, the largest
of these net of what the move itself captured. A move offering at least one pawn of material is a sacrifice:
a piece moved where it can be taken, or one left hanging elsewhere (the queen left to a pin, a gambit pawn).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Optional

import chess

#: material in pawns; the king never leaves the board
PIECE_VALUES = {chess.PAWN: 1, chess.KNIGHT: 3, chess.BISHOP: 3, chess.ROOK: 5, chess.QUEEN: 9, chess.KING: 0}
_MOVE = re.compile(r"<move>(.*?)</move>", re.DOTALL | re.IGNORECASE)


@dataclass(frozen=True)
class MoveAnalysis:
    """What one legal move does: its ``san``, whether it ``mates``, ``checks`` or ``captures``, and the
    material it ``offers`` (the most pawns the opponent wins by one exchange sequence against the mover's
    pieces beyond what the move captured; 0 when none)."""

    san: str
    mates: bool
    checks: bool
    captures: bool
    offers: int

    def is_sacrifice(self, threshold: int = 1) -> bool:
        """Whether the move offers at least ``threshold`` pawns of material."""
        return self.offers >= threshold


def parse_move(board: chess.Board, text: str) -> Optional[chess.Move]:
    """The legal move ``text`` names on ``board`` (SAN such as ``Nxf7+``, or UCI such as ``g5f7``), or None."""
    text = text.strip().rstrip("!?")
    if not text:
        return None
    try:
        return board.parse_san(text)
    except ValueError:
        pass
    try:
        move = chess.Move.from_uci(text.lower())
    except ValueError:
        return None
    return move if move in board.legal_moves else None


def reply_move(board: chess.Board, answer: Optional[str]) -> Optional[chess.Move]:
    """The move of a reply's answer section (the text after its reasoning; None when that is malformed): its
    ``<move>`` tags must all name the same legal move (in any notation); None for no tags, an illegal or
    unreadable move, or different moves."""
    if answer is None:
        return None
    moves = [parse_move(board, text) for text in _MOVE.findall(answer)]
    if not moves or any(m is None for m in moves) or len(set(moves)) != 1:
        return None
    return moves[0]


def _value_on(board: chess.Board, square: chess.Square) -> int:
    piece = board.piece_at(square)
    return PIECE_VALUES[piece.piece_type] if piece else 0


def exchange_gain(board: chess.Board, square: chess.Square) -> int:
    """Pawns the side to move wins by capturing on ``square`` with its least valuable attacker and letting
    the exchange go on while captures pay (0 when capturing does not pay or is impossible)."""
    captures = [m for m in board.legal_moves if m.to_square == square and board.is_capture(m)]
    if not captures:
        return 0
    move = min(captures, key=lambda m: (PIECE_VALUES[board.piece_type_at(m.from_square)], m.uci()))
    taken = _value_on(board, square)
    if board.is_en_passant(move):
        taken = PIECE_VALUES[chess.PAWN]
    board.push(move)
    try:
        return max(0, taken - exchange_gain(board, square))
    finally:
        board.pop()


def analyse_move(board: chess.Board, move: chess.Move) -> MoveAnalysis:
    """The :class:`MoveAnalysis` of the legal ``move`` on ``board`` (left unchanged)."""
    san = board.san(move)
    captured = PIECE_VALUES[chess.PAWN] if board.is_en_passant(move) else _value_on(board, move.to_square)
    after = board.copy(stack=False)
    after.push(move)
    mover = board.turn
    squares = [sq for sq in chess.SQUARES if after.color_at(sq) == mover]
    lost = 0 if after.is_checkmate() else max((exchange_gain(after, sq) for sq in squares), default=0)
    return MoveAnalysis(
        san=san,
        mates=after.is_checkmate(),
        checks=after.is_check(),
        captures=board.is_capture(move),
        offers=max(0, lost - captured),
    )
