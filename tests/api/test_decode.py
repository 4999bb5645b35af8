"""The one decode path: every body is decoded and stored exactly as the JSON it carries says.

Each accepted group's stored form is the 14-key JSON of the values sent (unknown fields dropped,
missing optionals null, a repeated key: the last one), and the answer for every body, accepted
or not, is the one the original's pydantic model gives.
"""

from __future__ import annotations

import json
import random
import struct
from collections.abc import Callable

import orjson
import pytest

from atroposlib.api.decode import _lax_group, decode_group, decode_group_list
from atroposlib.api.errors import InvalidRequest
from atroposlib.api.schemas import ScoredData
from atroposlib.group import FIELD_NAMES, FIELDS, Kind
from tests.helpers.api import random_group

FLOAT_FIELDS = {f.name for f in FIELDS if f.kind in (Kind.FLOATS, Kind.FLOAT_MATRIX, Kind.FLOAT_CUBE)}


def as_floats(value):
    return [as_floats(v) for v in value] if isinstance(value, list) else float(value)


def expected(raw: bytes) -> dict:
    """The stored group the JSON text ``raw`` describes: its values, every field, in order."""
    given = json.loads(raw)
    stored = {name: given.get(name) for name in FIELD_NAMES}
    for name in FLOAT_FIELDS:
        if stored[name] is not None:
            stored[name] = as_floats(stored[name])
    return stored


def pydantic_group(raw: bytes):
    """What the original's model makes of ``raw``, checked and stored the same way."""
    return _lax_group(ScoredData.model_validate_json(raw).to_group())


def assert_originals_answer(raw: bytes) -> None:
    """``raw`` is rejected where the original's model rejects it, else stored as that model reads it."""
    try:
        want = pydantic_group(raw)
    except Exception:
        with pytest.raises(InvalidRequest):
            decode_group(raw)
        return
    got = decode_group(raw)
    assert got.data == want.data, raw
    assert (got.token_lengths, got.scores, got.env_id, got.problems) == (
        want.token_lengths,
        want.scores,
        want.env_id,
        want.problems,
    )


def assert_stored_as_given(raw: bytes) -> None:
    got = decode_group(raw)
    assert got.problems == pydantic_group(raw).problems, raw
    assert orjson.loads(got.data) == expected(raw), raw
    assert tuple(orjson.loads(got.data)) == FIELD_NAMES
    assert got.data == pydantic_group(raw).data
    given = json.loads(raw)
    assert got.token_lengths == [len(row) for row in given["tokens"]]
    assert got.scores == given["scores"] and got.env_id == given.get("env_id")


def body(**fields) -> bytes:
    base = {"tokens": [[1, 2], [3, 4]], "masks": [[-100, 2], [-100, 4]], "scores": [0, 1.5]}
    base.update(fields)
    return json.dumps(base).encode()


