"""ServerManager: config rules, routing, n splitting, split pass-through, health, testing mode."""

from __future__ import annotations

import asyncio
import collections

import pytest

from atroposlib.envs.server_handling.errors import ServerUnavailableError
from atroposlib.envs.server_handling.managed_server import DummyManagedServer, ManagedServer
from atroposlib.envs.server_handling.openai_server import OpenAIServer
from atroposlib.envs.server_handling.server_baseline import APIServerConfig, ServerBaseline
from atroposlib.envs.server_handling.server_harness import ServerHarness, create_chat_completion
from atroposlib.envs.server_handling.server_manager import SERVER_CLASSES, ServerManager
from atroposlib.envs.server_handling.sglang_server import SGLangServer
from atroposlib.envs.server_handling.trl_vllm_server import TrlVllmServer
from atroposlib.envs.server_handling.vllm_server import VLLMServer


def harness_config(
    name: str, capacity: int = 8, eval_capacity: int = 4, timeout: int = 1200
) -> APIServerConfig:
    return APIServerConfig(
        model_name="m",
        base_url=f"http://{name}/v1",
        health_check=False,
        num_max_requests_at_once=capacity,
        num_requests_for_eval=eval_capacity,
        timeout=timeout,
    )


def mark_unhealthy(server) -> None:
    """Simulate a failed health check (the server counts as started, so it is not reset to healthy)."""
    server.initialized = True
    server.server_healthy = False


class SlowHarness(ServerHarness):
    """A harness whose answers take ``delay`` seconds (to observe concurrency)."""

    delay = 0.02

    async def _chat_completion_wrapper(self, **kwargs):
        await asyncio.sleep(self.delay)
        return await super()._chat_completion_wrapper(**kwargs)


# -- construction ----------------------------------------------------------------------------------
def test_single_api_server_config_is_used_as_given():
    config = APIServerConfig(
        model_name="gpt", base_url="https://example.com/v1", api_key="k", health_check=False
    )
    manager = ServerManager(config)
    assert len(manager.servers) == 1
    server = manager.servers[0]
    assert isinstance(server, OpenAIServer)
    assert server.config.base_url == "https://example.com/v1" and server.config.api_key == "k"
    assert server.config.health_check is False


def test_server_baseline_without_slurm_uses_local_defaults(monkeypatch):
    monkeypatch.delenv("SLURM_JOB_NODELIST", raising=False)
    manager = ServerManager(ServerBaseline(model_name="m", server_type="sglang", timeout=33))
    assert [s.config.base_url for s in manager.servers] == [
        f"http://localhost:{p}/v1" for p in range(9004, 9008)
    ]
    assert all(isinstance(s, SGLangServer) and s.config.timeout == 33 for s in manager.servers)


def test_each_config_gets_the_class_of_its_server_type():
    configs = [
        APIServerConfig(model_name="m", base_url=f"http://h{i}/v1", server_type=kind)
        for i, kind in enumerate(["openai", "vllm", "sglang", "trl"])
    ]
    manager = ServerManager(configs)
    assert [type(s) for s in manager.servers] == [OpenAIServer, VLLMServer, SGLangServer, TrlVllmServer]
    assert SERVER_CLASSES["vllm"] is VLLMServer


def test_explicit_server_class_is_used_for_all():
    manager = ServerManager([harness_config("a"), harness_config("b")], server_class=ServerHarness)
    assert all(type(s) is ServerHarness for s in manager.servers)


def test_empty_config_list_is_rejected():
    with pytest.raises(ValueError, match="non-empty"):
        ServerManager([])


def test_proxy_mode_only_when_asked(monkeypatch):
    monkeypatch.setenv("ATROPOS_PROXY_URL", "http://proxy:9100")
    monkeypatch.delenv("ATROPOS_USE_PROXY", raising=False)
    config = harness_config("a")
    assert not ServerManager(config).use_proxy
    assert ServerManager(config).proxy_url == "http://proxy:9100"
    assert ServerManager(config, use_proxy=True).use_proxy
    assert ServerManager(config, proxy_url="http://other:1").use_proxy
    monkeypatch.setenv("ATROPOS_USE_PROXY", "1")
    assert ServerManager(config).use_proxy


