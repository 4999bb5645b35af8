"""The backend clients over real HTTP against the scripted inference server."""

from __future__ import annotations

import asyncio

import openai
import pytest

from atroposlib.envs.server_handling.errors import ServerUnavailableError
from atroposlib.envs.server_handling.openai_server import OpenAIServer
from atroposlib.envs.server_handling.server_baseline import APIServerConfig
from atroposlib.envs.server_handling.server_manager import ServerManager
from atroposlib.envs.server_handling.sglang_server import SGLangServer
from atroposlib.envs.server_handling.trl_vllm_server import TrlVllmServer
from atroposlib.envs.server_handling.vllm_server import VLLMServer
from atroposlib.testing.api_process import free_port
from atroposlib.testing.scripted_server import launch_scripted_server, scripted_logprob

from .conftest import make_fast

USER = [{"role": "user", "content": "hello there"}]


def config_for(server, **overrides) -> APIServerConfig:
    values = {"model_name": "scripted-model", "base_url": server.base_url, "api_key": "k"}
    values.update(overrides)
    return APIServerConfig(**values)


def generation_requests(server) -> list[dict]:
    return [r for r in server.requests if r["path"] != "/_scripted/requests"]


async def wait_until(predicate, timeout: float = 5.0) -> None:
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout
    while not predicate():
        assert loop.time() < deadline, "condition not reached"
        await asyncio.sleep(0.01)


# -- OpenAIServer ----------------------------------------------------------------------------------------
async def test_openai_server_chat_and_completion(scripted):
    server = make_fast(OpenAIServer(config_for(scripted)))
    reply = await server.chat_completion(messages=USER, n=3, max_tokens=40, temperature=0.7)
    assert [c.index for c in reply.choices] == [0, 1, 2]
    assert reply.choices[2].message.content == "reply 2: hello there"
    completion = await server.completion(prompt="Once upon", n=2, max_tokens=40, split="eval")
    assert completion.choices[1].text.startswith("reply 1:")
    assert len(server.request_timings) == 1 and len(server.eval_request_timings) == 1
    body = generation_requests(scripted)[0]["body"]
    assert body["model"] == "scripted-model" and body["n"] == 3 and body["temperature"] == 0.7
    await server.close()


async def test_response_messages_can_be_sent_back(scripted):
    server = make_fast(OpenAIServer(config_for(scripted)))
    first = await server.chat_completion(messages=USER)
    history = USER + [first.choices[0].message, {"role": "user", "content": "more"}]
    second = await server.chat_completion(messages=history, extra_body={"top_k": 3})
    assert second.choices[0].message.content == "reply 0: more"
    body = generation_requests(scripted)[-1]["body"]
    assert (
        body["messages"][1]["role"] == "assistant"
        and body["messages"][1]["content"] == "reply 0: hello there"
    )
    assert body["top_k"] == 3 and "extra_body" not in body
    await server.close()


async def test_server_that_ignores_n(scripted):
    scripted.control(ignore_n=True)
    server = make_fast(OpenAIServer(config_for(scripted)))
    reply = await server.chat_completion(messages=USER, n=3)
    assert [c.index for c in reply.choices] == [0, 1, 2]
    assert server.config.n_kwarg_is_ignored
    assert len(generation_requests(scripted)) == 3
    await server.chat_completion(messages=USER, n=1)
    assert len(generation_requests(scripted)) == 4  # one request for n=1, not two
    await server.close()


async def test_transient_errors_are_retried(scripted):
    server = make_fast(OpenAIServer(config_for(scripted)))
    scripted.control(fail_next=2, fail_status=503)
    reply = await server.chat_completion(messages=USER)
    assert reply.choices[0].message.content.startswith("reply 0")
    assert list(server.attempts_list) == [3]
    assert len(generation_requests(scripted)) == 3
    await server.close()


async def test_client_errors_fail_at_once_with_the_original_exception(scripted):
    server = make_fast(OpenAIServer(config_for(scripted)))
    scripted.control(fail_next=1, fail_status=400)
    with pytest.raises(openai.BadRequestError):
        await server.chat_completion(messages=USER)
    assert len(generation_requests(scripted)) == 1
    scripted.control(fail_next=5, fail_status=500)
    with pytest.raises(openai.InternalServerError):
        await server.completion(prompt="x")
    assert len(generation_requests(scripted)) == 1 + server.max_attempts
    assert server.failed_requests == 2
    await server.close()


