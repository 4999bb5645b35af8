"""MCP environment: a real MCP server (stdio and streamable HTTP) started for the test, its tools offered
and run, hostile tools and calls, masking, scoring, ``process`` and ``evaluate``."""

from __future__ import annotations

import asyncio
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from transformers import AutoTokenizer

from atroposlib.envs.base import APIServerConfig
from atroposlib.envs.data_loading import DatasetError
from atroposlib.envs.tools.mcp_client import McpServerSpec, connect_all
from atroposlib.testing.api_process import free_port
from atroposlib.testing.scripted_server import launch_scripted_server
from atroposlib.utils.processes import stop_process
from atroposlib.utils.tool_calls import json_contains as contains
from environments.mcp_env import McpEnv, McpEnvConfig, items_of
from tests.helpers.cli_runs import FIXTURES, read_jsonl
from tests.helpers.multi_turn_runs import episode_responder, tool_call, tool_responses
from tests.helpers.single_turn_runs import offline_env, setup_failure, write_jsonl

SAMPLE = FIXTURES / "mcp_sample.jsonl"
ROWS = read_jsonl(SAMPLE)
SERVER_SCRIPT = Path(__file__).parents[1] / "helpers" / "mcp_tools_server.py"
STDIO = {"name": "test-tools", "command": sys.executable, "args": [str(SERVER_SCRIPT)]}


def _config(tiny_model_dir, **overrides) -> McpEnvConfig:
    values = {
        "tokenizer_name": str(tiny_model_dir),
        "use_wandb": False,
        "dataset_path": str(SAMPLE),
        "eval_dataset_path": str(SAMPLE),
        "mcp_servers": [STDIO],
        "group_size": 2,
        "max_tokens_per_turn": 256,
        **overrides,
    }
    return McpEnvConfig(**values)


async def _play(tiny_model_dir, script, row=0, **overrides):
    with launch_scripted_server(respond=episode_responder([script]), tokenizer=tiny_model_dir) as server:
        env = McpEnv(
            _config(tiny_model_dir, **overrides),
            APIServerConfig(base_url=server.base_url, model_name="m", server_type="vllm"),
        )
        await env.setup()
        try:
            item = next(i for i in env.test if i.prompt == ROWS[row]["user_prompt_text"])
            session, episode = await env.play(item)
        finally:
            await env.close_servers()
    return env, session, episode


def test_expected_calls_match_by_json_value_with_extra_arguments_allowed(tmp_path):
    assert contains({"a": 17.0, "b": 25, "note": "x"}, {"b": 25, "a": 17})
    assert contains({"q": {"x": [1, 2], "y": True}}, {"q": {"x": [1.0, 2]}})
    assert not contains({"a": 17}, {"a": 17, "b": 25}) and not contains({"a": "17"}, {"a": 17})
    assert not contains({"flag": 1}, {"flag": True}) and not contains([1], {"a": 1})
    items = items_of(
        [{"user_prompt_text": "p", "expected_mcp_call": '{"name": "add", "arguments": {"a": 1.0}}'}], "f"
    )
    assert items[0].tool_name == "add" and items[0].arguments == {"a": 1}
    for bad in [{"arguments": {}}, {"tool_name": "add", "arguments": [1]}, "not json", 7]:
        with pytest.raises(DatasetError, match=r"^f: row 0: field 'expected_mcp_call' must be"):
            items_of([{"user_prompt_text": "p", "expected_mcp_call": bad}], "f")


