"""The trainer's inference server manager publishes its server in the servers file, and a restart whose port is
still held moves the server to a free port (the file follows)."""

from __future__ import annotations

import os
import signal
import socket
from types import SimpleNamespace

import pytest

from atroposlib.envs.server_handling.servers_file import read_servers_file
from atroposlib.testing.api_process import free_port
from atroposlib.testing.tiny_model import build_tiny_model
from example_trainer.inference.vllm_manager import VllmManager, VllmManagerConfig, VllmStartError


def test_training_config_names_the_servers_file_and_the_restart_budget(tmp_path):
    cfg = SimpleNamespace(log_dir=str(tmp_path), inference_servers_file="/x/servers.txt", vllm_max_restarts=3)
    config = VllmManagerConfig.from_training_config(cfg)
    assert config.servers_file == "/x/servers.txt" and config.max_crash_restarts == 3
    default = VllmManager(VllmManagerConfig.from_training_config(SimpleNamespace(log_dir=str(tmp_path))))
    assert default.servers_file == tmp_path / "inference_servers.txt"
    assert default.config.max_crash_restarts == 1


def _hold(port: int) -> socket.socket:
    sock = socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # the dead server's connections may linger
    sock.bind(("127.0.0.1", port))
    sock.listen()
    return sock


@pytest.mark.slow
def test_a_restart_on_a_held_port_moves_the_server_and_rewrites_the_file(tmp_path):
    model = build_tiny_model()
    port = free_port()
    servers = tmp_path / "servers.txt"
    config = VllmManagerConfig(
        vllm_port=port, backend="hf", log_dir=str(tmp_path), startup_timeout=120, watch_interval=None,
        servers_file=str(servers),
    )  # fmt: skip
    with VllmManager(config) as manager:
        manager.start(str(model))
        assert read_servers_file(servers) == [f"http://127.0.0.1:{port}/v1"]
        os.killpg(manager.pid, signal.SIGKILL)
        manager._proc.wait(10)
        with _hold(port):  # something else holds the old port when the manager restarts its server
            manager.ensure_running()
            assert manager.port != port and manager.is_healthy()
            assert read_servers_file(servers) == [manager.base_url] == [f"http://127.0.0.1:{manager.port}/v1"]
            assert manager.pid_file.read()["server_pid"] == manager.pid
    # The first start still refuses a held port: the user named it.
    with _hold(port), pytest.raises(VllmStartError, match="already in use"):
        VllmManager(config).start(str(model))