# -- testing mode -------------------------------------------------------------------------------------
async def test_testing_mode_is_a_first_class_backend(tiny_tokenizer):
    manager = ServerManager(APIServerConfig(model_name="tiny", base_url="http://nowhere/v1"), testing=True)
    harness = manager.servers[0]
    assert isinstance(harness, ServerHarness) and harness.config.model_name == "tiny"
    harness.set_desired_response([{"role": "user", "content": "hi"}], create_chat_completion("hello"))
    reply = await manager.chat_completion(messages=[{"role": "user", "content": "hi"}])
    assert reply.choices[0].message.content == "hello"
    other = await manager.chat_completion(messages=[{"role": "user", "content": "?"}], n=3)
    assert [c.message.content for c in other.choices] == [harness.default_response] * 3
    completion = await manager.completion(prompt="2+2=", n=2, split="eval")
    assert len(completion.choices) == 2
    harness.tokenizer = tiny_tokenizer
    async with manager.managed_server(tokenizer=tiny_tokenizer) as managed:
        assert isinstance(managed, ManagedServer)
        await managed.chat_completion(messages=[{"role": "user", "content": "hi"}], n=2, max_tokens=50)
        nodes = managed.get_state()["nodes"]
        assert len(nodes) == 2 and nodes[0].masked_tokens[-1] == tiny_tokenizer.eos_token_id
    metrics = await manager.wandb_metrics({})
    assert metrics["server/server_0_average_num_attempts"] == 1.0
    assert "server/server_0_eval_request_time_avg" in metrics
    assert manager.servers[0].server_healthy


# -- n splitting ----------------------------------------------------------------------------------------
async def test_large_n_is_split_and_indices_renumbered():
    manager = ServerManager(harness_config("a"), server_class=ServerHarness, max_n_completions=3)
    harness = manager.servers[0]
    harness.respond = lambda prompt, i: f"choice {i}"
    reply = await manager.chat_completion(messages=[{"role": "user", "content": "x"}], n=8)
    assert [c.index for c in reply.choices] == list(range(8))
    assert [call["n"] for call in harness.calls] == [3, 3, 2]
    completion = await manager.completion(prompt="p", n=7)
    assert [c.index for c in completion.choices] == list(range(7))
    prompt_tokens, outputs, logprobs, finishes = await manager.tokens_and_logprobs_completion(prompt="p", n=5)
    assert len(outputs) == len(logprobs) == len(finishes) == 5 and prompt_tokens == list(b"p")


# -- split -------------------------------------------------------------------------------------------
async def test_eval_split_reaches_the_server_and_uses_eval_semaphore():
    manager = ServerManager(harness_config("a", capacity=8, eval_capacity=2), server_class=SlowHarness)
    server = manager.servers[0]
    seen = []

    async def watch():
        for _ in range(20):
            seen.append((server.sem.in_use, server.eval_sem.in_use))
            await asyncio.sleep(0.005)

    await asyncio.gather(
        watch(),
        *[
            manager.chat_completion(messages=[{"role": "user", "content": "e"}], split="eval")
            for _ in range(4)
        ],
    )
    assert max(e for _, e in seen) == 2
    assert max(t for t, _ in seen) == 0
    assert len(server.eval_request_timings) == 4 and len(server.request_timings) == 0


# -- load balancing --------------------------------------------------------------------------------------
async def test_load_follows_capacity():
    manager = ServerManager(
        [harness_config("big", capacity=8), harness_config("small", capacity=2)], server_class=SlowHarness
    )
    big, small = manager.servers
    peaks = collections.Counter()

    async def watch():
        for _ in range(30):
            peaks["big"] = max(peaks["big"], big.sem.in_use)
            peaks["small"] = max(peaks["small"], small.sem.in_use)
            await asyncio.sleep(0.003)

    await asyncio.gather(
        watch(), *[manager.chat_completion(messages=[{"role": "user", "content": str(i)}]) for i in range(10)]
    )
    assert peaks == {"big": 8, "small": 2}
    assert len(big.calls) == 8 and len(small.calls) == 2


async def test_idle_servers_take_turns():
    manager = ServerManager([harness_config("a"), harness_config("b")], server_class=ServerHarness)
    for i in range(6):
        await manager.chat_completion(messages=[{"role": "user", "content": str(i)}])
    assert [len(s.calls) for s in manager.servers] == [3, 3]


async def test_weight_limits_routing_capacity():
    manager = ServerManager(harness_config("a", capacity=8), server_class=SlowHarness)
    await manager.update_weight(0.25)
    server = manager.servers[0]
    peak = 0

    async def watch():
        nonlocal peak
        for _ in range(30):
            peak = max(peak, server.sem.in_use)
            await asyncio.sleep(0.003)

    await asyncio.gather(
        watch(), *[manager.chat_completion(messages=[{"role": "user", "content": "w"}]) for _ in range(8)]
    )
    assert peak == 2


async def test_wait_for_sem_wakes_on_release():
    manager = ServerManager(harness_config("a", capacity=1), server_class=ServerHarness)
    sem = manager.servers[0].sem
    await sem.acquire()
    waiter = asyncio.create_task(manager.wait_for_sem(True))
    await asyncio.sleep(0.02)
    assert not waiter.done()
    sem.release()
    await asyncio.wait_for(waiter, 0.5)


