"""The compiled token-matrix scanner: it reads what ``json`` reads, and declines everything else."""

from __future__ import annotations

import json
import random

import numpy as np
import pytest

from atroposlib.api import simd_decode
from atroposlib.api._int_rows import int_rows, int_rows_pair
from atroposlib.api.stored_group import group_json
from tests.api.helpers import random_group

INT32 = (-(2**31), 2**31 - 1)
_JSON = json.JSONDecoder()


def expected(text: bytes, pos: int = 0) -> tuple[int, list[int], bytes] | None:
    """What ``int_rows`` must return, worked out with the standard library's JSON decoder."""
    stripped = text[pos:].lstrip(b" \t\r\n")
    start = len(text) - len(stripped)
    try:
        value, end = _JSON.raw_decode(text.decode("latin-1"), start)
    except ValueError:
        return None
    rows_of_ints = isinstance(value, list) and all(
        isinstance(row, list)
        and all(type(v) is int and INT32[0] <= v <= INT32[1] for v in row)  # not bool, not float
        for row in value
    )
    if not rows_of_ints:
        return None
    flat = [v for row in value for v in row]
    return end, [len(row) for row in value], np.array(flat, "<i4").tobytes()


def random_value(rng: random.Random) -> int:
    digits = rng.randint(1, 10)
    return rng.choice(
        [
            rng.randrange(10 ** (digits - 1), min(10**digits, 2**31)) * rng.choice([1, -1]),
            rng.choice([*INT32, 0, -100, 151_643]),
        ]
    )


def random_matrix_text(rng: random.Random) -> tuple[list[list[int]], bytes]:
    rows = [[random_value(rng) for _ in range(rng.randint(0, 12))] for _ in range(rng.randint(0, 5))]
    style = rng.choice(["dumps", "compact", "indent", "spaced"])
    if style == "dumps":
        text = json.dumps(rows)
    elif style == "compact":
        text = json.dumps(rows, separators=(",", ":"))
    elif style == "indent":
        text = json.dumps(rows, indent=rng.choice([1, 4, "\t"]))
    else:
        text = json.dumps(rows).replace(",", " \r\n, ").replace("[", "[ \t").replace("]", " ]")
    return rows, text.encode()


def test_random_matrices_read_as_json_reads_them():
    rng = random.Random(3)
    for _ in range(3000):
        rows, text = random_matrix_text(rng)
        prefix = rng.choice([b"", b" ", b'{"tokens": ', b"\n\t "])
        suffix = rng.choice([b"", b",", b', "masks": [[1]]}', b" ]", b" x"])
        got = int_rows(prefix + text + suffix, len(prefix) if prefix.startswith(b"{") else 0)
        assert got is not None, text
        end, lengths, values = got
        assert end == len(prefix) + len(text)
        assert lengths == [len(row) for row in rows]
        assert np.frombuffer(values, "<i4").tolist() == [v for row in rows for v in row]


def test_no_strict_prefix_of_a_matrix_is_taken():
    rng = random.Random(4)
    for _ in range(200):
        _, text = random_matrix_text(rng)
        for cut in range(len(text)):
            assert int_rows(text[:cut], 0) is None, text[:cut]


def test_mutated_matrices_are_read_exactly_or_declined():
    rng = random.Random(6)
    alphabet = b'0123456789-+,.[]eE \n\tx"{}'
    for _ in range(20000):
        _, text = random_matrix_text(rng)
        mutated = bytearray(text)
        for _ in range(rng.randint(1, 3)):
            index = rng.randrange(len(mutated) + 1)
            action = rng.randrange(3)
            if action == 0 and index < len(mutated):
                mutated[index] = rng.choice(alphabet)
            elif action == 1:
                mutated.insert(index, rng.choice(alphabet))
            elif index < len(mutated):
                del mutated[index]
        mutated = bytes(mutated)
        assert int_rows(mutated, 0) == expected(mutated), mutated


DECLINED = [
    b"",
    b"[",
    b"[1]",
    b"[[1]",
    b"[[1],",
    b"[[1,]]",
    b"[[,1]]",
    b"[[1],]",
    b"[[1]2]",
    b"[[1 2]]",
    b"[[01]]",
    b"[[-01]]",
    b"[[00]]",
    b"[[1.0]]",
    b"[[1e5]]",
    b"[[1E5]]",
    b"[[-]]",
    b"[[- 1]]",
    b"[[+1]]",
    b"[[2147483648]]",
    b"[[-2147483649]]",
    b"[[99999999999]]",
    b"[[12345678901234567890123]]",
    b'[["1"]]',
    b"[[true]]",
    b"[[null]]",
    b"[[[1]]]",
    b"[[1,[2]]]",
    b"[{}]",
    b"[[1]\f]",
    b"[[\xc2\xa01]]",
    b"{}",
    b"null",
]


@pytest.mark.parametrize("text", DECLINED)
def test_anything_but_a_plain_int32_matrix_is_declined(text):
    assert int_rows(text, 0) is None
    assert expected(text) is None  # the reference agrees


def test_extremes_and_empty_matrices():
    assert int_rows(b"[[-2147483648, 2147483647, 0, -0, 1234567890]]", 0) == (
        46,
        [5],
        np.array([-(2**31), 2**31 - 1, 0, 0, 1234567890], "<i4").tobytes(),
    )
    assert int_rows(b" []", 0) == (3, [], b"")
    assert int_rows(b"[[], [ ], []]", 0) == (13, [0, 0, 0], b"")


