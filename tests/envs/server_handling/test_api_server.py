"""APIServer behaviour shared by every backend: reasoning injection, metrics buffers, credentials."""

from __future__ import annotations

from atroposlib.envs.server_handling.openai_server import OpenAIServer
from atroposlib.envs.server_handling.server_baseline import APIServerConfig, ReasoningConfig
from atroposlib.envs.server_handling.server_harness import ServerHarness

USER = [{"role": "user", "content": "think"}]


def harness(base_url: str = "http://local/v1", **config) -> ServerHarness:
    cfg = APIServerConfig(model_name="m", base_url=base_url, health_check=False, **config)
    return ServerHarness(config=cfg, reasoning_config=ReasoningConfig(effort="low"))


async def test_reasoning_is_injected_into_chat_only():
    server = harness()
    await server.chat_completion(messages=USER, max_tokens=10, extra_body={"top_k": 5})
    assert server.calls[-1]["extra_body"] == {"top_k": 5, "reasoning": {"enabled": True, "effort": "low"}}
    await server.chat_completion(messages=USER, skip_reasoning=True)
    assert "extra_body" not in server.calls[-1] and "skip_reasoning" not in server.calls[-1]
    await server.completion(prompt="p")
    assert "extra_body" not in server.calls[-1]


async def test_openai_official_endpoint_quirks():
    server = harness("https://api.openai.com/v1")
    await server.chat_completion(messages=USER, max_tokens=10, temperature=0.2)
    call = server.calls[-1]
    assert call["extra_body"] == {"reasoning_effort": "low"}
    assert call["temperature"] == 1.0 and call["max_completion_tokens"] == 10 and "max_tokens" not in call


async def test_configured_model_name_wins_and_split_is_consumed():
    server = harness()
    await server.chat_completion(messages=USER, model="something-else", split="eval")
    assert server.calls[-1]["model"] == "m" and "split" not in server.calls[-1]
    assert len(server.eval_attempts_list) == 1 and len(server.attempts_list) == 0


async def test_metric_buffers_are_bounded_by_rolling_buffer_length():
    server = harness(rolling_buffer_length=3)
    for _ in range(5):
        await server.completion(prompt="p")
    assert len(server.request_timings) == 3 and len(server.attempts_list) == 3
    metrics = await server.wandb_metrics({}, "s")
    assert set(metrics) == {
        "server/s_request_time_avg",
        "server/s_request_time_std",
        "server/s_request_time_99p",
        "server/s_average_num_attempts",
    }


def test_empty_api_key_does_not_break_client_construction(monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    server = OpenAIServer(APIServerConfig(model_name="m", base_url="http://127.0.0.1:9/v1"))
    assert server.openai.api_key == "EMPTY"
    monkeypatch.setenv("OPENAI_API_KEY", "from-env")
    assert (
        OpenAIServer(APIServerConfig(model_name="m", base_url="http://127.0.0.1:9/v1")).openai.api_key
        == "from-env"
    )
