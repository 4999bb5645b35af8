"""Decoding plainly well-formed scored groups with simdjson, without a Python object per number.

Decoding a group with msgspec creates a Python int for every token id and mask value (8192 of
them for 8 sequences of 512 tokens), and a Python float for every logprob, and formats each again
to store the group: about 0.25 ms without logprobs, the largest part of an ingest request. Here
simdjson parses the body in C++, the token matrices are copied into int64 buffers (numpy checks
their int32 range at once), the float matrices (``advantages``, ``ref_logprobs``,
``inference_logprobs``) into float64 buffers, the distillation cubes (``distill_token_ids``,
``distill_logprobs``) into one such matrix per sequence, and the group is stored in parts
(:mod:`atroposlib.api.stored_group`): the numbers are formatted only when a batch is served.

Most groups start with ``tokens`` and ``masks`` (``json.dumps`` of a scored group writes them
first). For those, a compiled scanner (``_int_rows.c``, :func:`int_rows_pair`) reads both matrices
straight into int32 buffers, and only the rest is parsed: by msgspec when it is small, by simdjson
when it holds float matrices. That takes about half the time of parsing the whole body, for one
group and for lists. Where the extension was not built, simdjson parses everything.

Only plainly well-formed bodies are decoded here. For anything else (bad JSON, a wrong type, a
value out of range, a duplicate key, an escaped ``[``...) these functions return ``None`` and the
caller's exact path (:func:`atroposlib.api.validation.decode_group`) decides, so acceptance, the
stored values and error details never depend on which path decoded a body. The fields after
``masks`` are checked with the same msgspec types as that path (:class:`StrictRest`).

simdjson flattens nested arrays when it copies a row, so ``[1, [2]]`` would read as ``[1, 2]``.
Counting ``[`` bytes catches it: when the body has no ``\\u005b`` escape, every ``[`` in it opens
an array or is a character of a string, and both are counted from the decoded document; a
nested array in a token row is a ``[`` more than that count.
"""

from __future__ import annotations

import re
import threading
from typing import Any, NamedTuple

import msgspec
import numpy as np
import simdjson

try:  # the compiled scanner (setup.py); without it, the token matrices are parsed by simdjson
    from atroposlib.api._int_rows import int_rows_pair
except ImportError:  # pragma: no cover - built by every install that has a C compiler
    int_rows_pair = None

from atroposlib.api.stored_group import FLOAT64_ROWS, INT32_ROWS, Matrix, Part, pack
from atroposlib.api.strict_schema import INT32_MAX, INT32_MIN, StrictGroup, StrictRest, messages_complete

_MATRICES = ("tokens", "masks")
_FLOAT_MATRICES = frozenset({"advantages", "ref_logprobs", "inference_logprobs"})
#: ``,"name":`` of every field after ``masks``, in stored order.
_REST_KEYS = tuple((name, f',"{name}":'.encode()) for name in StrictRest.__struct_fields__)
_CUBES = frozenset({"distill_token_ids", "distill_logprobs"})
_ESCAPED_BRACKET = re.compile(rb"\\u005[bB]")
_WHITESPACE = b" \t\r\n"
_OPEN_BRACKET = ord("[")
_ENCODER = msgspec.json.Encoder()
#: Bodies up to this size are parsed by a parser kept per thread: a fresh parser allocates (and the
#: allocator hands back to the system) buffers several times the body's size on every request,
#: which doubled the kernel time of an ingest request. A parser keeps buffers for the largest body
#: it has seen, about 8 MiB for 1 MiB; larger bodies get a parser of their own, freed afterwards.
REUSE_PARSER_MAX_BYTES = 1024 * 1024
_local = threading.local()
#: The members after ``masks`` up to this size are decoded by msgspec in one call; larger ones (float
#: matrices, distillation cubes) by simdjson, which keeps their numbers out of Python objects.
SMALL_REST_BYTES = 8 * 1024
_REST_DECODER = msgspec.json.Decoder(StrictRest)
_SKELETON_DECODER = msgspec.json.Decoder(list[StrictGroup])
#: How a group of the skeleton (matrices replaced by ``[]``) starts when msgspec writes it.
_EMPTY_MATRICES = b'{"tokens":[],"masks":[]'
_WS = rb"[ \t\r\n]*"
_LEADING_TOKENS = re.compile(_WS + rb"\{" + _WS + rb'"tokens"' + _WS + b":")
_GROUP_OPEN = re.compile(rb"\{" + _WS + rb'"tokens"' + _WS + b":")
_MASKS_KEY = re.compile(_WS + b"," + _WS + rb'"masks"' + _WS + b":")
_MASKS_VALUE = re.compile(rb'"masks"' + _WS + b":")
_AFTER_MASKS = re.compile(_WS + rb"([,}])")


