"""The simdjson decoder: it takes plainly well-formed groups, and declines everything else."""

from __future__ import annotations

import json
import random
import re
import struct
import threading
from collections.abc import Callable

import msgspec
import pytest

from atroposlib.api import simd_decode
from atroposlib.api.schemas import ScoredData
from atroposlib.api.stored_group import PARTS, group_json
from atroposlib.api.strict_schema import StrictGroup
from atroposlib.api.validation import InvalidRequest, _from_model, decode_group, decode_group_list
from tests.api.helpers import random_group

_STRICT = msgspec.json.Decoder(StrictGroup)
_ENCODER = msgspec.json.Encoder()


@pytest.fixture(autouse=True, params=["int_rows", "int_rows, simdjson rest", "simdjson"])
def matrix_scanner(request, monkeypatch) -> str:
    """Every test runs on each decoding path: the compiled token-matrix scanner with the rest of the
    group decoded by msgspec (small rests) or simdjson (large ones), and simdjson alone."""
    if request.param == "simdjson":
        monkeypatch.setattr(simd_decode, "int_rows_pair", None)
    else:
        assert simd_decode.int_rows_pair is not None, "the _int_rows extension was not built"
    if request.param == "int_rows, simdjson rest":
        monkeypatch.setattr(simd_decode, "SMALL_REST_BYTES", 0)
    return request.param


def strict_json(raw: bytes) -> bytes | None:
    """The stored JSON the msgspec path gives ``raw``, or None where it rejects it."""
    try:
        return _ENCODER.encode(_STRICT.decode(raw))
    except (msgspec.MsgspecError, ValueError):
        return None


def assert_same_as_strict(plain: simd_decode.PlainGroup, raw: bytes) -> None:
    want = _STRICT.decode(raw)
    assert group_json(plain.data) == _ENCODER.encode(want), raw
    assert plain.data[:1] == PARTS
    assert plain.token_lengths == [len(row) for row in want.tokens]
    assert plain.mask_lengths == [len(row) for row in want.masks]
    assert plain.scores == want.scores and plain.env_id == want.env_id


def test_random_groups_decode_as_the_msgspec_path_does():
    rng = random.Random(5)
    taken = 0
    for _ in range(600):
        group = random_group(rng)
        raw = json.dumps(group, indent=rng.choice([None, 2]), ensure_ascii=rng.random() < 0.5).encode()
        plain = simd_decode.decode_one(raw)
        if plain is None:
            continue
        taken += 1
        assert strict_json(raw) is not None, raw  # never accepts what the exact paths reject
        assert_same_as_strict(plain, raw)
    assert taken > 300


def body(**fields) -> bytes:
    base = {"tokens": [[1, 2], [3, 4]], "masks": [[-100, 2], [-100, 4]], "scores": [0, 1.5]}
    base.update(fields)
    return json.dumps(base).encode()