def test_any_buffer_is_read_and_out_of_range_positions_are_declined():
    text = b"xx[[1,2]]"
    want = (9, [2], np.array([1, 2], "<i4").tobytes())
    for data in (text, bytearray(text), memoryview(text)):
        assert int_rows(data, 2) == want
    assert int_rows(text, 0) is None
    assert int_rows(text, len(text)) is None
    assert int_rows(text, len(text) + 1) is None
    assert int_rows(text, -1) is None
    with pytest.raises(TypeError):
        int_rows("[[1]]", 0)
    with pytest.raises(TypeError):
        int_rows(text)


def test_a_pair_is_scanned_as_two_matrices_are():
    rng = random.Random(12)
    for _ in range(3000):
        texts = []
        for _ in range(2):
            _, text = random_matrix_text(rng)
            if rng.random() < 0.2:  # now and then one of them is not plain
                text = text.replace(b"]", b"", 1) if rng.random() < 0.5 else text.replace(b"1", b"1.5", 1)
            texts.append(text)
        data = texts[0] + b', "masks": ' + texts[1] + b"}"
        second = len(texts[0]) + len(b', "masks": ')
        one, two = int_rows(data, 0), int_rows(data, second)
        want = None if one is None or two is None else one + two
        assert int_rows_pair(data, 0, second) == want, data
        assert int_rows_pair(data, second, 0) == (None if want is None else two + one), data


def test_a_pair_takes_three_arguments_and_declines_positions_out_of_range():
    assert int_rows_pair(b"[[1]] [[2]]", 0, 6) == (5, [1], b"\x01\0\0\0", 11, [1], b"\x02\0\0\0")
    assert int_rows_pair(b"[[1]]", 0, 6) is None
    assert int_rows_pair(b"[[1]]", -1, 0) is None
    with pytest.raises(TypeError):
        int_rows_pair(b"[[1]]", 0)


def test_a_large_matrix():
    rng = np.random.default_rng(0)
    values = rng.integers(-(2**31), 2**31, size=(64, 4096), dtype=np.int64)
    text = json.dumps(values.tolist()).encode()
    end, lengths, data = int_rows(text, 0)
    assert end == len(text) and lengths == [4096] * 64
    assert np.array_equal(np.frombuffer(data, "<i4"), values.ravel())


@pytest.mark.parametrize("small_rest_bytes", [0, simd_decode.SMALL_REST_BYTES])
def test_groups_decode_the_same_with_the_scanner_and_with_simdjson_alone(monkeypatch, small_rest_bytes):
    """The scanner's path and the whole-body simdjson path store the same groups: byte for byte
    where simdjson decodes the rest, the same JSON where msgspec does (it keeps floats as text)."""
    monkeypatch.setattr(simd_decode, "SMALL_REST_BYTES", small_rest_bytes)
    rng = random.Random(9)
    taken = 0
    for _ in range(600):
        group = random_group(rng)
        raw = json.dumps(group, indent=rng.choice([None, 2])).encode()
        whole = simd_decode._decode(raw, many=False)
        leading = simd_decode._decode_leading_matrices(raw)
        if leading is not None and whole is not None:
            taken += 1
            if small_rest_bytes == 0:
                assert leading == whole[0], raw
            else:
                assert leading[:4] == whole[0][:4], raw
                assert group_json(leading.data) == group_json(whole[0].data), raw
        elif whole is not None:
            # declined only where the layout is not tokens-then-masks
            assert not raw.lstrip().startswith(b'{"tokens"') or b'"masks"' not in raw[:200], raw
    assert taken > 300


def test_the_usual_body_takes_the_scanner_path():
    tokens = [[random.Random(i).randrange(150_000) for _ in range(512)] for i in range(8)]
    raw = json.dumps({"tokens": tokens, "masks": tokens, "scores": [1.0] * 8}).encode()
    group = simd_decode._decode_leading_matrices(raw)
    assert group is not None and group == simd_decode.decode_one(raw)
    assert group.token_lengths == [512] * 8


def test_lists_decode_the_same_with_the_scanner_and_with_simdjson_alone():
    rng = random.Random(10)
    taken = 0
    for _ in range(200):
        groups = [random_group(rng) for _ in range(rng.randint(1, 4))]
        raw = json.dumps(groups, indent=rng.choice([None, 1])).encode()
        whole = simd_decode._decode(raw, many=True)
        leading = simd_decode._decode_leading_list(raw)
        if leading is not None and whole is not None:
            taken += 1
            assert [g[:4] for g in leading] == [g[:4] for g in whole], raw
            assert [group_json(g.data) for g in leading] == [group_json(g.data) for g in whole], raw
    assert taken > 30


def test_the_usual_list_takes_the_scanner_path():
    rng = random.Random(1)
    groups = []
    for _ in range(4):
        tokens = [[rng.randrange(150_000) for _ in range(512)] for _ in range(8)]
        groups.append({"tokens": tokens, "masks": tokens, "scores": [1.0] * 8, "env_id": 0})
    raw = json.dumps(groups).encode()
    decoded = simd_decode._decode_leading_list(raw)
    assert decoded is not None and decoded == simd_decode.decode_many(raw)
    assert [g[:4] for g in decoded] == [g[:4] for g in simd_decode._decode(raw, many=True)]