TAKEN = {
    "a small group": body(),
    "pretty-printed and padded": b"\n " + json.dumps(json.loads(body()), indent=4).encode() + b"\n",
    "extreme int32 values and -0": b'{"tokens":[[2147483647,-2147483648,-0]],"masks":[[0,0,0]],"scores":[1]}',
    "empty token list": body(tokens=[], masks=[], scores=[]),
    "empty rows": body(tokens=[[], [1]], masks=[[], [1]]),
    "brackets in strings and keys": body(
        messages=[[{"role": "u[s]er", "content": "[[1, [2]]]"}]],
        images={"[k": ["[", {"]": "[x"}]},
        **{"[unknown": "["},
    ),
    "float matrices of ints, extremes and empty rows": body(
        advantages=[[1, -0.0, 5e-324], []],
        ref_logprobs=[],
        inference_logprobs=[
            [1.7976931348623157e308, 2**63 - 1, 2**64 - 1, -(2**63)],
            [-2.2250738585072014e-308],
        ],
    ),
    "floats written every which way": body(advantages=[[1, 2]]).replace(
        b"[[1, 2]]",
        b"[[1E5, -1e-7, 0.1e1, 123456789.123456789e-3, 9007199254740993, 1.00000000000000011102230246251565404236316680908203125]]",
    ),
    "distillation cubes: ragged, empty and extreme": body(
        distill_token_ids=[[[2147483647, -2147483648], [], [0]], [], [[5]]],
        distill_logprobs=[[[-0.0, 5e-324], [1e16, 3]], [], [[]]],
    ),
    "distillation cubes of one top-k": body(
        distill_token_ids=[[[1, 2, 3]] * 4, [[4, 5, 6]] * 4],
        distill_logprobs=[[[-0.5, -1.25, -3e-5]] * 4, [[0, -1, -2]] * 4],
    ),
    "empty distillation cubes": body(distill_token_ids=[], distill_logprobs=[[]]),
    "masks before tokens": b'{"masks":[[1]],"tokens":[[1]],"scores":[1]}',
    "masks last": b'{"tokens":[[1]],"scores":[1],"masks":[[1]]}',
    "masks just before the closing brace": b'{"scores":[1],"tokens":[[1]],"masks":[[1]]}',
    "numbers of every length, with and without spaces": (
        b'{"tokens":[[0,1,-12,123,-1234,12345,123456,1234567,-12345678,123456789,1234567890],'
        b' [ 9 , 98 ,\n987 ]], "masks" :[[1,2,3,4,5,6,7,8,9,10,11],[-100, -100,-100]],"scores":[0,0]}'
    ),
    "ten-digit numbers in range, -0 in a mask row, tabs and carriage returns": (
        b'{"tokens":[[1234567890,-2147483648],\t[2147483647]],\r\n'
        b'"masks":[[-0, -100],[\t-0\r]],"scores":[0,1]}'
    ),
    "many rows of one number": body(tokens=[[i] for i in range(40)], masks=[[-100]] * 40, scores=[0] * 40),
    "escapes other than a bracket": body(messages=[[{"role": "user", "content": 'caf\u00e9\n\t"q"'}]]),
    "every optional field": body(
        advantages=[[0.5, 1], []],
        ref_logprobs=[[-1.0]],
        generation_params={"temperature": 0.7, "stop": ["\n"]},
        inference_logprobs=[[-0.25, -1e-9], [0]],
        overrides=[{"sft": True}, {}],
        group_overrides={"x": None},
        images=None,
        env_id=3,
        distill_token_ids=[[[1, 2], [3]], [[4]]],
        distill_logprobs=[[[-0.5, -1.5], [0]], [[-2]]],
    ),
}


@pytest.mark.parametrize("raw", TAKEN.values(), ids=TAKEN.keys())
def test_well_formed_groups_are_stored_as_given(raw):
    assert_stored_as_given(raw)


