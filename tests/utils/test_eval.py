"""atroposlib.envs.eval: pass@k, evaluate_log files, EvalBase (bounded concurrency, failures) and
eval_runner against a real OpenAI-compatible HTTP server."""

from __future__ import annotations

import asyncio
import json
import math

import pytest

from atroposlib.envs.eval import (
    EvalBase,
    aggregate_metrics,
    discover_model_name,
    eval_runner,
    evaluate_log,
    normalize_base_url,
    pass_at_k,
)
from tests.helpers.http_stub import MODEL, run_stub


def brute_pass_at_k(m: int, c: int, k: int) -> float:
    return 1.0 - math.comb(m - c, k) / math.comb(m, k)


@pytest.mark.parametrize(
    ("m", "c", "k"), [(10, 3, 1), (10, 3, 5), (10, 0, 3), (5, 5, 2), (20, 1, 10), (4, 2, 3)]
)
def test_pass_at_k_matches_the_combinatorial_definition(m, c, k):
    assert pass_at_k(m, c, k) == pytest.approx(brute_pass_at_k(m, c, k))
    assert isinstance(pass_at_k(m, c, k), float)


def test_pass_at_k_edges():
    assert pass_at_k(1, 1, 1) == 1.0
    assert pass_at_k(1, 0, 1) == 0.0
    assert pass_at_k(10, 8, 3) == 1.0  # fewer than k wrong samples


def test_evaluate_log_writes_metrics_and_samples(tmp_path, capsys):
    metrics = {"eval/acc": 0.75}
    samples = [{"q": "1+1", "ok": True}, {"q": "2+2", "ok": False}]
    evaluate_log(
        metrics,
        eval_dir=str(tmp_path / "out"),
        task_name="Arith@1",
        model_name="m",
        start_time=10.0,
        end_time=12.5,
        generation_parameters={"temperature": 0.0},
        samples=samples,
        verbose=True,
    )
    result = json.loads((tmp_path / "out" / "metrics.json").read_text())
    assert result == {
        "config_general": {
            "model_name": "m",
            "total_evaluation_time_seconds": "2.5",
            "generation_parameters": {"temperature": 0.0},
        },
        "results": {"atropos|Arith@1|0": metrics, "all": metrics},
    }
    lines = (tmp_path / "out" / "samples.jsonl").read_text().splitlines()
    assert [json.loads(line) for line in lines] == samples
    out = capsys.readouterr().out
    assert "Evaluation Results: Arith@1" in out and "metrics.json" in out


def test_evaluate_log_without_dir_is_a_noop(tmp_path, caplog):
    evaluate_log({"a": 1.0}, eval_dir=None)
    assert "eval_dir is not set" in caplog.text


def test_aggregate_metrics():
    assert aggregate_metrics([{"a": 1, "b": 0}, {"a": 0, "b": 0, "c": 5}]) == {"a": 0.5, "b": 0.0}
    with pytest.raises(ValueError, match="'b'"):
        aggregate_metrics([{"a": 1, "b": 0}, {"a": 0}])


class FakeServerManager:
    """Stands in for ServerManager: tracks how many chat calls run at once."""

    def __init__(self, delay: float = 0.01):
        self.delay = delay
        self.active = 0
        self.peak = 0
        self.calls: list[dict] = []

        class _Config:
            model_name = "fake-model"

        class _Server:
            config = _Config()

        self.servers = [_Server()]

    async def chat_completion(self, **kwargs):
        self.calls.append(kwargs)
        self.active += 1
        self.peak = max(self.peak, self.active)
        await asyncio.sleep(self.delay)
        self.active -= 1
        return kwargs["messages"][-1]["content"]


class SquareEval(EvalBase):
    def setup_data(self):
        return list(range(getattr(self, "n_items", 20)))

    async def run_item(self, server, data_item):
        reply = await self.chat_completion(server, [{"role": "user", "content": str(data_item)}])
        if data_item in getattr(self, "fail_on", ()):
            raise RuntimeError("model server hiccup")
        correct = float(int(reply) % 2 == 0)
        return {"eval/acc": correct, "eval/len": len(reply)}, {"item": data_item, "reply": reply}


