"""Decoding, content checks, admission checks and the stored form of scored groups."""

from __future__ import annotations

import json
import random

import orjson
import pytest

from atroposlib.api.admission import AdmissionRules, admission_problems, check_groups, content_problems
from atroposlib.api.decode import _lax_group, decode_group, decode_group_list
from atroposlib.api.errors import InvalidRequest
from atroposlib.api.schemas import ScoredData
from atroposlib.group import FIELD_NAMES
from tests.helpers.api import random_group


def body(**fields):
    base = {"tokens": [[1, 2], [3, 4]], "masks": [[1, 2], [3, 4]], "scores": [0.0, 1.0]}
    base.update(fields)
    return json.dumps(base).encode()


def kinds(problems):
    return [p["type"] for p in problems]


def stored(group):
    return orjson.loads(group.data)


def test_decode_coerces_like_the_original():
    group = decode_group(b'{"tokens": [[1.0, "2"]], "masks": [[1, 2]], "scores": [1], "extra": 5}')
    assert stored(group)["tokens"] == [[1, 2]] and group.scores == [1.0]
    assert "extra" not in stored(group) and stored(group)["scores"] == [1.0]


def test_decode_errors_have_fastapi_shape():
    with pytest.raises(InvalidRequest) as info:
        decode_group(b'{"tokens": [[1.5]], "masks": [[1]], "scores": [1]}')
    assert info.value.errors[0]["loc"] == ["body", "tokens", 0, 0]
    with pytest.raises(InvalidRequest) as info:
        decode_group(b"{")
    assert info.value.errors[0]["type"] == "json_invalid" and info.value.errors[0]["loc"][0] == "body"
    with pytest.raises(InvalidRequest) as info:
        decode_group(b"")
    assert info.value.errors == [{"type": "missing", "loc": ["body"], "msg": "Field required", "input": None}]
    with pytest.raises(InvalidRequest) as info:
        decode_group_list(b'[{"tokens": [[1]], "masks": [[1]], "scores": [1]}, {"tokens": 1}]')
    assert info.value.errors[0]["loc"][:2] == ["body", 1]


def test_large_inputs_are_elided_from_errors():
    with pytest.raises(InvalidRequest) as info:
        decode_group(orjson.dumps({"tokens": [list(range(5000))], "masks": [[1]]}))
    assert info.value.errors[0]["type"] == "missing"
    assert len(orjson.dumps(info.value.errors)) < 2000


def test_content_problems():
    ok = decode_group(body())
    assert content_problems(ok) == []
    assert kinds(content_problems(decode_group(body(tokens=[], masks=[], scores=[])))) == ["empty_group"]
    assert kinds(content_problems(decode_group(body(masks=[[1, 2]])))) == ["length_mismatch"]
    assert kinds(content_problems(decode_group(body(scores=[1.0])))) == ["length_mismatch"]
    assert kinds(content_problems(decode_group(body(masks=[[1, 2], [3]])))) == ["length_mismatch"]
    assert kinds(content_problems(decode_group(body(tokens=[[1, 2], [2**31]], masks=[[1, 2], [1]])))) == [
        "int32_range"
    ]
    assert kinds(content_problems(decode_group(body(env_id=-3)))) == ["greater_than_equal"]
    distill = decode_group(body(distill_token_ids=[[[1, 2**33]], [[1]]]))
    assert [p["loc"] for p in content_problems(distill)] == [["distill_token_ids", 0, 0, 1]]
    nan_messages = ScoredData(
        tokens=[[1]], masks=[[1]], scores=[1.0], messages=[[{"role": "a", "content": float("nan")}]]
    )
    assert kinds(content_problems(_lax_group(nan_messages.to_group()))) == ["finite_number"]


def test_admission_problems():
    group = decode_group(body(env_id=0))
    assert admission_problems(group, AdmissionRules()) == [
        {
            "type": "unknown_env_id",
            "loc": ["env_id"],
            "msg": "unknown env_id 0: 0 environment(s) are registered; register with /register-env first",
            "input": 0,
        }
    ]
    assert admission_problems(group, AdmissionRules(batch_size=4, env_group_sizes=(2,))) == []
    assert kinds(admission_problems(group, AdmissionRules(env_group_sizes=(1,)))) == ["unbatchable_group"]
    assert kinds(admission_problems(group, AdmissionRules(env_group_sizes=(3,)))) == ["unbatchable_group"]
    assert admission_problems(group, AdmissionRules(env_group_sizes=(4,))) == []  # a partial group: buffered
    assert kinds(admission_problems(group, AdmissionRules(batch_size=6, env_group_sizes=(2,)))) == []
    assert kinds(admission_problems(group, AdmissionRules(batch_size=5, env_group_sizes=(2,)))) == [
        "unbatchable_group"
    ]
    plain = decode_group(body())
    assert kinds(admission_problems(plain, AdmissionRules(env_id_required=True))) == ["env_id_required"]
    assert kinds(admission_problems(plain, AdmissionRules(max_token_len=1))) == ["sequence_too_long"] * 2


def test_check_groups_prefixes_locations():
    good, bad = decode_group(body()), decode_group(body(scores=[]))
    check_groups([good], AdmissionRules(), in_list=False)
    with pytest.raises(InvalidRequest) as info:
        check_groups([good, bad], AdmissionRules(), in_list=True)
    assert info.value.errors[0]["loc"] == ["body", 1, "scores"]
    assert info.value.errors[0]["msg"].startswith("group 1: ")


def test_stored_form_is_the_fourteen_key_dict():
    data = stored(decode_group(body(images=["x"])))
    assert tuple(data) == FIELD_NAMES
    assert data["images"] == ["x"] and data["env_id"] is None
    big = decode_group(body(generation_params={"seed": 2**80}))
    assert stored(big)["generation_params"]["seed"] == 2**80  # kept exactly


def test_typed_decode_and_pydantic_agree():
    """The typed decode stores and checks a group exactly as the original's model reads it."""
    rng = random.Random(11)
    for _ in range(400):
        raw = json.dumps(random_group(rng), indent=rng.choice([None, 1])).encode()
        typed = decode_group(raw)
        lax = _lax_group(ScoredData.model_validate_json(raw).to_group())
        assert stored(typed) == stored(lax), raw
        assert (typed.token_lengths, typed.scores, typed.env_id) == (
            lax.token_lengths,
            lax.scores,
            lax.env_id,
        )
        assert content_problems(typed) == content_problems(lax)


def test_list_decoding_matches_single_decoding():
    rng = random.Random(3)
    groups = [random_group(rng) for _ in range(20)]
    listed = decode_group_list(json.dumps(groups).encode())
    single = [decode_group(json.dumps(g).encode()) for g in groups]
    assert [stored(g) for g in listed] == [stored(g) for g in single]