async def test_the_servers_tools_are_offered_run_and_only_the_models_tokens_trained(tiny_model_dir):
    script = [tool_call("add", a=17, b=25), "17 plus 25 is 42."]
    env, session, episode = await _play(tiny_model_dir, script)
    assert env.connections == [] and env.tools == {}  # closed after the episode
    system = episode.messages[0]["content"]
    for name in ("add", "capital_of", "fail", "hang", "huge"):
        assert f'"name": "{name}"' in system
    assert '"a": {"title": "A", "type": "integer"}' in system  # the server's own input schema
    assert tool_responses(episode) == [{"name": "add", "content": "42"}]  # computed by the MCP server
    assert episode.end_reason == "done" and env.score(session, episode) == 1.0
    assert env.episode_metrics(session, episode) == {
        "matched_call": 1.0,
        "tool_calls": 1.0,
        "tool_errors": 0.0,
        "answered": 1.0,
    }
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    trained = tokenizer.decode([m for m in episode.masks if m != -100], skip_special_tokens=False)
    assert trained == "".join(r + "<|im_end|>" for r in episode.replies)
    masked = tokenizer.decode([t for t, m in zip(episode.tokens, episode.masks, strict=True) if m == -100])
    assert '"content": "42"' in masked and '"content": "42"' not in trained


async def test_a_tool_that_raises_hangs_or_floods_is_handled_and_the_session_stays_usable(tiny_model_dir):
    script = [
        tool_call("fail", reason="database offline"),
        tool_call("hang", seconds=60) + tool_call("huge", size=1_000_000),
        tool_call("capital_of", country="Atlantis") + tool_call("add", a=17, b=25),
        "Done.",
    ]
    start = time.monotonic()
    env, session, episode = await _play(
        tiny_model_dir, script, tool_timeout_s=1.0, tool_output_chars=1000, max_turns=5
    )
    assert time.monotonic() - start < 40
    failed, hung, huge, unknown, added = tool_responses(episode)
    assert failed["error"] == "Error executing tool fail: database offline"
    assert hung["error"] == "'hang' did not answer within 1.0 s"
    assert huge["content"].startswith("x" * 1000 + "\n... [truncated: 999000 more characters]")
    assert "unknown country 'Atlantis'" in unknown["error"]
    assert added == {"name": "add", "content": "42"}  # the server still answers after the hung call
    assert episode.end_reason == "done" and env.score(session, episode) == 1.0
    assert env.episode_metrics(session, episode)["tool_errors"] == 3.0


async def test_hostile_calls_get_errors_and_a_hundred_calls_end_the_episode_with_a_score(tiny_model_dir):
    script = [
        tool_call("rm_rf", path="/")
        + '<tool_call>{"name": "add", "arguments": {"a": 1,}}</tool_call>'
        + tool_call("add", a="seventeen", b=25),
        "".join(tool_call("add", a=17, b=25) for _ in range(100)),
        "unused",
    ]
    env, session, episode = await _play(tiny_model_dir, script, max_tokens_per_turn=8000)
    unknown, bad_json, bad_args = (body["error"] for body in tool_responses(episode))
    assert unknown == "unknown tool 'rm_rf'; tools: add, capital_of, fail, hang, huge"
    assert bad_json.startswith("malformed tool call: not valid JSON")
    assert bad_args.startswith("invalid arguments for 'add': a: 'seventeen' is not of type 'integer'")
    assert len(episode.turns) == 2 and episode.end_reason == "done" and session.tally.over_limit
    assert env.score(session, episode) == -1.0  # none of the hundred calls ran, so none matched


async def test_a_streamable_http_server_is_reached_by_url():
    port = free_port()
    proc = subprocess.Popen([sys.executable, str(SERVER_SCRIPT), str(port)], stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)  # fmt: skip
    try:
        spec = McpServerSpec(name="http-tools", url=f"http://127.0.0.1:{port}/mcp")
        for _ in range(100):  # the server needs a moment to listen
            try:
                connections, tools = await connect_all([spec], 5.0, 5.0, 4000)
                break
            except RuntimeError:
                await asyncio.sleep(0.2)
        else:
            pytest.fail("the HTTP MCP server never answered")
        try:
            assert sorted(tools) == ["add", "capital_of", "fail", "hang", "huge"]
            assert await tools["capital_of"].call({"country": "Kenya"}) == "Nairobi"
        finally:
            for connection in connections:
                await connection.close()
    finally:
        stop_process(proc, process_group=True)


