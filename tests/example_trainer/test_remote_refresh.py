"""Remote inference servers (``--inference-server-urls`` / ``--num-inference-nodes``) refreshed from checkpoints.

The servers here are small recording HTTP servers standing in for ``example_trainer.inference.vllm_api_server``
(whose ``/bridge/update_weights`` route has its own tests against real vLLM).
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from example_trainer.grpo.config import TrainingConfig
from example_trainer.grpo.inference_sync import InferenceSync, remote_inference_urls
from tests.helpers.slurm import install_scontrol


class _Recorder(ThreadingHTTPServer):
    def __init__(self, status: int = 200):
        self.calls: list[tuple[str, dict]] = []
        self.status = status
        super().__init__(("127.0.0.1", 0), _Handler)
        threading.Thread(target=self.serve_forever, daemon=True).start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"


class _Handler(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 - http.server's naming
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.calls.append((self.path, body))
        reply = json.dumps({"error": {"message": "no such checkpoint"}} if self.server.status != 200 else {})
        self.send_response(self.server.status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(reply)))
        self.end_headers()
        self.wfile.write(reply.encode())

    def log_message(self, *args):
        pass


@pytest.fixture
def servers():
    made = [_Recorder(), _Recorder()]
    yield made
    for server in made:
        server.shutdown()
        server.server_close()


def _config(**kw) -> TrainingConfig:
    return TrainingConfig(model_name="m", device="cpu", **kw)


def test_full_weights_reach_every_server(servers, tmp_path):
    sync = InferenceSync(_config(inference_server_urls=[s.url for s in servers]))
    sync.start("m")
    assert sync.manager is None  # no local vLLM
    sync.refresh(tmp_path, 3)
    for server in servers:
        assert server.calls == [
            ("/bridge/update_weights", {"checkpoint_dir": str(tmp_path.resolve()), "pause_mode": "wait"})
        ]


def test_adapters_are_hot_swapped_into_every_server(servers, tmp_path):
    sync = InferenceSync(
        _config(inference_server_urls=" ".join(s.url for s in servers), weight_bridge_mode="lora_only")
    )
    sync.start("m")
    sync.refresh(tmp_path, 4)
    for server in servers:
        assert server.calls == [
            ("/v1/load_lora_adapter", {"lora_name": "step_4", "lora_path": str(tmp_path.resolve())})
        ]


def test_a_refusing_server_is_named(servers, tmp_path):
    servers[1].status = 400
    sync = InferenceSync(_config(inference_server_urls=[s.url for s in servers]))
    sync.start("m")
    with pytest.raises(RuntimeError, match=rf"1 of 2 .*{servers[1].url[:-3]}.*no such checkpoint"):
        sync.refresh(tmp_path, 1)


def test_num_inference_nodes_finds_the_last_nodes_of_the_allocation(tmp_path, monkeypatch):
    install_scontrol(monkeypatch, tmp_path, 'printf "t1\\nt2\\ni1\\ni2\\n"\n')
    monkeypatch.setenv("SLURM_JOB_NODELIST", "x[1-4]")
    monkeypatch.setenv("INFER_TP", "4")
    assert remote_inference_urls(_config(num_inference_nodes=2)) == [
        "http://i1:9000/v1", "http://i1:9001/v1", "http://i2:9000/v1", "http://i2:9001/v1",
    ]  # fmt: skip
    monkeypatch.setenv("GPUS_PER_NODE", "4")
    assert remote_inference_urls(_config(num_inference_nodes=1)) == ["http://i2:9000/v1"]
    assert remote_inference_urls(_config()) == []


@pytest.mark.parametrize(
    ("kw", "message"),
    [
        ({"inference_server_urls": ["ftp://x"]}, "must start with http"),
        ({"inference_server_urls": ["http://a/v1"], "num_inference_nodes": 1}, "either"),
    ],
)
def test_bad_remote_settings(kw, message):
    with pytest.raises(ValueError, match=message):
        _config(**kw)