class PlainGroup(NamedTuple):
    """A decoded group; the fields of :class:`atroposlib.api.validation.Group`, in its order."""

    token_lengths: list[int]
    mask_lengths: list[int]
    scores: list[float]
    env_id: int | None
    data: bytes


class _NotPlain(Exception):
    """The body is not plainly well-formed; the exact path decides."""


#: What simdjson, msgspec and numpy raise for input the exact path has to look at.
_DECLINED = (_NotPlain, TypeError, ValueError, RuntimeError, KeyError, RecursionError, msgspec.MsgspecError)


def decode_one(body: bytes) -> PlainGroup | None:
    """The group of a ``POST /scored_data`` body, or ``None`` to leave it to the exact path."""
    if int_rows_pair is not None:
        group = _decode_leading_matrices(body)
        if group is not None:
            return group
    groups = _decode(body, many=False)
    return groups[0] if groups else None


def _decode_leading_matrices(body: bytes) -> PlainGroup | None:
    """A group object that starts with ``tokens`` and then ``masks`` (as ``json.dumps`` writes a
    scored group): both scanned by the compiled :func:`int_rows_pair`, the rest of the object decoded by
    msgspec when small, by simdjson otherwise. ``None`` for any other layout and anything not plain."""
    head = _LEADING_TOKENS.match(body)
    if head is None:
        return None
    scanned = _scan_matrices(body, head.end())
    if scanned is None:
        return None
    tokens, masks, _, _, masks_end = scanned
    after = _AFTER_MASKS.match(body, masks_end)
    if after is None:
        return None
    # The object without its first two members, as its own JSON text.
    rest = (b"{" if after.group(1) == b"," else b"{}") + memoryview(body)[after.end() :]
    if _msgspec_may_decode(rest, groups=1, matrix_keys=0):
        return _small_rest(rest, tokens, masks)
    doc = _parse(rest)
    if not isinstance(doc, simdjson.Object):
        return None
    try:
        keys = list(doc.keys())
        if "tokens" in keys or "masks" in keys:
            return None  # a duplicate: the exact path's call
        group, arrays = _rest(doc, keys, tokens, masks)
    except _DECLINED:
        return None
    # The matrices were scanned exactly; the ``[`` count only has the rest to check.
    if rest.count(b"[") != arrays:
        return None
    return group


def _scan_matrices(body: bytes, pos: int) -> tuple[Matrix, Matrix, int, int, int] | None:
    """The ``tokens`` matrix at ``pos`` (just past its key) and the ``masks`` member right after it:
    both matrices, where tokens end, where the masks matrix starts and where it ends."""
    # A plain matrix holds no '"', so the first "masks" after it is its key if anything is. The
    # two are scanned together, then the guess is checked against where tokens really ended.
    guess = _MASKS_VALUE.search(body, pos)
    if guess is None:
        return None
    both = int_rows_pair(body, pos, guess.end())
    if both is None:
        return None
    tokens_end, token_lengths, token_values, masks_end, mask_lengths, mask_values = both
    key = _MASKS_KEY.match(body, tokens_end)
    if key is None or key.end() != guess.end():
        return None
    return (
        (INT32_ROWS, token_lengths, token_values),
        (INT32_ROWS, mask_lengths, mask_values),
        tokens_end,
        key.end(),
        masks_end,
    )


def _decode_leading_list(body: bytes) -> list[PlainGroup] | None:
    """A list of groups that each start with ``tokens`` and then ``masks``: the matrices scanned by
    :func:`int_rows_pair`, and the list with each matrix replaced by ``[]`` (its skeleton) decoded by
    msgspec. ``None`` unless every group has that layout and the skeleton is small and plain.

    In valid JSON, ``{"tokens":`` cannot start inside a string (its ``"`` would end the string, and
    a bare ``tokens`` cannot follow one); the skeleton must hold exactly one ``"tokens"`` and one
    ``"masks"`` key per group found, none escaped, so each ``[]`` is the member it replaced.
    """
    pieces: list[bytes | memoryview] = []
    matrices: list[tuple[Matrix, Matrix]] = []
    view = memoryview(body)
    copied = 0
    head = _GROUP_OPEN.search(body)
    while head is not None:
        scanned = _scan_matrices(body, head.end())
        if scanned is None:
            return None
        tokens, masks, tokens_end, masks_start, masks_end = scanned
        pieces += [view[copied : head.end()], b"[]", view[tokens_end:masks_start], b"[]"]
        matrices.append((tokens, masks))
        copied = masks_end
        head = _GROUP_OPEN.search(body, masks_end)
    if not matrices:
        return None
    pieces.append(view[copied:])
    skeleton = b"".join(pieces)
    count = len(matrices)
    if not _msgspec_may_decode(skeleton, groups=count, matrix_keys=count):
        return None
    try:
        typed = _SKELETON_DECODER.decode(skeleton)
    except (msgspec.MsgspecError, ValueError, RecursionError):
        return None
    if len(typed) != count:
        return None
    groups = []
    for group, (tokens, masks) in zip(typed, matrices, strict=True):
        if group.tokens or group.masks or not messages_complete(group.messages):
            return None
        groups.append(_plain_group(tokens, masks, [_ENCODER.encode(group)[len(_EMPTY_MATRICES) :]], group))
    return groups


