"""SLURM server discovery: URLs per inference node, INFER_TP as an integer, clear errors."""

from __future__ import annotations

import pytest

from atroposlib.envs.server_handling.server_baseline import APIServerConfig, ServerBaseline
from atroposlib.envs.server_handling.server_manager import ServerManager
from atroposlib.envs.server_handling.slurm_discovery import SlurmDiscoveryError, slurm_inference_urls
from tests.helpers.slurm import install_scontrol


def hosts(*names):
    return lambda nodelist: list(names)


def test_inference_nodes_after_training_nodes():
    env = {"SLURM_JOB_NODELIST": "n[1-3]", "NUM_TRAINING_NODES": "1", "INFER_TP": "4"}
    urls = slurm_inference_urls(env, hostnames=hosts("n1", "n2", "n3"))
    assert urls == ["http://n2:9000/v1", "http://n2:9001/v1", "http://n3:9000/v1", "http://n3:9001/v1"]


def test_infer_tp_defaults_to_one():
    env = {"SLURM_JOB_NODELIST": "n[1-2]", "NUM_TRAINING_NODES": "1"}
    urls = slurm_inference_urls(env, hostnames=hosts("n1", "n2"))
    assert urls == [f"http://n2:{9000 + i}/v1" for i in range(8)]


def test_gpus_per_node_sets_the_servers_per_node():
    env = {"SLURM_JOB_NODELIST": "n[1-2]", "NUM_TRAINING_NODES": "1", "GPUS_PER_NODE": "4", "INFER_TP": "2"}
    assert slurm_inference_urls(env, hostnames=hosts("n1", "n2")) == [
        "http://n2:9000/v1",
        "http://n2:9001/v1",
    ]
    with pytest.raises(SlurmDiscoveryError, match="INFER_TP=8 exceeds the 4 GPUs"):
        slurm_inference_urls({**env, "INFER_TP": "8"}, hostnames=hosts("n1", "n2"))


def test_single_node_returns_none():
    assert slurm_inference_urls({"SLURM_JOB_NODELIST": "n1"}, hostnames=hosts("n1")) is None


@pytest.mark.parametrize(
    ("env", "message"),
    [
        ({}, "SLURM_JOB_NODELIST is not set"),
        ({"SLURM_JOB_NODELIST": "n[1-2]"}, "NUM_TRAINING_NODES is not set"),
        ({"SLURM_JOB_NODELIST": "n[1-2]", "NUM_TRAINING_NODES": "2"}, "leaves no inference node"),
        (
            {"SLURM_JOB_NODELIST": "n[1-2]", "NUM_TRAINING_NODES": "1", "INFER_TP": "two"},
            "INFER_TP must be an integer",
        ),
        ({"SLURM_JOB_NODELIST": "n[1-2]", "NUM_TRAINING_NODES": "1", "INFER_TP": "16"}, "exceeds"),
    ],
)
def test_clear_errors(env, message):
    with pytest.raises(SlurmDiscoveryError, match=message):
        slurm_inference_urls(env, hostnames=hosts("n1", "n2"))


@pytest.fixture
def fake_scontrol(tmp_path, monkeypatch):
    """An ``scontrol`` on PATH that expands any node list to three hosts."""
    install_scontrol(monkeypatch, tmp_path, 'printf "gpu-a\\ngpu-b\\ngpu-c\\n"\n')
    monkeypatch.setenv("SLURM_JOB_NODELIST", "gpu-[a-c]")
    monkeypatch.setenv("NUM_TRAINING_NODES", "1")
    monkeypatch.setenv("INFER_TP", "8")


def test_server_baseline_discovers_slurm_servers(fake_scontrol):
    manager = ServerManager(ServerBaseline(model_name="m", server_type="vllm"))
    assert [s.config.base_url for s in manager.servers] == ["http://gpu-b:9000/v1", "http://gpu-c:9000/v1"]
    assert all(s.config.api_key == "x" and s.config.model_name == "m" for s in manager.servers)
    assert {type(s).__name__ for s in manager.servers} == {"VLLMServer"}


def test_config_list_is_cloned_per_slurm_server(fake_scontrol):
    template = APIServerConfig(
        model_name="m", base_url="http://ignored/v1", api_key="secret", server_type="sglang"
    )
    manager = ServerManager([template], slurm=True)
    assert [s.config.base_url for s in manager.servers] == ["http://gpu-b:9000/v1", "http://gpu-c:9000/v1"]
    assert all(s.config.api_key == "secret" for s in manager.servers)
    assert template.base_url == "http://ignored/v1"


def test_slurm_flag_without_nodelist_is_a_clear_error(monkeypatch):
    monkeypatch.delenv("SLURM_JOB_NODELIST", raising=False)
    with pytest.raises(SlurmDiscoveryError, match="SLURM_JOB_NODELIST"):
        ServerManager([APIServerConfig(model_name="m", base_url="http://h/v1")], slurm=True)


def test_missing_scontrol_is_a_clear_error(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setenv("SLURM_JOB_NODELIST", "n[1-2]")
    with pytest.raises(SlurmDiscoveryError, match="scontrol is not on PATH"):
        slurm_inference_urls()
