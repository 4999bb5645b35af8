"""Text-only chat endpoints (``server_type openai``): tokens from the messages for ``process`` and
``evaluate``, and ``serve`` refusing them in one line at start-up."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from atroposlib.envs.base import APIServerConfig
from atroposlib.envs.server_handling.message_tokens import MessageTokenizedServer, text_content
from atroposlib.envs.server_handling.server_manager import ServerManager
from atroposlib.testing.scripted_server import launch_scripted_server
from atroposlib.utils.tokenize_for_trainer import tokenize_for_trainer
from environments.game_environments.blackjack_env import BlackjackEnv
from environments.mcqa_thinking_env import MCQAThinkingEnv
from tests.helpers.cli_runs import FIXTURES, run_env
from tests.helpers.multi_turn_runs import episode_responder, take_action
from tests.helpers.single_turn_runs import ScriptedRuns

CHAT = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "Say hi."}]


def _manager(base_url: str) -> ServerManager:
    return ServerManager([APIServerConfig(base_url=base_url, model_name="m", server_type="openai")])


def _trained(tokenizer, masks) -> str:
    return tokenizer.decode([m for m in masks if m != -100], skip_special_tokens=False)


async def test_serve_style_sessions_still_refuse_an_openai_server(tiny_model_dir):
    manager = _manager("http://127.0.0.1:9/v1")
    with pytest.raises(NotImplementedError, match="server_type 'vllm' or 'sglang'"):
        async with manager.managed_server(tokenizer=AutoTokenizer.from_pretrained(tiny_model_dir)):
            pass


async def test_tokens_are_the_rendered_chat_with_the_replies_trained(tiny_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    replies = ["Hi there.", "<think>short</think>Hello!"]
    with launch_scripted_server(respond=lambda p, i: replies[i], tokenizer=tiny_model_dir) as server:
        manager = _manager(server.base_url)
        manager.tokens_from_messages = True
        async with manager.managed_server(tokenizer=tokenizer) as managed:
            assert isinstance(managed, MessageTokenizedServer)
            completion = await managed.chat_completion(messages=CHAT, n=2, max_tokens=32)
            nodes = managed.get_state()["nodes"]
        assert server.requests[0]["path"] == "/v1/chat/completions"  # the endpoint's own chat route
    assert [c.message.content for c in completion.choices] == replies
    for node, reply in zip(nodes, replies, strict=True):
        expected = tokenize_for_trainer(tokenizer, [*CHAT, {"role": "assistant", "content": reply}])
        assert node.tokens == expected["tokens"] and node.masked_tokens == expected["masks"]
        assert _trained(tokenizer, node.masked_tokens) == reply + "<|im_end|>\n"
        assert node.logprobs == [] and node.metadata["tokens_from_messages"] is True


async def test_a_continued_conversation_keeps_one_node_with_every_reply_trained(tiny_model_dir):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    with launch_scripted_server(respond=lambda p, i: f"answer {len(p)}", tokenizer=tiny_model_dir) as server:
        manager = _manager(server.base_url)
        manager.tokens_from_messages = True
        async with manager.managed_server(tokenizer=tokenizer) as managed:
            first = await managed.chat_completion(messages=CHAT, n=1)
            history = [*CHAT, {"role": "assistant", "content": first.choices[0].message.content}]
            history.append({"role": "user", "content": "OBSERVATION-TEXT"})
            await managed.chat_completion(messages=history, n=1)
            nodes = managed.get_state()["nodes"]
    assert len(nodes) == 1
    trained = _trained(tokenizer, nodes[0].masked_tokens)
    assert trained == "answer 2<|im_end|>\nanswer 4<|im_end|>\n"
    assert "OBSERVATION-TEXT" in tokenizer.decode(nodes[0].tokens) and "OBSERVATION" not in trained


def test_picture_parts_become_placeholder_text():
    message = {
        "role": "user",
        "content": [{"type": "image_url", "image_url": {"url": "x"}}, {"type": "text", "text": "Q"}],
    }
    assert text_content(message)["content"] == "<image>\nQ"
    assert text_content({"role": "assistant", "content": None})["content"] == ""


def test_game_process_against_a_chat_endpoint(tiny_model_dir, tmp_path):
    runs = ScriptedRuns(tiny_model_dir, tmp_path)
    respond = episode_responder([[take_action("hit"), take_action("stick")], ["I fold."]])
    groups = runs.process(
        BlackjackEnv,
        ["--env.group_size", "4", "--env.total_steps", "2", "--env.max_tokens_per_turn", "64"],
        respond,
        server_type="openai",
    )
    assert len(groups) == 2
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    for group in groups:
        assert group["inference_logprobs"] is None  # a chat endpoint gives no token logprobs
        for tokens, masks, messages in zip(group["tokens"], group["masks"], group["messages"], strict=True):
            assert len(tokens) == len(masks)
            replies = [m["content"] for m in messages if m["role"] == "assistant"]
            assert _trained(tokenizer, masks) == "".join(r + "<|im_end|>\n" for r in replies)
            assert "Your cards" in tokenizer.decode(tokens) and "Your cards" not in _trained(tokenizer, masks)


def test_game_evaluate_against_a_chat_endpoint(tiny_model_dir, tmp_path):
    runs = ScriptedRuns(tiny_model_dir, tmp_path)
    evaluation = runs.evaluation(
        BlackjackEnv,
        ["--env.eval_episodes", "5", "--env.max_tokens_per_turn", "64"],
        episode_responder([["I fold."]]),
        server_type="openai",
    )
    assert all(r["path"] == "/v1/chat/completions" for r in evaluation.requests)
    assert len(evaluation.samples) == 5
    metrics = evaluation.metrics
    assert metrics["eval/mean_score"] == -1.0 and metrics["eval/percent_correct"] == 0.0
    assert metrics["eval/invalid_action"] == 1.0 and metrics["eval/mean_turns"] == 1.0


def test_serve_refuses_an_openai_server_in_one_line(tiny_model_dir, tmp_path):
    args = ["serve", "--env.dataset_path", FIXTURES / "mmlu_sample.jsonl", "--env.tokenizer_name", tiny_model_dir,
            "--env.use_wandb", "false", "--openai.base_url", "http://127.0.0.1:9/v1", "--openai.model_name", "m",
            "--env.rollout_server_url", "http://127.0.0.1:9"]  # fmt: skip
    result = run_env(
        MCQAThinkingEnv.__module__.replace(".", "/") + ".py", args, cwd=FIXTURES.parents[1], timeout=120
    )
    assert result.returncode != 0
    errors = [line for line in result.stderr.splitlines() if "OpenAI-type server" in line]
    assert len(errors) == 1 and "--openai.server_type vllm" in errors[0]
    assert "Traceback" not in result.stderr and "NotImplementedError" not in result.stderr