def _small_rest(rest: bytes, tokens: Matrix, masks: Matrix) -> PlainGroup | None:
    """The group whose members after ``tokens`` and ``masks`` are the small object ``rest``,
    decoded by msgspec into :class:`StrictRest` as the exact path decodes them (a duplicate key
    counts as it does there: the last one)."""
    try:
        typed = _REST_DECODER.decode(rest)
    except (msgspec.MsgspecError, ValueError, RecursionError):
        return None
    if not messages_complete(typed.messages):
        return None
    return _plain_group(tokens, masks, [b"," + _ENCODER.encode(typed)[1:]], typed)


def _msgspec_may_decode(text: bytes, *, groups: int, matrix_keys: int) -> bool:
    """Whether msgspec decodes ``text`` (the members after the matrices of ``groups`` groups) as the
    exact path would: small, no escape that could spell a key, and ``"tokens"`` / ``"masks"`` exactly
    ``matrix_keys`` times each (so no group repeats a matrix key, which the exact path decides)."""
    return (
        len(text) <= SMALL_REST_BYTES * groups
        and b"\\u" not in text
        and text.count(b'"tokens"') == matrix_keys
        and text.count(b'"masks"') == matrix_keys
    )


def _plain_group(tokens: Matrix, masks: Matrix, rest: list[Part], typed: Any) -> PlainGroup:
    """The group of the two matrices followed by ``rest`` (the JSON after them, in parts)."""
    data = pack([b'{"tokens":', tokens, b',"masks":', masks, *rest])
    return PlainGroup(tokens[1], masks[1], typed.scores, typed.env_id, data)


def decode_many(body: bytes) -> list[PlainGroup] | None:
    """The groups of a ``POST /scored_data_list`` body, or ``None`` to leave it to the exact path."""
    if int_rows_pair is not None:
        groups = _decode_leading_list(body)
        if groups is not None:
            return groups
    return _decode(body, many=True)


def _decode(body: bytes, *, many: bool) -> list[PlainGroup] | None:
    if body.lstrip(_WHITESPACE)[:1] != (b"[" if many else b"{"):
        return None
    doc = _parse(body)
    if doc is None:
        return None
    try:
        if many:
            if not isinstance(doc, simdjson.Array):
                return None
            groups, arrays = [], 1
            for item in doc:
                group, count = _group(item)
                groups.append(group)
                arrays += count
        else:
            group, arrays = _group(doc)
            groups = [group]
    except _DECLINED:
        return None
    if np.count_nonzero(np.frombuffer(body, np.uint8) == _OPEN_BRACKET) != arrays:
        return None
    return groups


def _parse(text: bytes) -> Any:
    """simdjson's document of ``text``, or ``None`` when it does not parse or holds an escaped ``[``."""
    if b"\\" in text and _ESCAPED_BRACKET.search(text):
        return None
    try:
        return _parser(len(text)).parse(text)
    except RuntimeError:
        # Also raised while a document of this parser is still referenced (it never should be):
        # the next body gets a new parser either way.
        _local.parser = None
        return None
    except _DECLINED:
        return None


def _parser(size: int) -> simdjson.Parser:
    if size > REUSE_PARSER_MAX_BYTES:
        return simdjson.Parser()
    parser = getattr(_local, "parser", None)
    if parser is None:
        parser = _local.parser = simdjson.Parser()
    return parser


def _group(obj: Any) -> tuple[PlainGroup, int]:
    """One group object, and how many ``[`` its JSON text holds if it is plain."""
    if not isinstance(obj, simdjson.Object):
        raise _NotPlain
    keys = list(obj.keys())
    tokens = _int_matrix(obj.get("tokens"))
    masks = _int_matrix(obj.get("masks"))
    group, arrays = _rest(obj, keys, tokens, masks)
    return group, arrays + 2 + len(tokens[1]) + len(masks[1])