async def test_unreachable_servers_clashing_tools_and_missing_settings_stop_the_setup(
    tiny_model_dir, tmp_path
):
    missing = {"name": "ghost", "command": str(tmp_path / "no-such-server")}
    env = offline_env(McpEnv, tiny_model_dir, dataset_path=str(SAMPLE), mcp_servers=[missing])
    with pytest.raises(RuntimeError, match=r"MCP server 'ghost' could not be started or reached"):
        await env.setup()
    twice = [STDIO, {**STDIO, "name": "again"}]
    env = offline_env(McpEnv, tiny_model_dir, dataset_path=str(SAMPLE), mcp_servers=twice)
    with pytest.raises(
        ValueError, match=r"MCP servers 'test-tools' and 'again' both offer a tool named 'add'"
    ):
        await env.setup()
    with pytest.raises(ValueError, match="give exactly one of 'command'"):
        McpServerSpec(name="x", command="a", url="http://b")
    env = offline_env(McpEnv, tiny_model_dir, mcp_servers=[STDIO])
    await setup_failure(env, "pass --env.dataset_path FILE")
    rows = write_jsonl(tmp_path / "rows.jsonl", [{"user_prompt_text": "hi"}])
    env = offline_env(McpEnv, tiny_model_dir, dataset_path=rows, mcp_servers=[STDIO])
    await setup_failure(env, r"rows.jsonl: row 0: missing field 'expected_mcp_call'")


def _caller(rows):
    """Even episodes make the expected call, odd ones call the wrong tool; every episode then stops."""
    import itertools

    counter = itertools.count()
    expected = {r["user_prompt_text"]: r["expected_mcp_call"] for r in rows}

    def respond(prompt, index):
        text = str(prompt)
        request = next(q for q in expected if q in text)
        marker = re.search(r"<think>episode (\d+)</think>", text)
        episode = int(marker.group(1)) if marker else next(counter)
        head = f"<think>episode {episode}</think>"
        if text.count("<|im_start|>assistant") > 1:
            return head + "Done."
        call = expected[request]
        if episode % 2:
            return head + tool_call("huge", size=3)
        return head + tool_call(call["tool_name"], **call["arguments"])

    return respond


def test_process_writes_groups_from_a_stdio_server_it_starts(scripted, tiny_model_dir):
    args = ["--env.dataset_path", SAMPLE, "--env.group_size", "4", "--env.total_steps", "2",
            "--env.max_tokens_per_turn", "256", "--env.mcp_servers", json.dumps([STDIO])]  # fmt: skip
    groups = scripted.process(McpEnv, args, _caller(ROWS))
    assert len(groups) == 2
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    for group in groups:
        assert sorted(group["scores"]) == [-1.0, -1.0, 1.0, 1.0]
        for masks, messages in zip(group["masks"], group["messages"], strict=True):
            replies = [m["content"] for m in messages if m["role"] == "assistant"]
            trained = tokenizer.decode([m for m in masks if m != -100], skip_special_tokens=False)
            assert len(replies) == 2 and trained == "".join(r + "<|im_end|>" for r in replies)
            assert messages[3]["role"] == "tool" and "<tool_response>" in messages[3]["content"]


def test_evaluate_reports_exact_metrics(scripted):
    args = ["--env.dataset_path", SAMPLE, "--env.eval_dataset_path", SAMPLE,
            "--env.max_tokens_per_turn", "256", "--env.mcp_servers", json.dumps([STDIO])]  # fmt: skip
    metrics, samples, _ = scripted.evaluate(McpEnv, args, _caller(ROWS))
    assert len(samples) == 4 and metrics["eval/percent_correct"] == 0.5
    assert metrics["eval/mean_score"] == 0.0 and metrics["eval/matched_call"] == 0.5
    assert metrics["eval/tool_calls"] == 1.0 and metrics["eval/mean_turns"] == 2.0
    assert metrics["eval/tool_errors"] == 0.0 and metrics["eval/answered"] == 1.0