async def test_health_check_spends_no_completions_and_gates_requests(scripted):
    server = make_fast(OpenAIServer(config_for(scripted)))
    await server.chat_completion(messages=USER)
    await asyncio.sleep(0.2)  # several health probes
    assert len(generation_requests(scripted)) == 1
    scripted.control(healthy=False)
    await wait_until(lambda: not server.server_healthy)
    pending = asyncio.create_task(server.chat_completion(messages=USER))
    await asyncio.sleep(0.2)
    assert not pending.done()
    scripted.control(healthy=True)
    reply = await asyncio.wait_for(pending, 5)
    assert reply.choices
    await server.close()


async def test_unhealthy_server_deadline(scripted):
    server = make_fast(OpenAIServer(config_for(scripted, timeout=1)))
    await server.chat_completion(messages=USER)
    scripted.control(healthy=False)
    await wait_until(lambda: not server.server_healthy)
    with pytest.raises(ServerUnavailableError, match="has not answered for"):
        await server.chat_completion(messages=USER)
    await server.close()


async def test_unreachable_server_is_marked_unhealthy_and_errors_clearly():
    config = APIServerConfig(model_name="m", base_url=f"http://127.0.0.1:{free_port()}/v1", timeout=1)
    server = make_fast(OpenAIServer(config))
    with pytest.raises((openai.APIConnectionError, ServerUnavailableError)):
        await server.chat_completion(messages=USER)
    await wait_until(lambda: not server.server_healthy)
    await server.close()


async def test_manager_routes_around_an_unhealthy_server(tiny_model_dir):
    with (
        launch_scripted_server(responses=["from a"], tokenizer=str(tiny_model_dir)) as a,
        launch_scripted_server(responses=["from b"], tokenizer=str(tiny_model_dir)) as b,
    ):
        manager = ServerManager([config_for(a), config_for(b)])
        for server in manager.servers:
            make_fast(server)
        await asyncio.gather(*[manager.chat_completion(messages=USER) for _ in range(4)])
        assert len(generation_requests(a)) == 2 and len(generation_requests(b)) == 2
        a.control(healthy=False)
        await wait_until(lambda: not manager.servers[0].server_healthy)
        replies = [await manager.chat_completion(messages=USER) for _ in range(4)]
        assert {r.choices[0].message.content for r in replies} == {"from b"}
        await manager.close()


# -- VLLMServer ----------------------------------------------------------------------------------------
def expected_output(tokenizer, text: str) -> list[int]:
    return tokenizer.encode(text, add_special_tokens=False) + [tokenizer.eos_token_id]


def vllm_client(scripted, tiny_model_dir) -> VLLMServer:
    """A fast :class:`VLLMServer` for the scripted server that tokenises with the tiny model."""
    return make_fast(VLLMServer(config_for(scripted, server_type="vllm", tokenizer_name=str(tiny_model_dir))))


@pytest.fixture(params=["generate", "openai"])
def route(request, scripted) -> str:
    """The token route the scripted server offers: vLLM's ``/generate``, or only the OpenAI completions."""
    if request.param == "openai":
        scripted.control(generate_route=False)
    return request.param


async def test_vllm_tokens_and_logprobs(scripted, tiny_model_dir, tiny_tokenizer, route):
    server = vllm_client(scripted, tiny_model_dir)
    prompt_ids = tiny_tokenizer.encode("Question: 2 + 2?")
    prompt_tokens, outputs, logprobs, finishes = await server.tokens_and_logprobs_completion(
        input_ids=prompt_ids, prompt="ignored when input_ids are given", n=2, max_tokens=64, temperature=1.0
    )
    assert server.token_api == route
    assert prompt_tokens == prompt_ids
    tail = tiny_tokenizer.decode(prompt_ids)[-12:].replace("\n", " ")
    for i in range(2):
        assert outputs[i] == expected_output(tiny_tokenizer, f"reply {i}: {tail}")
        assert logprobs[i] == [pytest.approx(scripted_logprob(t, j)) for j, t in enumerate(outputs[i])]
    assert finishes == ["stop", "stop"]
    # Text prompt (tokenised by the client on /generate, by the server on /v1/completions) and truncation.
    prompt_tokens, outputs, _, finishes = await server.tokens_and_logprobs_completion(
        prompt="Question: 2 + 2?", max_tokens=3
    )
    assert prompt_tokens == prompt_ids and len(outputs[0]) == 3 and finishes == ["length"]
    paths = {r["path"] for r in generation_requests(scripted)}
    assert paths == ({"/generate"} if route == "generate" else {"/v1/completions"})
    await server.close()