def _rest(obj: Any, keys: list[str], tokens: Matrix, masks: Matrix) -> tuple[PlainGroup, int]:
    """The group of ``tokens``, ``masks`` and the other members of ``obj`` (whose keys are ``keys``),
    and how many ``[`` the text of those other members holds if it is plain."""
    if len(set(keys)) != len(keys):
        raise _NotPlain  # which duplicate counts is the exact path's call
    arrays = sum(key.count("[") for key in keys)
    rest = {}
    kept: dict[str, list[Part]] = {}  # fields stored as parts rather than through StrictRest
    for key in keys:
        if key in _MATRICES:
            continue
        value = obj[key]
        if key in _FLOAT_MATRICES and isinstance(value, simdjson.Array):
            matrix = _float_matrix(value)
            kept[key] = [matrix]
            arrays += 1 + len(matrix[1])
        elif key in _CUBES and isinstance(value, simdjson.Array):
            kept[key], positions = _cube(value, ints=key == "distill_token_ids")
            arrays += 1 + len(value) + positions
        else:
            rest[key] = _python(value)
    typed = msgspec.convert(rest, StrictRest)
    if not messages_complete(typed.messages):
        raise _NotPlain
    arrays += _rest_arrays(rest)
    parts = _rest_parts(typed, kept) if kept else [b"," + _ENCODER.encode(typed)[1:]]
    return _plain_group(tokens, masks, parts, typed), arrays


def _int_matrix(value: Any) -> Matrix:
    """The int32 matrix part of a list of int32 lists: kind, row lengths, little-endian values."""
    if not isinstance(value, simdjson.Array):
        raise _NotPlain
    flat = np.frombuffer(value.as_buffer(of_type="i"), np.int64)  # TypeError unless all int64
    lengths = _row_lengths(value, flat.size)
    if flat.size and (flat.min() < INT32_MIN or flat.max() > INT32_MAX):
        raise _NotPlain
    return INT32_ROWS, lengths, flat.astype("<i4").tobytes()


def _float_matrix(value: Any) -> Matrix:
    """The float64 matrix part of a list of lists of JSON numbers (ints become floats, as in msgspec)."""
    flat = np.frombuffer(value.as_buffer(of_type="d"), np.float64)  # TypeError for a non-number
    return FLOAT64_ROWS, _row_lengths(value, flat.size), flat.astype("<f8", copy=False).tobytes()


def _cube(value: Any, *, ints: bool) -> tuple[list[Part], int]:
    """The parts of a distillation cube (one matrix per sequence) and its number of positions."""
    matrix = _int_matrix if ints else _float_matrix
    parts: list[Part] = [b"["]
    positions = 0
    for index, sequence in enumerate(value):
        if not isinstance(sequence, simdjson.Array):
            raise _NotPlain
        if index:
            parts.append(b",")
        part = matrix(sequence)
        parts.append(part)
        positions += len(part[1])
    parts.append(b"]")
    return parts, positions


def _row_lengths(value: Any, size: int) -> list[int]:
    lengths = [len(row) for row in value]  # TypeError for a row that is a bare number
    if size != sum(lengths):
        raise _NotPlain  # a nested array of other than one item
    return lengths


def _rest_parts(typed: StrictRest, kept: dict[str, list[Part]]) -> list[Part]:
    """The fields after ``masks`` as JSON text, cut around the matrices of the ``kept`` fields."""
    parts: list[Part] = []
    text = bytearray()
    for (name, key), value in zip(_REST_KEYS, msgspec.structs.astuple(typed), strict=True):
        text += key
        if name not in kept:
            text += _ENCODER.encode(value)
            continue
        for part in kept[name]:
            if isinstance(part, bytes):
                text += part
            else:
                parts.append(bytes(text))
                parts.append(part)
                text.clear()
    text += b"}"
    parts.append(bytes(text))
    return parts


def _python(value: Any) -> Any:
    if isinstance(value, simdjson.Array):
        return value.as_list()
    if isinstance(value, simdjson.Object):
        return value.as_dict()
    return value


def _rest_arrays(rest: dict[str, Any]) -> int:
    """``[`` count of the decoded fields kept as Python values (already checked against :class:`StrictRest`).

    ``scores``, a list of numbers once checked, is counted from its type rather than walked.
    """
    total = 0
    for key, value in rest.items():
        if value is None:
            continue
        if key == "scores":
            total += 1
        else:
            total += _arrays(value)
    return total


def _arrays(value: Any) -> int:
    """``[`` count of any decoded JSON value: its arrays and the ``[`` in its strings."""
    if isinstance(value, list):
        return 1 + sum(_arrays(item) for item in value)
    if isinstance(value, dict):
        return sum(key.count("[") + _arrays(item) for key, item in value.items())
    if isinstance(value, str):
        return value.count("[")
    return 0
