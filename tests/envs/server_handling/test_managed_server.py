"""ManagedServer token/mask/logprob tracking with the tiny tokenizer (harness and HTTP backends)."""

from __future__ import annotations

import asyncio
import json

import pytest

from atroposlib.envs.server_handling.managed_server import (
    DummyManagedServer,
    ManagedServer,
    ManagedServerAdapter,
    SequenceNode,
)
from atroposlib.envs.server_handling.server_baseline import APIServerConfig
from atroposlib.envs.server_handling.server_harness import ServerHarness, harness_logprob
from atroposlib.envs.server_handling.server_manager import ServerManager
from atroposlib.envs.server_handling.vllm_server import VLLMServer
from atroposlib.testing.scripted_server import launch_scripted_server, scripted_logprob

from .conftest import make_fast

USER = [{"role": "user", "content": "What is 2 + 2?"}]


def answer(prompt, index):
    return f"It is {4 + index}."


@pytest.fixture(params=["harness", "vllm-http"])
async def backend(request, tiny_model_dir, tiny_tokenizer):
    """``(server, logprob_fn)``: a ServerHarness, or a VLLMServer talking to the scripted server."""
    if request.param == "harness":
        yield ServerHarness(tokenizer=tiny_tokenizer, respond=answer), harness_logprob
        return
    with launch_scripted_server(respond=answer, tokenizer=str(tiny_model_dir)) as scripted:
        config = APIServerConfig(
            model_name="scripted-model",
            base_url=scripted.base_url,
            server_type="vllm",
            tokenizer_name=str(tiny_model_dir),
        )
        server = make_fast(VLLMServer(config))
        yield server, scripted_logprob
        await server.close()


def render(tokenizer, messages, generation_prompt=True):
    return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=generation_prompt)


def trainable(node: SequenceNode) -> list[int]:
    return [t for t in node.masked_tokens if t != -100]


async def test_single_turn_nodes_align_with_choices(backend, tiny_tokenizer):
    server, logprob = backend
    managed = ManagedServer(server, tokenizer=tiny_tokenizer)
    reply = await managed.chat_completion(messages=USER, n=2, max_tokens=32, temperature=1.0)
    nodes = managed.get_state()["nodes"]
    prompt = render(tiny_tokenizer, USER)
    prompt_ids = tiny_tokenizer.encode(prompt)
    assert [c.message.content for c in reply.choices] == ["It is 4.", "It is 5."]
    for i, (choice, node) in enumerate(zip(reply.choices, nodes, strict=True)):
        output = tiny_tokenizer.encode(f"It is {4 + i}.") + [tiny_tokenizer.eos_token_id]
        assert node.full_text == prompt + choice.message.content
        assert node.tokens == prompt_ids + output
        assert node.masked_tokens == [-100] * len(prompt_ids) + output
        assert node.logprobs == [1.0] * len(prompt_ids) + [
            pytest.approx(logprob(t, j)) for j, t in enumerate(output)
        ]
        assert node.metadata == {"finish_reason": "stop"}
        assert choice.finish_reason == "stop" and choice.index == i
    assert reply.model == server.config.model_name


async def test_multi_turn_extends_the_node_and_keeps_every_assistant_turn_trainable(backend, tiny_tokenizer):
    server, logprob = backend
    managed = ManagedServer(server, tokenizer=tiny_tokenizer)
    first = await managed.chat_completion(messages=USER, max_tokens=32)
    turn_one = managed.get_state()["nodes"][0]
    conversation = USER + [
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "And 3 + 3?"},
    ]
    second = await managed.chat_completion(messages=conversation, max_tokens=32)
    nodes = managed.get_state()["nodes"]
    assert len(nodes) == 1, "the extended node replaces the first one"
    node = nodes[0]
    assert node.tokens[: len(turn_one.tokens)] == turn_one.tokens
    full = render(tiny_tokenizer, conversation) + second.choices[0].message.content + "<|im_end|>"
    assert tiny_tokenizer.decode(node.tokens) == full
    assert tiny_tokenizer.decode(node.tokens).count("<|im_end|>") == 4, "no duplicated end-of-turn token"
    eos = [tiny_tokenizer.eos_token_id]
    expected_trainable = tiny_tokenizer.encode("It is 4.") + eos + tiny_tokenizer.encode("It is 4.") + eos
    assert trainable(node) == expected_trainable
    assert len(node.tokens) == len(node.masked_tokens) == len(node.logprobs)
    generated = [lp for lp in node.logprobs if lp != 1.0]
    assert len(generated) == len(expected_trainable)
    assert node.full_text == render(tiny_tokenizer, conversation) + second.choices[0].message.content