async def test_dedicated_server_holds_a_slot():
    manager = ServerManager([harness_config("a"), harness_config("b")], server_class=ServerHarness)
    async with manager.dedicated_server() as server:
        assert server.sem.in_use == 1
        reply = await server.chat_completion(messages=[{"role": "user", "content": "turn"}])
        assert reply.choices[0].message.content
    assert server.sem.in_use == 0


# -- health ----------------------------------------------------------------------------------------------
async def test_unhealthy_server_is_skipped():
    manager = ServerManager([harness_config("a"), harness_config("b")], server_class=ServerHarness)
    mark_unhealthy(manager.servers[0])
    for i in range(4):
        await manager.chat_completion(messages=[{"role": "user", "content": str(i)}])
    assert [len(s.calls) for s in manager.servers] == [0, 4]


async def test_requests_wait_for_recovery_then_proceed():
    manager = ServerManager(harness_config("a"), server_class=ServerHarness)
    server = manager.servers[0]
    mark_unhealthy(server)
    request = asyncio.create_task(manager.chat_completion(messages=[{"role": "user", "content": "r"}]))
    await asyncio.sleep(0.05)
    assert not request.done()
    server.server_healthy = True
    reply = await asyncio.wait_for(request, 1)
    assert reply.choices


async def test_all_unhealthy_fails_after_the_timeout():
    manager = ServerManager(harness_config("a", timeout=1), server_class=ServerHarness)
    mark_unhealthy(manager.servers[0])
    with pytest.raises(ServerUnavailableError, match="no inference server is answering"):
        await manager.chat_completion(messages=[{"role": "user", "content": "r"}])


# -- managed_server ----------------------------------------------------------------------------------------
async def test_managed_server_on_openai_needs_opt_in(monkeypatch):
    config = APIServerConfig(model_name="m", base_url="http://h/v1", health_check=False)
    manager = ServerManager(config)
    monkeypatch.delenv("ATROPOS_ALLOW_DUMMY_MANAGED_SERVER", raising=False)
    with pytest.raises(NotImplementedError, match="ATROPOS_ALLOW_DUMMY_MANAGED_SERVER"):
        async with manager.managed_server():
            pass
    monkeypatch.setenv("ATROPOS_ALLOW_DUMMY_MANAGED_SERVER", "1")
    with pytest.warns(UserWarning, match="placeholders"):
        async with manager.managed_server() as managed:
            assert isinstance(managed, DummyManagedServer)


async def test_managed_server_can_be_pinned_by_base_url(tiny_tokenizer):
    manager = ServerManager(
        [harness_config("a"), harness_config("b")], server_class=ServerHarness, tool_parser=None
    )
    async with manager.managed_server(tokenizer=tiny_tokenizer, base_url="http://b/v1") as managed:
        assert managed.server is manager.servers[1]
        await managed.completion(prompt="hello", max_tokens=5)
        assert len(managed.get_state()["nodes"]) == 1
    assert managed.get_state()["nodes"] == []
    with pytest.raises(ValueError, match="no server with base_url"):
        async with manager.managed_server(base_url="http://c/v1"):
            pass


@pytest.mark.parametrize("kind", ["vllm", "sglang", "trl"])
def test_self_hosted_backends_need_a_base_url(kind):
    with pytest.raises(ValueError, match=f"server_type '{kind}' needs base_url"):
        ServerManager(APIServerConfig(model_name="m", server_type=kind))


async def test_waiting_requests_are_woken_one_per_free_slot():
    manager = ServerManager(harness_config("a", capacity=2), server_class=SlowHarness)
    manager.servers[0].delay = 0.001
    original = manager._select
    calls = 0

    def counting(is_training):
        nonlocal calls
        calls += 1
        return original(is_training)

    manager._select = counting
    replies = await asyncio.gather(
        *[manager.chat_completion(messages=[{"role": "user", "content": "x"}]) for _ in range(200)]
    )
    assert len(replies) == 200
    assert calls < 4 * 200, f"{calls} routing attempts for 200 requests: waiters are woken in bulk"


async def test_cancelled_waiter_passes_its_wake_up_on():
    manager = ServerManager(harness_config("a", capacity=1), server_class=ServerHarness)
    sem = manager.servers[0].sem
    await sem.acquire()
    first = asyncio.create_task(manager.wait_for_sem(True))
    second = asyncio.create_task(manager.wait_for_sem(True))
    await asyncio.sleep(0.01)
    sem.release()  # wakes `first` only
    first.cancel()
    await asyncio.wait_for(second, 1)
