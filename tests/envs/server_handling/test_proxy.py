"""The ManagedServer OpenAI proxy (a real subprocess) and its client, ProxyManagedServer."""

from __future__ import annotations

import json
import subprocess
import sys

import openai
import pytest
import requests

from atroposlib.envs.server_handling.proxy_client import ProxyManagedServer
from atroposlib.envs.server_handling.server_baseline import APIServerConfig
from atroposlib.envs.server_handling.server_manager import ServerManager
from atroposlib.testing.api_process import free_port
from atroposlib.testing.scripted_server import launch_scripted_server
from atroposlib.utils.processes import stop_process, wait_until_ok

USER = [{"role": "user", "content": "What is 2 + 2?"}]


def answer(prompt, index):
    return f"It is {4 + index}."


@pytest.fixture(scope="module")
def backend(tiny_model_dir):
    with launch_scripted_server(respond=answer, tokenizer=str(tiny_model_dir)) as server:
        yield server


@pytest.fixture(scope="module")
def proxy(backend, tiny_model_dir, tmp_path_factory):
    """``python -m ...managed_server_proxy`` on a free port, stopped by its own pid."""
    workdir = tmp_path_factory.mktemp("proxy")
    config = workdir / "servers.json"
    config.write_text(
        json.dumps(
            {
                "model_name": str(tiny_model_dir),
                "servers": [{"base_url": backend.base_url, "server_type": "vllm"}],
            }
        )
    )
    port = free_port()
    log = open(workdir / "proxy.log", "wb")  # noqa: SIM115
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "atroposlib.envs.server_handling.managed_server_proxy",
            "--config",
            str(config),
            "--port",
            str(port),
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    wait_until_ok(
        proc, f"{url}/health", name="proxy", timeout=120, interval=0.2,
        log_tail=lambda: (workdir / "proxy.log").read_text(), on_failure=lambda: stop_process(proc),
    )  # fmt: skip
    yield url
    stop_process(proc, 15)
    log.close()


async def test_proxy_session_tracks_like_an_in_process_managed_server(backend, proxy, tiny_tokenizer):
    manager = ServerManager(
        APIServerConfig(model_name="tiny", base_url=backend.base_url, server_type="vllm", health_check=False),
        proxy_url=proxy,
    )
    async with manager.managed_server(tokenizer=tiny_tokenizer) as managed:
        assert isinstance(managed, ProxyManagedServer)
        reply = await managed.chat_completion(messages=USER, n=2, max_tokens=32, top_p=0.9, split="eval")
        assert [c.message.content for c in reply.choices] == ["It is 4.", "It is 5."]
        nodes = managed.get_state()["nodes"]  # current without another request
        assert len(nodes) == 2
        prompt_ids = tiny_tokenizer.encode(
            tiny_tokenizer.apply_chat_template(USER, tokenize=False, add_generation_prompt=True)
        )
        output = tiny_tokenizer.encode("It is 4.") + [tiny_tokenizer.eos_token_id]
        assert nodes[0].tokens == prompt_ids + output
        assert nodes[0].masked_tokens == [-100] * len(prompt_ids) + output
        assert backend.requests[-1]["body"]["top_p"] == 0.9
        conversation = USER + [
            {"role": "assistant", "content": "It is 4."},
            {"role": "user", "content": "Sure?"},
        ]
        await managed.chat_completion(messages=conversation, max_tokens=32)
        nodes = managed.get_state()["nodes"]
        assert len(nodes) == 2
        assert [t for t in nodes[0].masked_tokens if t != -100] == output + output
        completion = await managed.completion(prompt="Count: ", max_tokens=2)
        assert completion.choices[0].finish_reason == "length"
        assert len(managed.get_state()["nodes"]) == 3
        logprobs = await managed.get_logprobs(messages=USER, top_k=1)
        assert logprobs["prompt_tokens"] == prompt_ids
        # External apps use the session URL with any OpenAI client.
        client = openai.AsyncOpenAI(base_url=managed.get_url(), api_key="none")
        external = await client.chat.completions.create(model="tiny", messages=USER, max_tokens=16)
        assert external.choices[0].message.content == "It is 4."
        await client.close()
        assert len((await managed.fetch_state())["nodes"]) == 4
        session = managed.session_uuid
    assert session not in {s["uuid"] for s in requests.get(f"{proxy}/sessions", timeout=5).json()["sessions"]}
    assert len(managed.get_state()["nodes"]) == 4, "state stays readable after the block"


def test_proxy_errors_are_clear_4xx(proxy, backend):
    missing = requests.post(f"{proxy}/not-a-session/v1/chat/completions", json={"messages": USER}, timeout=5)
    assert missing.status_code == 404 and "not found" in missing.json()["error"]["message"]
    session = requests.post(f"{proxy}/sessions/create", json={}, timeout=5).json()["uuid"]
    bad = requests.post(f"{proxy}/{session}/v1/chat/completions", json={"max_tokens": 3}, timeout=5)
    assert bad.status_code == 400 and "messages" in bad.json()["error"]["message"]
    empty = requests.post(f"{proxy}/{session}/v1/chat/completions", json={"messages": []}, timeout=5)
    assert empty.status_code == 400
    pinned = requests.post(f"{proxy}/sessions/create", json={"base_url": "http://elsewhere/v1"}, timeout=5)
    assert pinned.status_code == 404 and "elsewhere" in pinned.json()["error"]["message"]
    rendered = requests.post(
        f"{proxy}/{session}/v1/chat/completions/render", json={"messages": USER}, timeout=5
    ).json()
    assert rendered["num_tokens"] == len(rendered["token_ids"]) and rendered["prompt_text"].endswith(
        "assistant\n"
    )
    servers = requests.get(f"{proxy}/servers", timeout=5).json()["servers"]
    assert servers[0]["base_url"] == backend.base_url and servers[0]["server_type"] == "vllm"
    assert requests.delete(f"{proxy}/{session}", timeout=5).json()["status"] == "deleted"
    assert requests.delete(f"{proxy}/{session}", timeout=5).status_code == 404


def test_bad_config_exits_2_with_one_line(tmp_path):
    config = tmp_path / "bad.json"
    config.write_text('{"servers": []}')
    result = subprocess.run(
        [
            sys.executable,
            "-m",
            "atroposlib.envs.server_handling.managed_server_proxy",
            "--config",
            str(config),
        ],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 2
    assert result.stderr.strip().count("\n") == 0 and "model_name" in result.stderr