async def test_tree_mode_masks_all_but_the_newest_completion(tiny_tokenizer):
    managed = ManagedServer(
        ServerHarness(tokenizer=tiny_tokenizer, respond=answer), tokenizer=tiny_tokenizer, track_tree=True
    )
    first = await managed.chat_completion(messages=USER, max_tokens=32)
    conversation = USER + [
        {"role": "assistant", "content": first.choices[0].message.content},
        {"role": "user", "content": "Again?"},
    ]
    await managed.chat_completion(messages=conversation, max_tokens=32)
    state = managed.get_state()
    assert len(state["sequences"]) == 2 and state["tree"].keys() == state["sequences"].keys()
    parent, child = state["nodes"]
    assert child.tokens[: len(parent.tokens)] == parent.tokens
    assert trainable(child) == tiny_tokenizer.encode("It is 4.") + [tiny_tokenizer.eos_token_id]


class DelayedHarness(ServerHarness):
    """Answers prompts mentioning 'slow' after the others."""

    async def _tokens_and_logprobs_completion_wrapper(self, **kwargs):
        await asyncio.sleep(0.2 if "slow" in kwargs.get("prompt", "") else 0.0)
        return await super()._tokens_and_logprobs_completion_wrapper(**kwargs)


async def test_concurrent_calls_are_listed_in_call_order(tiny_tokenizer):
    managed = ManagedServer(
        DelayedHarness(tokenizer=tiny_tokenizer, respond=answer), tokenizer=tiny_tokenizer
    )
    await asyncio.gather(
        managed.chat_completion(messages=[{"role": "user", "content": "slow one"}], max_tokens=8),
        managed.chat_completion(messages=[{"role": "user", "content": "fast one"}], n=2, max_tokens=8),
    )
    texts = [node.full_text for node in managed.get_state()["nodes"]]
    assert ["slow one" in texts[0], "fast one" in texts[1], "fast one" in texts[2]] == [True, True, True]


async def test_completion_finish_length_and_logprob_padding(tiny_tokenizer):
    harness = ServerHarness(tokenizer=tiny_tokenizer, respond=answer)
    managed = ManagedServer(harness, tokenizer=tiny_tokenizer)
    reply = await managed.completion(prompt="Count: ", max_tokens=2)
    assert reply.choices[0].finish_reason == "length"
    assert managed.get_state()["nodes"][0].metadata["finish_reason"] == "length"
    # A backend that returns fewer logprobs than tokens is padded with 1.0; a changed prompt is a fresh context.
    harness.set_tokens_and_logprobs_response("raw", [1, 2], [[7, 8, 9]], [[-0.5]], [{"type": "stop"}])
    managed.reset()
    await managed.completion(prompt="raw")
    node = managed.get_state()["nodes"][0]
    assert node.tokens == [1, 2, 7, 8, 9] and node.masked_tokens == [-100, -100, 7, 8, 9]
    assert node.logprobs == [1.0, 1.0, -0.5, 1.0, 1.0] and node.metadata["finish_reason"] == "stop"


async def test_get_logprobs_renders_messages(tiny_tokenizer):
    harness = ServerHarness(tokenizer=tiny_tokenizer)
    managed = ManagedServer(harness, tokenizer=tiny_tokenizer)
    result = await managed.get_logprobs(messages=USER, top_k=2)
    assert harness.calls[-1]["prompt"] == render(tiny_tokenizer, USER)
    assert result["prompt_tokens"] == tiny_tokenizer.encode(render(tiny_tokenizer, USER))
    assert len(result["prompt_topk_token_ids"][1]) == 2


