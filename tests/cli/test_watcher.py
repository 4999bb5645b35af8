"""inference-node-wandb-watcher as a subprocess against a real run-api and small health servers."""

from __future__ import annotations

import contextlib
import http.server
import random
import signal
import socket
import threading
from pathlib import Path

from atroposlib.testing.api_process import free_port
from tests.helpers.cli_tools import LiveRun, ToolProcess, fixture_groups, read_wandb_records


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self):  # noqa: N802 - http.server API
        code = self.server.code if self.path == "/health_generate" else 404
        self.send_response(code)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def log_message(self, *args):
        pass


@contextlib.contextmanager
def health_servers(codes: list[int]):
    """HTTP servers on consecutive loopback ports answering /health_generate with ``codes[i]``;
    yields the first port. The two ports after them are checked to be closed."""
    for _ in range(50):
        base = random.randint(20000, 60000)
        servers = []
        try:
            for i, code in enumerate(codes):
                srv = http.server.ThreadingHTTPServer(("127.0.0.1", base + i), _Health)
                srv.code = code
                servers.append(srv)
            for extra in range(len(codes), len(codes) + 2):
                with socket.socket() as s:
                    if s.connect_ex(("127.0.0.1", base + extra)) == 0:
                        raise OSError("port in use")
        except OSError:
            for srv in servers:
                srv.server_close()
            continue
        threads = [threading.Thread(target=s.serve_forever, daemon=True) for s in servers]
        for t in threads:
            t.start()
        try:
            yield base
        finally:
            for srv in servers:
                srv.shutdown()
                srv.server_close()
        return
    raise RuntimeError("no free consecutive ports")


def _wandb_history(wandb_dir: Path) -> tuple[list, dict[int, dict[str, str]]]:
    files = list(wandb_dir.glob("wandb/offline-run-*/run-*.wandb"))
    assert len(files) == 1, files
    runs, history = [], {}
    for record in read_wandb_records(files[0]):
        kind = record.WhichOneof("record_type")
        if kind == "run":
            runs.append((record.run.project, record.run.run_group, record.run.display_name))
        elif kind == "history":
            items = {item.key or "/".join(item.nested_key): item.value_json for item in record.history.item}
            history[record.history.step.num] = items
    return runs, history


def test_watcher_logs_node_health_offline_and_exits_on_sigterm(tmp_path, api, tiny_tokenizer):
    wandb_dir = tmp_path / "wb"
    wandb_dir.mkdir()
    env = {"WANDB_DIR": str(wandb_dir), "WANDB_API_KEY": "", "WANDB_MODE": "", "WANDB_SILENT": "true"}
    with health_servers([200, 503]) as base:
        args = ["--api_addr", api.url, "--tp", "2", "--node_num", "5", "--base-port", base]
        args += ["--interval", "0.3", "--timeout", "2", "--health-host", "127.0.0.1"]
        watcher = ToolProcess("inference_node_wandb_watcher", args, tmp_path / "watcher.log", env=env)
        try:
            watcher.wait_output("Waiting for init...")  # no trainer yet
            run = LiveRun(api)
            run.register_trainer(batch_size=8, wandb_group="grp-x", wandb_project="proj-x")
            watcher.wait_output("logging offline")
            watcher.wait_output("step 0:")
            env_id = run.register_env("arith", 4)
            for _, group in fixture_groups(tiny_tokenizer, {"arith": env_id, "story": env_id})[:2]:
                run.post("/scored_data", group)
            assert run.get("/batch")["batch"]  # the trainer takes a batch: step 1
            before = run.snapshot()
            output = watcher.wait_output("step 1:")
            assert watcher.stop(signal.SIGTERM) == 0, watcher.log()
        finally:
            watcher.stop(signal.SIGKILL)
    line = next(ln for ln in output.splitlines() if ln.startswith("step 1:"))
    assert line.split()[2:] == [
        "server/server_health_5_0=1",
        "server/server_health_5_1=0",
        "server/server_health_5_2=0",
        "server/server_health_5_3=0",
    ]
    assert run.snapshot() == before  # the watcher only reads
    runs, history = _wandb_history(wandb_dir)
    assert runs[0] == ("proj-x", "grp-x", "inf_node_5")
    assert history[0]["server/server_health_5_0"] == "0"  # initial values, before the first probe
    assert history[1]["server/server_health_5_0"] == "1"
    assert history[1]["server/server_health_5_1"] == "0"
    assert sorted(k for k in history[1] if k.startswith("server/")) == [
        f"server/server_health_5_{i}" for i in range(4)
    ]


def test_watcher_waits_for_an_unreachable_api_and_stops_cleanly(tmp_path):
    args = ["--api_addr", f"http://127.0.0.1:{free_port()}", "--tp", "8", "--node_num", "0", "--timeout", "1"]
    watcher = ToolProcess(
        "inference_node_wandb_watcher", args, tmp_path / "w.log", env={"WANDB_MODE": "offline"}
    )
    try:
        watcher.wait_output("Waiting for init...")
        assert watcher.stop(signal.SIGTERM, timeout=15) == 0
    finally:
        watcher.stop(signal.SIGKILL)
    assert "Traceback" not in watcher.log()


def test_watcher_rejects_bad_flags(tmp_path):
    from tests.helpers.cli_tools import run_tool

    proc = run_tool(
        "inference_node_wandb_watcher", "--api_addr", "http://127.0.0.1:1", "--tp", "0", "--node_num", "1"
    )
    assert proc.returncode == 1 and "--tp must be >= 1" in proc.stderr
    proc = run_tool("inference_node_wandb_watcher", "--tp", "1", "--node_num", "1")
    assert proc.returncode == 2 and "--api_addr" in proc.stderr