async def test_vllm_get_logprobs(scripted, tiny_model_dir, tiny_tokenizer, route):
    server = vllm_client(scripted, tiny_model_dir)
    ids = tiny_tokenizer.encode("one two three")
    result = await server.get_logprobs(input_ids=ids, top_k=2)
    assert result["prompt_tokens"] == ids
    assert result["prompt_topk_token_ids"][0] == []
    for pos in range(1, len(ids)):
        assert result["prompt_topk_token_ids"][pos] == [ids[pos], ids[pos] + 1]
        assert result["prompt_topk_logprobs"][pos][0] == pytest.approx(scripted_logprob(ids[pos], pos))
    body = generation_requests(scripted)[-1]["body"]
    assert body["temperature"] == 0.0 and body["n"] == 1 and body["prompt_logprobs"] == 2
    await server.close()


async def test_vllm_extra_body_and_aliases_are_flattened(scripted, tiny_model_dir):
    server = vllm_client(scripted, tiny_model_dir)
    await server.tokens_and_logprobs_completion(
        input_ids=[5, 6, 7], max_new_tokens=4, extra_body={"min_p": 0.1}, timeout=30, split="eval"
    )
    body = generation_requests(scripted)[-1]["body"]
    assert body["max_tokens"] == 4 and body["min_p"] == 0.1
    assert "extra_body" not in body and "timeout" not in body and "split" not in body and "model" not in body
    assert len(server.eval_request_timings) == 1
    await server.close()


async def test_vllm_tokenizer_is_not_loaded_in_the_constructor():
    server = VLLMServer(
        APIServerConfig(model_name="no/such-model-anywhere", base_url="http://127.0.0.1:9/v1")
    )
    assert not server._tokenizer.loaded()
    with pytest.raises(RuntimeError, match="cannot load tokenizer 'no/such-model-anywhere'"):
        server.tokenizer  # noqa: B018


# -- SGLangServer --------------------------------------------------------------------------------------
async def test_sglang_tokens_and_logprobs(scripted, tiny_model_dir, tiny_tokenizer):
    server = make_fast(
        SGLangServer(config_for(scripted, server_type="sglang", tokenizer_name=str(tiny_model_dir)))
    )
    prompt_tokens, outputs, logprobs, finishes = await server.tokens_and_logprobs_completion(
        prompt="Question: 3 + 4?", n=2, max_tokens=5
    )
    assert prompt_tokens == tiny_tokenizer.encode("Question: 3 + 4?")
    assert len(outputs) == 2 and all(len(o) == 5 for o in outputs) and finishes == ["length", "length"]
    assert logprobs[0] == [pytest.approx(scripted_logprob(t, j)) for j, t in enumerate(outputs[0])]
    body = generation_requests(scripted)[-1]["body"]
    assert body["sampling_params"]["max_new_tokens"] == 5 and body["return_logprob"] is True
    result = await server.get_logprobs(input_ids=prompt_tokens, top_k=3)
    assert result["prompt_topk_token_ids"][1][0] == prompt_tokens[1]
    assert len(result["prompt_topk_logprobs"][1]) == 3
    await server.close()