NESTED_ROW = b'{"tokens":[[1,[2]]],"masks":[[1,2]],"scores":[1]}'
#: Bodies the typed decode does not take as they are: rejected, or read with pydantic's coercions.
OTHER_BODIES = {
    "a one-item array inside a token row": NESTED_ROW,
    "a token row of one nested row": b'{"tokens":[[[1]]],"masks":[[1]],"scores":[1]}',
    "a nested array in a later row": b'{"tokens":[[1],[[2]]],"masks":[[1],[2]],"scores":[1,1]}',
    "a number beside the rows": b'{"tokens":[[1],2],"masks":[[1],[2]],"scores":[1,1]}',
    "a number between the rows": b'{"tokens":[[1],3,[2]],"masks":[[1],[2]],"scores":[1,1]}',
    "a number first, then rows": b'{"tokens":[3,[1]],"masks":[[1]],"scores":[1]}',
    "a ten-digit token above int32": body(tokens=[[2147483648, 1], [3, 4]]),
    "a negative ten-digit mask below int32": body(masks=[[1, -2147483649], [3, 4]]),
    "a token of a thousand digits": body(tokens=[[1], [2]]).replace(b"[2]", b"[" + b"9" * 1000 + b"]"),
    "a one-item array inside a mask row": b'{"tokens":[[1,2]],"masks":[[[1],2]],"scores":[1]}',
    "a nested array hidden by an escaped bracket": (
        b'{"tokens":[[1,[2]]],"masks":[[1,2]],"scores":[1],'
        b'"messages":[[{"role":"user","content":"\\u005b"}]]}'
    ),
    "an escaped bracket alone": b'{"tokens":[[1]],"masks":[[1]],"scores":[1],"images":"\\u005B"}',
    "a duplicate matrix key": b'{"tokens":[[1]],"tokens":[[2]],"masks":[[1]],"scores":[1]}',
    "a matrix key repeated after the others": b'{"tokens":[[1]],"masks":[[1]],"scores":[1],"masks":[[2]]}',
    "a matrix key repeated, escaped": b'{"tokens":[[1]],"masks":[[1]],"scores":[1],"tok\\u0065ns":[[2]]}',
    "a token with a leading zero": b'{"tokens":[[01]],"masks":[[1]],"scores":[1]}',
    "a token with an exponent": b'{"tokens":[[1e2]],"masks":[[1]],"scores":[1]}',
    "a token of eleven digits": b'{"tokens":[[10000000000]],"masks":[[1]],"scores":[1]}',
    "a minus sign alone": b'{"tokens":[[-]],"masks":[[1]],"scores":[1]}',
    "a trailing comma in a row": b'{"tokens":[[1,]],"masks":[[1]],"scores":[1]}',
    "a trailing comma after the rows": b'{"tokens":[[1],],"masks":[[1]],"scores":[1]}',
    "form feed between numbers": b'{"tokens":[[1,\f2]],"masks":[[1,2]],"scores":[1]}',
    "tokens and masks only": b'{"tokens":[[1]],"masks":[[1]]}',
    "a token above int32": body(tokens=[[2**31, 1], [3, 4]]),
    "a mask below int32": body(masks=[[-(2**31) - 1, 1], [3, 4]]),
    "a token beyond 64 bits": body(tokens=[[2**70, 1], [3, 4]]),
    "an integral float token": body(tokens=[[1.0, 2], [3, 4]]),
    "a boolean token": body(tokens=[[True, 2], [3, 4]]),
    "a string token": body(tokens=[["1", 2], [3, 4]]),
    "a row that is not an array": body(tokens=[1, 2]),
    "a row that is a string": body(tokens=[[1, 2], "34"]),
    "a row that is an object": body(masks=[[1, 2], {"3": 4}]),
    "tokens null": body(tokens=None),
    "masks missing": b'{"tokens":[[1]],"scores":[1]}',
    "a float env_id": body(env_id=1.0),
    "a negative env_id": body(env_id=-1),
    "a boolean score": body(scores=[True, 1]),
    "a boolean logprob": body(inference_logprobs=[[True], [-1.0]]),
    "a null logprob": body(advantages=[[None]]),
    "a string logprob": body(ref_logprobs=[["-1.0"]]),
    "a one-item array inside a logprob row": body(inference_logprobs=[[-1.0, [-2.0]]]),
    "a logprob row that is a number": body(inference_logprobs=[-1.0, -2.0]),
    "logprobs as an object": body(inference_logprobs={"0": [-1.0]}),
    "a float out of range": body(advantages=[[1]]).replace(b"[[1]]", b"[[1e400]]"),
    "a token id above int32 in a cube": body(distill_token_ids=[[[1, 2**31]], []]),
    "an integral float token id in a cube": body(distill_token_ids=[[[1.0]]]),
    "a boolean token id in a cube": body(distill_token_ids=[[[True]]]),
    "a null distill logprob": body(distill_logprobs=[[[-1.0, None]]]),
    "a string distill logprob": body(distill_logprobs=[[["-1.0"]]]),
    "a cube position that is a number": body(distill_token_ids=[[1, 2]]),
    "a cube position that is a string": body(distill_logprobs=[["-1"]]),
    "a cube sequence that is a number": body(distill_logprobs=[-1.0]),
    "a one-item array inside a cube position": body(distill_token_ids=[[[1, [2]]]]),
    "a cube as an object": body(distill_token_ids={"0": [[1]]}),
    "a message without a role": body(messages=[[{"content": "x"}]]),
    "a list body": b"[" + body() + b"]",
    "a byte order mark": b"\xef\xbb\xbf" + body(),
    "invalid UTF-8": body(images="\x00").replace(b"\\u0000", b"\xff"),
    "trailing garbage": body() + b" x",
    "truncated": body()[:-1],
    "NaN": body().replace(b"1.5", b"NaN"),
    "a float beyond 64-bit integers": body(advantages=[[1]]).replace(
        b"[[1]]", b"[[123456789012345678901234567890]]"
    ),
    "a duplicate scalar key": b'{"tokens":[[1]],"masks":[[1]],"scores":[1],"env_id":1,"env_id":2}',
    "a duplicate list key": b'{"tokens":[[1]],"masks":[[1]],"scores":[1],"scores":[2.5]}',
    "a duplicate key after escapes": b'{"tokens":[[1]],"masks":[[1]],"scores":[1],"sc\\u006fres":[2]}',
}


@pytest.mark.parametrize("raw", OTHER_BODIES.values(), ids=OTHER_BODIES.keys())
def test_every_other_body_gets_the_originals_answer(raw):
    """Rejected where the original's model rejects it; otherwise stored as that model reads it."""
    assert_originals_answer(raw)


