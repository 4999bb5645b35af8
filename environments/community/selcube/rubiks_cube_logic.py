"""A 3x3 Rubik's cube simulator: 54 stickers, the 18 face turns in standard notation, scrambles and progress.

Geometry: the cube spans ``-1..1`` on each axis with U on ``+y``, D ``-y``, R ``+x``, L ``-x``, F ``+z`` and
B ``-z``. A sticker is a cubie position and the normal of the face it shows. A face turn rotates every
sticker of that layer by 90 degrees clockwise as seen looking at the face (``R``: the front's right column
moves up to the top); ``X'`` turns counterclockwise and ``X2`` half a turn. The turns are permutations
of sticker indices, computed once from this geometry.

Faces are read row by row as seen from outside: U with F at the bottom, D with F at the top, the four
side faces with U on top. Solved colours: U white, D yellow, F green, B blue, R red, L orange.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

Vec = tuple[int, int, int]
FACES = "URFDLB"
COLOURS = {"U": "W", "R": "R", "F": "G", "D": "Y", "L": "O", "B": "B"}
MOVES = tuple(f + s for f in "UDLRFB" for s in ("", "'", "2"))
_NORMAL: dict[str, Vec] = {
    "U": (0, 1, 0),
    "D": (0, -1, 0),
    "R": (1, 0, 0),
    "L": (-1, 0, 0),
    "F": (0, 0, 1),
    "B": (0, 0, -1),
}
# (right, down) reading directions of each face, seen from outside
_READING: dict[str, tuple[Vec, Vec]] = {
    "U": ((1, 0, 0), (0, 0, 1)),
    "D": ((1, 0, 0), (0, 0, -1)),
    "F": ((1, 0, 0), (0, -1, 0)),
    "B": ((-1, 0, 0), (0, -1, 0)),
    "R": ((0, 0, -1), (0, -1, 0)),
    "L": ((0, 0, 1), (0, -1, 0)),
}


def _add(*vectors: Vec) -> Vec:
    return (sum(v[0] for v in vectors), sum(v[1] for v in vectors), sum(v[2] for v in vectors))


def _scale(v: Vec, k: int) -> Vec:
    return (v[0] * k, v[1] * k, v[2] * k)


def _dot(a: Vec, b: Vec) -> int:
    return a[0] * b[0] + a[1] * b[1] + a[2] * b[2]


def _cross(a: Vec, b: Vec) -> Vec:
    return (a[1] * b[2] - a[2] * b[1], a[2] * b[0] - a[0] * b[2], a[0] * b[1] - a[1] * b[0])


def _clockwise(v: Vec, axis: Vec) -> Vec:
    """``v`` turned 90 degrees clockwise as seen from the ``axis`` side (-90 degrees about it)."""
    return _add(_scale(axis, _dot(axis, v)), _scale(_cross(axis, v), -1))


_STICKERS: list[tuple[Vec, Vec]] = []
for _face in FACES:
    _right, _down = _READING[_face]
    for _row in range(3):
        for _col in range(3):
            _position = _add(_NORMAL[_face], _scale(_right, _col - 1), _scale(_down, _row - 1))
            _STICKERS.append((_position, _NORMAL[_face]))
_INDEX = {sticker: i for i, sticker in enumerate(_STICKERS)}


def _quarter_turn(face: str) -> list[int]:
    """``source[i]``: the sticker index whose colour lands on sticker ``i`` after a clockwise turn."""
    axis = _NORMAL[face]
    source = list(range(54))
    for i, (position, normal) in enumerate(_STICKERS):
        if _dot(position, axis) == 1:
            source[_INDEX[(_clockwise(position, axis), _clockwise(normal, axis))]] = i
    return source


def _compose(first: list[int], then: list[int]) -> list[int]:
    return [first[then[i]] for i in range(54)]


_PERMUTATIONS: dict[str, list[int]] = {}
for _face in FACES:
    _once = _quarter_turn(_face)
    _twice = _compose(_once, _once)
    _PERMUTATIONS[_face], _PERMUTATIONS[_face + "2"] = _once, _twice
    _PERMUTATIONS[_face + "'"] = _compose(_twice, _once)


def inverse(move: str) -> str:
    """The move undoing ``move``."""
    if move.endswith("2"):
        return move
    return move[0] if move.endswith("'") else move + "'"


@dataclass
class Cube:
    """A cube's 54 sticker colours (faces in ``URFDLB`` order, each read row by row)."""

    stickers: list[str]

    @classmethod
    def solved(cls) -> Cube:
        return cls([COLOURS[f] for f in FACES for _ in range(9)])

    def rotate(self, move: str) -> None:
        """Apply one move of :data:`MOVES`; ValueError for anything else."""
        if move not in _PERMUTATIONS:
            raise ValueError(f"unknown move {move!r}")
        source = _PERMUTATIONS[move]
        self.stickers = [self.stickers[source[i]] for i in range(54)]

    def face(self, name: str) -> list[str]:
        """The nine colours of face ``name``."""
        start = FACES.index(name) * 9
        return self.stickers[start : start + 9]

    def is_solved(self) -> bool:
        return all(len(set(self.face(f))) == 1 for f in FACES)

    def solved_cubies(self) -> int:
        """Corner and edge cubies (of 20) whose every sticker shows its face's centre colour."""
        centres = {_NORMAL[f]: self.face(f)[4] for f in FACES}
        cubies: dict[Vec, bool] = {}
        for i, (position, normal) in enumerate(_STICKERS):
            if sum(abs(c) for c in position) >= 2:  # not a centre
                cubies[position] = cubies.get(position, True) and self.stickers[i] == centres[normal]
        return sum(cubies.values())

    def render(self) -> str:
        """The six faces as labelled 3x3 grids of colour letters."""
        blocks = []
        for f in FACES:
            rows = [" ".join(self.face(f)[r * 3 : r * 3 + 3]) for r in range(3)]
            blocks.append(f"{f}:\n" + "\n".join(rows))
        return "\n".join(blocks)


def scramble(rng: random.Random, length: int) -> list[str]:
    """``length`` random moves, none turning the same face as the move before it."""
    moves: list[str] = []
    while len(moves) < length:
        move = rng.choice(MOVES)
        if not moves or move[0] != moves[-1][0]:
            moves.append(move)
    return moves