async def test_think_blocks_survive_rendering(tiny_tokenizer):
    class StrippingTokenizer:
        """Wraps the tiny tokenizer with a template that drops <think>...</think> from assistant turns."""

        def __init__(self, inner):
            self._inner = inner

        def __getattr__(self, name):
            return getattr(self._inner, name)

        def apply_chat_template(self, messages, **kwargs):
            cleaned = [
                {**m, "content": m["content"].split("</think>")[-1]} if m["role"] == "assistant" else m
                for m in messages
            ]
            return self._inner.apply_chat_template(cleaned, **kwargs)

    messages = USER + [{"role": "assistant", "content": "<think>hmm</think>4"}]
    stripped = ManagedServer(
        ServerHarness(), tokenizer=StrippingTokenizer(tiny_tokenizer), preserve_think_blocks=True
    )
    protected = ManagedServer(ServerHarness(), tokenizer=StrippingTokenizer(tiny_tokenizer))
    assert "<think>hmm</think>4" not in stripped._convert_messages_to_prompt(messages)
    assert "<think>hmm</think>4" in protected._convert_messages_to_prompt(messages)


async def test_tool_calls_are_parsed_and_length_is_kept(tiny_tokenizer):
    call = {"name": "add", "arguments": {"a": 1, "b": 2}}
    harness = ServerHarness(
        tokenizer=tiny_tokenizer, respond=lambda p, i: f"<tool_call>{json.dumps(call)}</tool_call>"
    )
    managed = ManagedServer(harness, tokenizer=tiny_tokenizer, tool_parser="hermes")
    tools = [{"type": "function", "function": {"name": "add", "parameters": {"type": "object"}}}]
    reply = await managed.chat_completion(messages=USER, tools=tools, max_tokens=64)
    choice = reply.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert choice.message.tool_calls[0]["function"]["name"] == "add"
    assert json.loads(choice.message.tool_calls[0]["function"]["arguments"]) == {"a": 1, "b": 2}
    node = managed.get_state()["nodes"][0]
    assert node.full_text.endswith(f"<tool_call>{json.dumps(call)}</tool_call>")
    # Next turn: the assistant tool call and the tool result extend the same node.
    conversation = USER + [
        {"role": "assistant", "content": None, "tool_calls": choice.message.tool_calls},
        {"role": "tool", "tool_call_id": choice.message.tool_calls[0]["id"], "content": "3"},
    ]
    await managed.chat_completion(messages=conversation, tools=tools, max_tokens=64)
    nodes = managed.get_state()["nodes"]
    assert len(nodes) == 1 and nodes[0].tokens[: len(node.tokens)] == node.tokens
    assert tiny_tokenizer.decode(nodes[0].tokens).count("<|im_end|>") == 4
    # A truncated generation keeps the backend's "length".
    managed.reset()
    truncated = await managed.chat_completion(messages=USER, tools=tools, max_tokens=3)
    assert truncated.choices[0].finish_reason == "length"


async def test_dummy_managed_server_and_adapter(scripted, monkeypatch, tiny_tokenizer):
    monkeypatch.setenv("ATROPOS_ALLOW_DUMMY_MANAGED_SERVER", "true")
    manager = ServerManager(
        APIServerConfig(model_name="scripted-model", base_url=scripted.base_url, health_check=False)
    )
    with pytest.warns(UserWarning):
        async with manager.managed_server() as managed:
            assert isinstance(managed, DummyManagedServer)
            reply = await managed.chat_completion(messages=USER, n=2)
            nodes = managed.get_state()["nodes"]
            assert len(nodes) == 2 and nodes[0].metadata["dummy_tokens"] is True
            assert (
                nodes[0].full_text == f"user:What is 2 + 2?\n\nassistant:{reply.choices[0].message.content}"
            )
            with pytest.raises(NotImplementedError):
                await managed.get_logprobs(prompt="x")
    await manager.close()

    real = ManagedServer(ServerHarness(tokenizer=tiny_tokenizer, respond=answer), tokenizer=tiny_tokenizer)
    client = ManagedServerAdapter(real, base_url="http://managed/v1")
    chat = await client.chat.completions.create(messages=USER, max_tokens=16)
    text = await client.completions.create(prompt="p", max_tokens=16)
    assert chat.choices[0].message.content == "It is 4." and text.choices[0].text == "It is 4."
    assert len(real.get_state()["nodes"]) == 2 and client.base_url == "http://managed/v1"
    with pytest.raises(NotImplementedError):
        await client.post("/x", {}, dict)
    with pytest.raises(NotImplementedError):
        client.copy()