# -- TrlVllmServer -------------------------------------------------------------------------------------
async def test_trl_server(tiny_model_dir, tiny_tokenizer):
    with launch_scripted_server(responses=["forty two"], tokenizer=str(tiny_model_dir)) as trl:
        server = make_fast(
            TrlVllmServer(
                APIServerConfig(model_name=str(tiny_model_dir), base_url=trl.root_url, server_type="trl")
            )
        )
        reply = await server.chat_completion(messages=USER, n=2, max_tokens=32)
        assert [c.message.content for c in reply.choices] == ["forty two", "forty two"]
        assert reply.choices[0].finish_reason == "stop"
        body = generation_requests(trl)[-1]["body"]
        assert body["prompts"] == [
            tiny_tokenizer.apply_chat_template(USER, tokenize=False, add_generation_prompt=True)
        ]
        assert body["top_k"] == -1 and body["max_tokens"] == 32
        completion = await server.completion(prompt="x", max_tokens=2)
        assert completion.choices[0].finish_reason == "length"
        prompt_tokens, outputs, logprobs, _ = await server.tokens_and_logprobs_completion(
            prompt="Hi", max_tokens=32
        )
        assert outputs[0] == expected_output(tiny_tokenizer, "forty two")
        assert len(logprobs[0]) == len(outputs[0]) and prompt_tokens == tiny_tokenizer.encode("Hi")
        await server.close()
    with launch_scripted_server(
        responses=["x"], tokenizer=str(tiny_model_dir), trl_logprobs=False
    ) as old_trl:
        server = TrlVllmServer(
            APIServerConfig(model_name=str(tiny_model_dir), base_url=old_trl.root_url, server_type="trl")
        )
        with pytest.raises(NotImplementedError, match="does not return logprobs"):
            await server.tokens_and_logprobs_completion(prompt="Hi")
        await server.close()


async def test_down_server_wait_is_reported_at_a_steady_interval(caplog):
    url = f"http://127.0.0.1:{free_port()}/v1"
    server = make_fast(OpenAIServer(APIServerConfig(model_name="m", base_url=url)))
    server.unhealthy_report_interval = 0.1
    caplog.set_level("INFO", logger="atroposlib.envs.server_handling.server_baseline")
    request = asyncio.create_task(server.chat_completion(messages=USER))
    await wait_until(lambda: sum("still waiting" in r.getMessage() for r in caplog.records) >= 3)
    assert not request.done()  # the timeout (1200 s) has not passed: still waiting
    started = [r.getMessage() for r in caplog.records if "is not answering" in r.getMessage()]
    assert len(started) == 1 and url in started[0] and "cannot connect" in started[0]
    reports = [r.getMessage() for r in caplog.records if "still waiting" in r.getMessage()]
    assert all(url in m and "has not answered for" in m and "--openai.base_url" in m for m in reports)
    request.cancel()
    await asyncio.gather(request, return_exceptions=True)
    await server.close()


async def test_unavailable_grace_ends_the_wait_with_what_to_check():
    url = f"http://127.0.0.1:{free_port()}/v1"
    manager = ServerManager(APIServerConfig(model_name="m", base_url=url))
    make_fast(manager.servers[0])
    manager.unavailable_grace = 0.3
    assert manager.unavailable_error() is None  # no request yet: nothing known to be down
    with pytest.raises(ServerUnavailableError) as info:
        await manager.chat_completion(messages=USER)
    message = str(info.value)
    assert url in message and "cannot connect" in message and "--openai.base_url" in message
    # Later requests fail at once: the server is still known to be down.
    with pytest.raises(ServerUnavailableError):
        await manager.chat_completion(messages=USER)
    assert isinstance(manager.unavailable_error(), ServerUnavailableError)
    await manager.close()


async def test_server_answering_again_ends_the_wait(tiny_model_dir):
    with launch_scripted_server(respond=lambda p, i: "back", tokenizer=str(tiny_model_dir)) as scripted:
        manager = ServerManager(config_for(scripted))
        make_fast(manager.servers[0])
        manager.unavailable_grace = 30
        await manager.chat_completion(messages=USER)
        scripted.control(healthy=False)
        await wait_until(lambda: not manager.servers[0].server_healthy)
        pending = asyncio.create_task(manager.chat_completion(messages=USER))
        await asyncio.sleep(0.2)
        assert not pending.done()
        scripted.control(healthy=True)
        reply = await asyncio.wait_for(pending, 10)
        assert reply.choices[0].message.content == "back"
        assert manager.unavailable_error() is None
        await manager.close()