REPEATED_KEYS = {
    "a repeated scalar key": (
        b'{"tokens":[[1]],"masks":[[1]],"scores":[1],"env_id":1,"env_id":2}',
        "env_id",
        2,
    ),
    "a repeated list key": (b'{"tokens":[[1]],"masks":[[1]],"scores":[1],"scores":[2.5]}', "scores", [2.5]),
    "a repeated key after escapes": (
        b'{"tokens":[[1]],"masks":[[1]],"scores":[1],"sc\\u006fres":[2]}',
        "scores",
        [2.0],
    ),
    "a repeated matrix key": (b'{"tokens":[[1]],"masks":[[1]],"scores":[1],"masks":[[2]]}', "masks", [[2]]),
}


@pytest.mark.parametrize(("raw", "name", "value"), REPEATED_KEYS.values(), ids=REPEATED_KEYS.keys())
def test_a_repeated_key_counts_as_the_last_one(raw, name, value):
    got = decode_group(raw)
    assert orjson.loads(got.data)[name] == value
    assert got.data == pydantic_group(raw).data


def test_random_groups_decode_as_the_originals_model_reads_them():
    rng = random.Random(5)
    for _ in range(600):
        raw = json.dumps(
            random_group(rng), indent=rng.choice([None, 2]), ensure_ascii=rng.random() < 0.5
        ).encode()
        assert_originals_answer(raw)


def float_text(rng: random.Random) -> str:
    """A JSON number as clients write it: shortest repr, %g, exponents, long digit strings, ints."""
    value = struct.unpack("<d", rng.randbytes(8))[0]
    while value != value or value in (float("inf"), float("-inf")):
        value = struct.unpack("<d", rng.randbytes(8))[0]
    small = rng.uniform(-30, 1)
    return rng.choice(
        [
            repr(value),
            repr(small),
            f"{small:.3g}",
            f"{small:.25e}",
            f"{value:.17E}",
            f"{rng.randrange(-(2**64), 2**64)}",
            f"{rng.randrange(10**30)}.{rng.randrange(10**30)}e-{rng.randrange(340)}",
        ]
    )


def test_random_floats_are_stored_as_their_values():
    rng = random.Random(11)
    for _ in range(200):
        rows = [[float_text(rng) for _ in range(rng.randint(0, 6))] for _ in range(2)]
        field = rng.choice(["advantages", "ref_logprobs", "inference_logprobs"])
        matrix = "[" + ", ".join("[" + ", ".join(row) + "]" for row in rows) + "]"
        raw = body().replace(b'"scores"', f'"{field}": {matrix}, "scores"'.encode())
        stored = orjson.loads(decode_group(raw).data)[field]
        assert stored == [[float(text) for text in row] for row in rows], raw


def random_cube(rng: random.Random, top_k: int | None, value: Callable[[], str]) -> str:
    """A distillation cube's JSON text: sequences of positions of ``top_k`` values (None: any)."""
    sequences = []
    for _ in range(rng.randint(0, 3)):
        positions = []
        for _ in range(rng.randint(0, 6)):
            k = rng.randint(0, 4) if top_k is None else top_k
            positions.append("[" + ", ".join(value() for _ in range(k)) + "]")
        sequences.append("[" + ",".join(positions) + "]")
    return "[" + ", ".join(sequences) + "]"


def test_random_cubes_are_stored_as_their_values():
    rng = random.Random(13)
    extremes = [0, -1, 2**31 - 1, -(2**31)]
    for _ in range(200):
        top_k = rng.choice([None, 0, 1, 5])
        token_ids = random_cube(
            rng, top_k, lambda: str(rng.choice([*extremes, rng.randrange(-(2**31), 2**31)]))
        )
        logprobs = random_cube(rng, top_k, lambda: float_text(rng))
        fields = f'"distill_token_ids": {token_ids}, "distill_logprobs": {logprobs}, "scores"'
        raw = body().replace(b'"scores"', fields.encode())
        stored = orjson.loads(decode_group(raw).data)
        assert stored["distill_token_ids"] == json.loads(token_ids)
        assert stored["distill_logprobs"] == json.loads(logprobs, parse_int=float)


def test_lists_are_decoded_whole_or_not_at_all():
    rng = random.Random(8)
    groups = [g for g in (random_group(rng) for _ in range(30)) if "unknown" not in g][:6]
    raw = json.dumps(groups).encode()
    try:
        singles = [decode_group(json.dumps(g).encode()) for g in groups]
    except InvalidRequest:
        singles = None
    if singles is None:
        with pytest.raises(InvalidRequest):
            decode_group_list(raw)
    else:
        assert [g.data for g in decode_group_list(raw)] == [g.data for g in singles]
    good = json.dumps([json.loads(body()), json.loads(body(env_id=2))]).encode()
    assert len(decode_group_list(good)) == 2
    assert decode_group_list(b" [] ") == []
    for bad in (good[:-1] + b"," + NESTED_ROW + b"]", b"[1]", body()):
        with pytest.raises(InvalidRequest) as info:
            decode_group_list(bad)
        assert info.value.errors[0]["loc"][0] == "body"


