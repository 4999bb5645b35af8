"""``atroposlib.cli.slurm_roles``: layouts, the environments' server arguments, the inference supervisor.

No SLURM needed: node lists are given directly or expanded by a fake ``scontrol``.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import requests
import yaml

from atroposlib.cli import slurm_roles
from atroposlib.cli.slurm_roles import (
    LayoutError,
    SlurmLayoutConfig,
    env_server_args,
    external_server_urls,
    plan,
)
from atroposlib.envs.cli.config import load_yaml_config
from atroposlib.envs.server_handling.slurm_discovery import slurm_inference_urls
from atroposlib.testing.api_process import free_port
from atroposlib.testing.responders import arithmetic_half_right, evaluate_expression
from tests.helpers.slurm import install_scontrol, write_scontrol

REPO = Path(__file__).resolve().parents[2]


def cfg(**kw) -> SlurmLayoutConfig:
    return SlurmLayoutConfig(**kw)


@pytest.mark.parametrize(("train", "tp", "gpus"), [(1, 1, 8), (2, 4, 8), (1, 2, 4), (3, 8, 8)])
def test_servers_are_where_the_environments_look_for_them(train, tp, gpus):
    nodes = [f"n{i}" for i in range(5)]
    layout = plan(nodes, cfg(num_training_nodes=train, infer_tp=tp, gpus_per_node=gpus))
    env = {
        "SLURM_JOB_NODELIST": "n[0-4]",
        "NUM_TRAINING_NODES": str(train),
        "INFER_TP": str(tp),
        "GPUS_PER_NODE": str(gpus),
    }
    assert [s.url for s in layout.servers] == slurm_inference_urls(env, hostnames=lambda _: nodes)
    assert layout.training_nodes == nodes[:train] and layout.inference_nodes == nodes[train:]
    assert layout.head == "n0" and layout.api_url == "http://n0:8000"
    for server in layout.servers:  # server i of a node uses GPUs i*tp .. (i+1)*tp-1
        i = server.port - 9000
        assert server.gpus == tuple(range(i * tp, (i + 1) * tp))
    assert layout.trainer_gpus == tuple(range(gpus)) and layout.trainer_procs_per_node == gpus
    assert layout.node_num(nodes[train]) == 0 and layout.node_num(nodes[-1]) == len(nodes) - train - 1


def test_one_node_shares_its_gpus():
    layout = plan(["solo"], cfg(gpus_per_node=8, infer_tp=2))
    assert layout.trainer_gpus == (0, 1, 2, 3)
    assert [(s.port, s.gpus) for s in layout.servers] == [(9000, (4, 5)), (9001, (6, 7))]
    layout = plan(["solo"], cfg(gpus_per_node=8, trainer_gpus=6, trainer_procs_per_node=2, infer_port=9100))
    assert layout.trainer_gpus == tuple(range(6)) and layout.trainer_procs_per_node == 2
    assert [s.url for s in layout.servers] == ["http://solo:9100/v1", "http://solo:9101/v1"]


def test_inference_only_jobs_serve_on_every_node():
    layout = plan(["a", "b"], cfg(num_training_nodes=0, gpus_per_node=2))
    assert layout.training_nodes == [] and layout.inference_nodes == ["a", "b"]
    assert [s.url for s in layout.servers] == [
        "http://a:9000/v1", "http://a:9001/v1", "http://b:9000/v1", "http://b:9001/v1",
    ]  # fmt: skip
    assert "head" not in layout.describe()


@pytest.mark.parametrize(
    ("nodes", "config", "message"),
    [
        (["a", "b"], cfg(num_training_nodes=2), "NUM_TRAINING_NODES=2 leaves no inference node"),
        (["a", "b"], cfg(infer_tp=16), "INFER_TP=16 exceeds the 8 GPUs"),
        (["a"], cfg(gpus_per_node=4, trainer_gpus=4), "TRAINER_GPUS=4 leaves no GPU"),
        (["a"], cfg(gpus_per_node=4, infer_tp=4), "INFER_TP=4 exceeds the 2 GPU"),
        ([], cfg(), "no nodes"),
    ],
)
def test_impossible_layouts_name_the_variable(nodes, config, message):
    with pytest.raises(LayoutError, match=message):
        plan(nodes, config)


def test_variables_are_read_from_the_environment():
    config = SlurmLayoutConfig.from_environ({"INFER_TP": "2", "GPUS_PER_NODE": "", "API_PORT": "8100"})
    assert (config.infer_tp, config.gpus_per_node, config.api_port) == (2, 8, 8100)
    with pytest.raises(LayoutError, match=r"\$INFER_TP='two'"):
        SlurmLayoutConfig.from_environ({"INFER_TP": "two"})


def test_environment_server_arguments(tmp_path):
    out = tmp_path / "servers.yaml"
    several = plan(["t", "i1", "i2"], cfg())
    args = env_server_args(several, None, "m", "vllm", out)
    assert args[:2] == ["--slurm", "true"] and "--openai.model_name" in args and not out.exists()

    one = plan(["solo"], cfg(gpus_per_node=2))
    assert env_server_args(one, None, "m", "vllm", out) == [
        "--slurm", "false", "--openai.model_name", "m", "--openai.server_type", "vllm",
        "--openai.api_key", "x", "--openai.base_url", "http://solo:9000/v1",
    ]  # fmt: skip

    shared = plan(["solo"], cfg(gpus_per_node=8, infer_tp=2))
    assert env_server_args(shared, None, "m", "sglang", out) == ["--slurm", "false", "--config", str(out)]
    servers = load_yaml_config(out)["openai"]
    assert [s["base_url"] for s in servers] == ["http://solo:9000/v1", "http://solo:9001/v1"]
    assert all(s["model_name"] == "m" and s["server_type"] == "sglang" for s in servers)

    moved = plan(
        ["t", "i1"], cfg(infer_port=9500, gpus_per_node=1)
    )  # not where --slurm discovery looks: listed instead
    assert env_server_args(moved, None, "m", "vllm", out)[-1] == "http://i1:9500/v1"


@pytest.fixture
def fake_scontrol(tmp_path, monkeypatch):
    """``scontrol show hostnames`` -> g1 g2; ``scontrol show job 7`` -> running on g[1-2]; other jobs unknown."""
    return install_scontrol(
        monkeypatch,
        tmp_path / "bin",
        'if [ "$2" = hostnames ]; then printf "g1\\ng2\\n"; exit 0; fi\n'
        'if [ "$4" = 7 ]; then echo "JobId=7 JobState=RUNNING NodeList=g[1-2]"; exit 0; fi\n'
        'echo "slurm_load_jobs error: Invalid job id specified" >&2; exit 1\n',
    )


def test_servers_of_another_job(fake_scontrol):
    assert external_server_urls({}) is None
    assert external_server_urls({"INFERENCE_URLS": "http://a:1/v1, http://b:2/v1"}) == [
        "http://a:1/v1",
        "http://b:2/v1",
    ]
    assert external_server_urls({"INFERENCE_JOB_ID": "7", "GPUS_PER_NODE": "4", "INFER_TP": "2"}) == [
        "http://g1:9000/v1", "http://g1:9001/v1", "http://g2:9000/v1", "http://g2:9001/v1",
    ]  # fmt: skip
    with pytest.raises(LayoutError, match="INFERENCE_JOB_ID=8: no such job"):
        external_server_urls({"INFERENCE_JOB_ID": "8"})
    with pytest.raises(LayoutError, match="does not start with http"):
        external_server_urls({"INFERENCE_URLS": "g1:9000"})


def test_command_line(fake_scontrol, monkeypatch, capsys):
    monkeypatch.setenv("SLURM_JOB_NODELIST", "g[1-2]")
    monkeypatch.setenv("NUM_TRAINING_NODES", "1")
    monkeypatch.setenv("INFER_TP", "4")
    monkeypatch.setenv("SLURMD_NODENAME", "g2")
    for name, expected in [
        ("head", "g1"),
        ("api-url", "http://g1:8000"),
        ("training-nodes", "g1"),
        ("inference-nodes", "g2"),
        ("server-urls", "http://g2:9000/v1 http://g2:9001/v1"),
        ("trainer-gpus", "0,1,2,3,4,5,6,7"),
        ("node-num", "0"),
    ]:
        assert slurm_roles.main(["get", name]) == 0
        assert capsys.readouterr().out.strip() == expected, name
    assert slurm_roles.main(["plan"]) == 0
    assert "http://g2:9001/v1  GPUs 4,5,6,7" in capsys.readouterr().out
    monkeypatch.setenv("NUM_TRAINING_NODES", "2")
    with pytest.raises(SystemExit) as exc:
        slurm_roles.main(["plan"])
    assert exc.value.code == 2
    assert capsys.readouterr().err.strip() == (
        "slurm_roles: error: $NUM_TRAINING_NODES=2 leaves no inference node in a 2-node allocation"
    )


def test_inference_supervisor_starts_servers_and_stops_them_on_sigterm(tmp_path, tiny_model_dir):
    port = free_port()
    env = {
        **os.environ, "SLURM_JOB_NODELIST": "solo", "SLURMD_NODENAME": "solo", "NUM_TRAINING_NODES": "0",
        "GPUS_PER_NODE": "1", "INFER_PORT": str(port), "PYTHONPATH": str(REPO), "HF_HUB_OFFLINE": "1",
        "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}",
    }  # fmt: skip
    write_scontrol(tmp_path, "echo solo\n")
    cmd = [
        sys.executable, "-m", "atroposlib.cli.slurm_roles", "serve-inference", "--backend", "scripted",
        "--model", str(tiny_model_dir), "--log-dir", str(tmp_path / "logs"), "--",
        "--respond-fn", "atroposlib.testing.responders:arithmetic_half_right",
    ]  # fmt: skip
    proc = subprocess.Popen(cmd, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 60
        reply = None
        while time.monotonic() < deadline and proc.poll() is None:
            try:
                reply = requests.post(
                    f"http://127.0.0.1:{port}/v1/chat/completions",
                    json={"model": "m", "messages": [{"role": "user", "content": "What is 3+4?"}], "n": 2},
                    timeout=5,
                ).json()
                break
            except requests.RequestException:
                time.sleep(0.3)
        assert reply is not None, proc.stdout.read() if proc.poll() is not None else "server never answered"
        assert [c["message"]["content"] for c in reply["choices"]] == ["7", "8"]
        assert (tmp_path / "logs" / f"inference_solo_{port}.log").exists()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=30) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    with pytest.raises(requests.RequestException):
        requests.get(f"http://127.0.0.1:{port}/health", timeout=2)


def test_arithmetic_responder():
    prompt = [{"role": "system", "content": "Answer."}, {"role": "user", "content": "What is 12-3*4?"}]
    assert [arithmetic_half_right(prompt, i) for i in range(3)] == ["0", "1", "0"]
    assert arithmetic_half_right("no question here", 0) == "I don't know"
    assert evaluate_expression("2*3+4*-1") == 2
    for bad in ("2**8", "__import__('os')", "1/2", ""):
        with pytest.raises(ValueError):
            evaluate_expression(bad)


def test_the_sbatch_scripts_parse():
    for script in (REPO / "scripts" / "slurm").glob("*"):
        result = subprocess.run(["bash", "-n", str(script)], capture_output=True, text=True)
        assert result.returncode == 0, f"{script.name}: {result.stderr}"
    assert yaml  # the server list format is YAML (checked above through the env CLI's loader)