TAKEN = {
    "plain": body(),
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
def test_well_formed_groups_are_taken(raw):
    plain = simd_decode.decode_one(raw)
    assert plain is not None
    assert_same_as_strict(plain, raw)


NESTED_ROW = b'{"tokens":[[1,[2]]],"masks":[[1,2]],"scores":[1]}'
DECLINED = {
    "a one-item array inside a token row": NESTED_ROW,
    "a token row of one nested row": b'{"tokens":[[[1]]],"masks":[[1]],"scores":[1]}',
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
}


#: Bodies some paths take and others leave to the exact paths; the group is the exact paths' either way.
EITHER = {
    "a float beyond 64-bit integers": body(advantages=[[1]]).replace(
        b"[[1]]", b"[[123456789012345678901234567890]]"
    ),
    "a duplicate scalar key": b'{"tokens":[[1]],"masks":[[1]],"scores":[1],"env_id":1,"env_id":2}',
    "a duplicate list key": b'{"tokens":[[1]],"masks":[[1]],"scores":[1],"scores":[2.5]}',
    "a duplicate key after escapes": b'{"tokens":[[1]],"masks":[[1]],"scores":[1],"sc\\u006fres":[2]}',
}


@pytest.mark.parametrize("raw", EITHER.values(), ids=EITHER.keys())
def test_every_path_gives_the_exact_paths_group(raw):
    """E.g. a repeated key counts as the last one, on every path."""
    want = _from_model(ScoredData.model_validate_json(raw))
    got = decode_group(raw)
    assert group_json(got.data) == group_json(want.data)
    assert (got.scores, got.env_id) == (want.scores, want.env_id)


@pytest.mark.parametrize("raw", DECLINED.values(), ids=DECLINED.keys())
def test_anything_else_is_left_to_the_exact_paths(raw):
    assert simd_decode.decode_one(raw) is None
    try:
        want = _from_model(ScoredData.model_validate_json(raw))
    except Exception:
        with pytest.raises(InvalidRequest):
            decode_group(raw)
        return
    got = decode_group(raw)
    assert group_json(got.data) == group_json(want.data)
    assert got.token_lengths == want.token_lengths and got.problems == want.problems


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


def test_random_floats_are_stored_as_the_msgspec_path_stores_them():
    rng = random.Random(11)
    for _ in range(200):
        rows = [[float_text(rng) for _ in range(rng.randint(0, 6))] for _ in range(2)]
        field = rng.choice(["advantages", "ref_logprobs", "inference_logprobs"])
        matrix = "[" + ", ".join("[" + ", ".join(row) + "]" for row in rows) + "]"
        raw = body().replace(b'"scores"', f'"{field}": {matrix}, "scores"'.encode())
        plain = simd_decode.decode_one(raw)
        if plain is None:  # simdjson's 64-bit ints stop where msgspec's do not
            assert any(abs(int(t)) >= 2**63 for r in rows for t in r if t.lstrip("-").isdigit()), raw
            continue
        assert_same_as_strict(plain, raw)


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


def test_random_cubes_are_stored_as_the_msgspec_path_stores_them():
    rng = random.Random(13)
    extremes = [0, -1, 2**31 - 1, -(2**31)]
    taken = 0
    for _ in range(200):
        top_k = rng.choice([None, 0, 1, 5])
        token_ids = random_cube(
            rng, top_k, lambda: str(rng.choice([*extremes, rng.randrange(-(2**31), 2**31)]))
        )
        logprobs = random_cube(rng, top_k, lambda: float_text(rng))
        fields = f'"distill_token_ids": {token_ids}, "distill_logprobs": {logprobs}, "scores"'
        raw = body().replace(b'"scores"', fields.encode())
        plain = simd_decode.decode_one(raw)
        if plain is None:  # a logprob written as an integer beyond 64 bits
            assert strict_json(raw) is None or re.search(rb"[\[ ,]-?\d{19,}[],]", raw), raw
            continue
        taken += 1
        assert_same_as_strict(plain, raw)
    assert taken > 150


def test_lists_are_taken_whole_or_not_at_all():
    rng = random.Random(8)
    groups = [random_group(rng) for _ in range(30)]
    groups = [g for g in groups if simd_decode.decode_one(json.dumps(g).encode()) is not None][:6]
    raw = json.dumps(groups).encode()
    plain = simd_decode.decode_many(raw)
    assert plain is not None and len(plain) == len(groups)
    for got, group in zip(plain, groups, strict=True):
        assert_same_as_strict(got, json.dumps(group).encode())
    assert simd_decode.decode_many(b" [] ") == []
    assert simd_decode.decode_many(raw[:-1] + b"," + NESTED_ROW + b"]") is None
    assert simd_decode.decode_many(b"[1]") is None
    assert simd_decode.decode_many(body()) is None
    assert [group_json(g.data) for g in decode_group_list(raw)] == [group_json(g.data) for g in plain]


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
def test_lists_give_the_exact_paths_groups(raw):
    """Whichever path takes a list (or none does), its groups are the exact paths' groups."""
    try:
        want = [_from_model(ScoredData.model_validate(g)) for g in json.loads(raw)]
        assert isinstance(json.loads(raw), list)
    except Exception:
        with pytest.raises(InvalidRequest):
            decode_group_list(raw)
        return
    got = decode_group_list(raw)
    assert [group_json(g.data) for g in got] == [group_json(g.data) for g in want]
    assert [(g.scores, g.env_id, g.token_lengths) for g in got] == [
        (g.scores, g.env_id, g.token_lengths) for g in want
    ]


def test_a_declined_body_does_not_disturb_the_next_one():
    for raw in DECLINED.values():
        assert simd_decode.decode_one(raw) is None
        assert simd_decode.decode_one(body()) is not None


def test_large_bodies_get_a_parser_of_their_own(monkeypatch):
    monkeypatch.setattr(simd_decode, "REUSE_PARSER_MAX_BYTES", 16)
    monkeypatch.setattr(simd_decode._local, "parser", None)
    assert_same_as_strict(simd_decode.decode_one(body()), body())
    assert simd_decode._local.parser is None


def test_threads_decode_concurrently():
    bodies = [body(tokens=[[i, i + 1], [i + 2, i + 3]], env_id=i) for i in range(64)]
    failures: list[str] = []

    def work(offset: int) -> None:
        for _ in range(20):
            for i in range(offset, len(bodies), 4):
                plain = simd_decode.decode_one(bodies[i])
                if plain is None or plain.env_id != i or group_json(plain.data) != strict_json(bodies[i]):
                    failures.append(f"body {i}")

    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert failures == []