LISTS = {
    "a nested object whose first key is tokens": json.dumps(
        [json.loads(body()), json.loads(body(generation_params={"tokens": 5}))]
    ).encode(),
    "a group with masks first": b'[{"tokens":[[1]],"masks":[[1]],"scores":[1]},{"masks":[[2]],"tokens":[[2]],"scores":[2]}]',
    "a string value tokens": json.dumps(
        [json.loads(body(messages=[[{"role": "tokens", "content": "x"}]]))]
    ).encode(),
    "a group text inside a string": json.dumps(
        [json.loads(body(messages=[[{"role": "user", "content": json.dumps(json.loads(body()))}]]))]
    ).encode(),
    "a repeated tokens key": b'[{"tokens":[[1]],"masks":[[1]],"scores":[1],"tokens":[[2]]}]',
    "a repeated tokens key, escaped": b'[{"tokens":[[1]],"masks":[[1]],"scores":[1],"tok\\u0065ns":[]}]',
    "a repeated scores key": b'[{"tokens":[[1]],"masks":[[1]],"scores":[1],"scores":[2]}]',
    "a float token in the second group": b'[{"tokens":[[1]],"masks":[[1]],"scores":[1]},{"tokens":[[1.5]],"masks":[[1]],"scores":[1]}]',
    "an object, not a list": body(),
    "trailing garbage": b'[{"tokens":[[1]],"masks":[[1]],"scores":[1]}] x',
    "empty": b"[]",
}


@pytest.mark.parametrize("raw", LISTS.values(), ids=LISTS.keys())
def test_lists_get_the_originals_answer(raw):
    try:
        want = [pydantic_group(json.dumps(g).encode()) for g in json.loads(raw)]
        assert isinstance(json.loads(raw), list)
    except Exception:
        with pytest.raises(InvalidRequest):
            decode_group_list(raw)
        return
    got = decode_group_list(raw)
    assert [g.data for g in got] == [g.data for g in want]
    assert [(g.scores, g.env_id, g.token_lengths) for g in got] == [
        (g.scores, g.env_id, g.token_lengths) for g in want
    ]


def random_matrix_text(rng: random.Random) -> bytes:
    """Valid JSON near an int matrix: rows of ints with random spacing, sometimes with something else."""
    spaces = ["", "", " ", "\n", "\t", "\r\n  "]

    def space() -> str:
        return rng.choice(spaces)

    def number() -> str:
        roll = rng.random()
        if roll < 0.05:
            return rng.choice(["-0", "0", "2147483647", "-2147483648", "2147483648", "-2147483649"])
        if roll < 0.1:
            return str(rng.randrange(-(10**12), 10**12))
        if roll < 0.12:
            return rng.choice(["1.0", "1e3", "true", "null", '"7"', "[1]", "[]", "{}"])
        return str(rng.randrange(-100, 160_000))

    def row() -> str:
        items = [number() for _ in range(rng.choice([0, 1, 2, 5, 30]))]
        return "[" + space() + ("," + space()).join(items) + space() + "]"

    rows = [row() if rng.random() > 0.03 else number() for _ in range(rng.choice([0, 1, 2, 8]))]
    return (space() + "[" + space() + ("," + space()).join(rows) + space() + "]" + space()).encode()


def test_int32_matrix_reads_a_matrix_exactly_as_a_typed_decode_does():
    """The text check accepts exactly the matrices a ``list[list[int32]]`` decode accepts, with the
    same values (its compact text encodes them) and row lengths."""
    import msgspec

    from atroposlib.api.decode import Int32, int32_matrix

    typed = msgspec.json.Decoder(list[list[Int32]])
    rng = random.Random(20)
    accepted = 0
    for _ in range(3000):
        text = random_matrix_text(rng)
        try:
            want = typed.decode(text)
        except msgspec.ValidationError:
            want = None
        got = int32_matrix(text.strip())
        if want is None:
            assert got is None, text
            continue
        accepted += 1
        assert got is not None, text
        compact, lengths = got
        assert compact == msgspec.json.encode(want), text
        assert lengths == [len(row) for row in want], text
    assert 1000 < accepted < 3000
