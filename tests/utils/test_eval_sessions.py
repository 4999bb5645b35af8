"""``eval_runner`` closes the HTTP session of the inference client it creates, whether the evaluation
succeeds or fails (an open one makes aiohttp report "Unclosed client session" when it is collected)."""

from __future__ import annotations

import aiohttp
import pytest

from atroposlib.envs.eval import EvalBase, eval_runner
from tests.helpers.http_stub import run_stub


class EchoEval(EvalBase):
    def setup_data(self):
        return ["2", "3"]

    async def run_item(self, server, data_item):
        completion = await self.chat_completion(server, [{"role": "user", "content": data_item}])
        return {"eval/acc": float(completion.choices[0].message.content == f"echo: {data_item}")}, {}


class FailingEval(EchoEval):
    async def run_item(self, server, data_item):
        await super().run_item(server, data_item)
        raise RuntimeError("scoring failed")


@pytest.fixture(scope="module")
def stub_url():
    with run_stub() as url:
        yield url


@pytest.fixture
def sessions(monkeypatch):
    """Every aiohttp session opened during the test."""
    opened: list[aiohttp.ClientSession] = []
    original_init = aiohttp.ClientSession.__init__

    def recording_init(self, *args, **kwargs):
        original_init(self, *args, **kwargs)
        opened.append(self)

    monkeypatch.setattr(aiohttp.ClientSession, "__init__", recording_init)
    return opened


async def test_eval_runner_closes_its_session(stub_url, tmp_path, sessions):
    metrics = await eval_runner(EchoEval(eval_dir=str(tmp_path)), ["--server-url", stub_url])
    assert metrics == {"eval/acc": 1.0}
    assert sessions and all(session.closed for session in sessions)


async def test_eval_runner_closes_its_session_when_the_evaluation_fails(stub_url, tmp_path, sessions):
    with pytest.raises(RuntimeError, match="every one of 2 items failed"):
        await eval_runner(FailingEval(eval_dir=str(tmp_path)), ["--server-url", stub_url])
    assert sessions and all(session.closed for session in sessions)
