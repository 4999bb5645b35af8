"""The scripted inference server itself: response shapes, knobs, request log, subprocess mode."""

from __future__ import annotations

import openai
import pytest
import requests

from atroposlib.testing.scripted_server import ScriptedBackend, launch_scripted_server, scripted_logprob


def test_fixed_responses_cycle_and_are_logged(tiny_model_dir):
    with launch_scripted_server(responses=["a", "b", "c"], tokenizer=str(tiny_model_dir)) as server:
        client = openai.OpenAI(base_url=server.base_url, api_key="x")
        reply = client.chat.completions.create(model="m", messages=[{"role": "user", "content": "q"}], n=2)
        assert [c.message.content for c in reply.choices] == ["a", "b"]
        text = client.completions.create(model="m", prompt="p", max_tokens=8)
        assert text.choices[0].text == "c"
        assert [r["path"] for r in server.requests] == ["/v1/chat/completions", "/v1/completions"]
        assert server.requests[0]["body"]["n"] == 2
        assert client.models.list().data[0].id == "scripted-model"
        assert server.base_url.startswith("http://127.0.0.1:") and server.base_url.endswith("/v1")


def test_completions_with_token_ids_logprobs_and_prompt_logprobs(tiny_model_dir, tiny_tokenizer):
    with launch_scripted_server(responses=["seven"], tokenizer=str(tiny_model_dir)) as server:
        ids = tiny_tokenizer.encode("count to")
        body = {
            "model": "m",
            "prompt": ids,
            "logprobs": 0,
            "return_token_ids": True,
            "prompt_logprobs": 1,
            "n": 2,
        }
        choices = requests.post(f"{server.base_url}/completions", json=body, timeout=10).json()["choices"]
        expected = tiny_tokenizer.encode("seven") + [tiny_tokenizer.eos_token_id]
        assert [c["index"] for c in choices] == [0, 1]
        assert choices[0]["token_ids"] == expected and choices[0]["prompt_token_ids"] == ids
        assert choices[0]["logprobs"]["token_logprobs"] == [
            scripted_logprob(t, j) for j, t in enumerate(expected)
        ]
        assert choices[0]["prompt_logprobs"][0] is None and len(choices[0]["prompt_logprobs"]) == len(ids)


def test_generate_contract(tiny_model_dir, tiny_tokenizer):
    with launch_scripted_server(responses=["ok then"], tokenizer=str(tiny_model_dir)) as server:
        ids = tiny_tokenizer.encode("hello")
        body = {
            "prompt": {"prompt_token_ids": ids},
            "logprobs": 0,
            "n": 2,
            "max_tokens": 2,
            "prompt_logprobs": 1,
        }
        reply = requests.post(f"{server.root_url}/generate", json=body, timeout=10).json()
        assert reply["finish_reasons"] == ["length", "length"] and reply["prompt"] == "hello"
        first = tiny_tokenizer.encode("ok then")[:2]
        assert reply["token_ids"][0] == first
        assert reply["logprobs"][0] == [[{str(t): scripted_logprob(t, j)}] for j, t in enumerate(first)]
        assert reply["prompt_token_ids"] == ids and reply["prompt_logprobs"][0] is None


def test_knobs_and_bad_requests(tiny_model_dir):
    with launch_scripted_server(tokenizer=str(tiny_model_dir)) as server:
        url = f"{server.base_url}/chat/completions"
        messages = [{"role": "user", "content": "q"}]
        server.control(fail_next=1, fail_status=429)
        assert requests.post(url, json={"messages": messages}, timeout=5).status_code == 429
        assert requests.post(url, json={"messages": messages}, timeout=5).status_code == 200
        assert requests.post(url, json={"messages": []}, timeout=5).status_code == 400
        assert requests.post(url, data=b"not json", timeout=5).status_code == 400
        assert requests.post(url, json={"messages": messages, "n": 0}, timeout=5).status_code == 400
        server.control(healthy=False)
        assert requests.get(f"{server.root_url}/health", timeout=5).status_code == 503
        server.control(healthy=True, generate_route=False, ignore_n=True)
        assert requests.get(f"{server.root_url}/health", timeout=5).status_code == 200
        assert (
            requests.post(f"{server.root_url}/generate", json={"prompt": "x"}, timeout=5).status_code == 404
        )
        reply = requests.post(url, json={"messages": messages, "n": 3}, timeout=5).json()
        assert len(reply["choices"]) == 1


def test_stop_strings_and_respond_errors():
    backend = ScriptedBackend(responses=["abc STOP def"])
    gen = backend.generate("p", 1, None, stop=["STOP"])[0]
    assert gen.text == "abc " and gen.finish_reason == "stop" and 256 not in gen.token_ids
    with pytest.raises(ValueError, match="either respond or responses"):
        ScriptedBackend(respond=lambda p, i: "x", responses=["y"])


def test_subprocess_mode(tiny_model_dir):
    with launch_scripted_server(
        responses=["from the subprocess"], tokenizer=str(tiny_model_dir), in_subprocess=True, delay_s=0.01
    ) as server:
        reply = requests.post(
            f"{server.base_url}/chat/completions",
            json={"messages": [{"role": "user", "content": "q"}]},
            timeout=10,
        ).json()
        assert reply["choices"][0]["message"]["content"] == "from the subprocess"
        assert server.requests[0]["path"] == "/v1/chat/completions"
        server.control(healthy=False)
        assert requests.get(f"{server.root_url}/health", timeout=5).status_code == 503
    with pytest.raises(ValueError, match="module:function"):
        with launch_scripted_server(respond=lambda p, i: "x", in_subprocess=True):
            pass