def test_generation_params_defaults_are_valid_for_openai():
    params = SquareEval().get_generation_params()
    assert params == {"temperature": 0.0, "n": 1, "top_p": 1.0}  # no invalid max_tokens=-1
    params = SquareEval(
        pass_at_n=2, pass_at_n_samples=5, temperature=0.7, max_tokens=64
    ).get_generation_params()
    assert params == {"temperature": 0.7, "n": 5, "top_p": 1.0, "max_tokens": 64}
    assert "max_tokens" not in SquareEval(max_tokens=-1).get_generation_params()


async def test_eval_base_runs_items_with_bounded_concurrency(tmp_path):
    server = FakeServerManager()
    evaluator = SquareEval(max_concurrency=3, eval_dir=str(tmp_path), pass_at_n=1, pass_at_n_samples=4)
    metrics = await evaluator(server)
    assert metrics == {"eval/acc": 0.5, "eval/len": pytest.approx((10 * 1 + 10 * 2) / 20)}
    assert server.peak <= 3 and len(server.calls) == 20
    assert server.calls[0]["n"] == 4
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert saved["config_general"]["model_name"] == "fake-model"
    assert "atropos|SquareEval@1:4|0" in saved["results"]
    assert len((tmp_path / "samples.jsonl").read_text().splitlines()) == 20


async def test_eval_base_default_concurrency_is_bounded():
    server = FakeServerManager()
    await SquareEval(n_items=100)(server)
    assert 1 < server.peak <= 32


async def test_failed_items_are_logged_and_excluded(caplog):
    server = FakeServerManager(delay=0)
    metrics = await SquareEval(n_items=4, fail_on={1})(server)
    assert metrics["eval/acc"] == pytest.approx(2 / 3)
    assert "item 1 failed" in caplog.text and "1 of 4 items failed" in caplog.text
    with pytest.raises(RuntimeError, match="every one of 2 items failed"):
        await SquareEval(n_items=2, fail_on={0, 1})(server)


async def test_eval_without_items_is_a_clear_error():
    with pytest.raises(ValueError, match="no items"):
        await SquareEval(n_items=0)(FakeServerManager())


def test_normalize_base_url():
    assert normalize_base_url("http://localhost:8000") == "http://localhost:8000/v1"
    assert normalize_base_url("http://localhost:8000/") == "http://localhost:8000/v1"
    assert normalize_base_url("http://h:1/v1") == "http://h:1/v1"
    assert normalize_base_url("https://api.example/openai/v1") == "https://api.example/openai/v1"


class EchoEval(EvalBase):
    def setup_data(self):
        return ["2", "3", "4"]

    async def run_item(self, server, data_item):
        completion = await self.chat_completion(server, [{"role": "user", "content": data_item}])
        text = completion.choices[0].message.content
        return {"eval/acc": float(text == f"echo: {data_item}")}, {"reply": text}


@pytest.fixture(scope="module")
def stub_url():
    with run_stub() as url:
        yield url


def test_discover_model_name(stub_url):
    assert discover_model_name(f"{stub_url}/v1") == MODEL
    with pytest.raises(RuntimeError, match="pass --model-name"):
        discover_model_name("http://127.0.0.1:9/v1", timeout=2)


async def test_eval_runner_end_to_end_with_default_model_name(stub_url, tmp_path):
    evaluator = EchoEval(eval_dir=str(tmp_path))
    metrics = await eval_runner(evaluator, ["--server-url", stub_url, "--max-concurrency", "2"])
    assert metrics == {"eval/acc": 1.0}
    assert evaluator.max_concurrency == 2
    saved = json.loads((tmp_path / "metrics.json").read_text())
    assert saved["config_general"]["model_name"] == MODEL


async def test_eval_runner_unreachable_server_is_a_one_line_error(capsys):
    with pytest.raises(SystemExit) as exc:
        await eval_runner(EchoEval(), ["--server-url", "http://127.0.0.1:9"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot list the models") and err.count("\n") == 1
