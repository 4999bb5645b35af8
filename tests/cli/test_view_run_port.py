"""``view-run``'s port: a default clear of the API and inference ports, shown in --help; a busy port is one
error line naming --port."""

from __future__ import annotations

import socket

from atroposlib.cli.view_run import DEFAULT_PORT, build_parser
from tests.helpers.cli_tools import run_tool


def test_default_port_is_free_of_the_other_defaults_and_shown_in_help():
    assert DEFAULT_PORT not in (8000, 9000, 9001, 9004, 9005, 9006, 9007)
    assert build_parser().parse_args([]).port == DEFAULT_PORT
    assert f"(default: {DEFAULT_PORT})" in build_parser().format_help()


def test_busy_port_is_one_line_naming_the_flag(tmp_path):
    jsonl = tmp_path / "groups.jsonl"
    jsonl.write_text("")
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        for module in ("view_run", "view_run_multimodal"):
            proc = run_tool(
                module, "--jsonl", jsonl, "--tokenizer", "none", "--port", port, subprocess_=True, timeout=240
            )
            lines = [line for line in proc.stderr.splitlines() if line.strip()]
            assert proc.returncode == 1, proc.stderr
            assert len(lines) == 1 and "--port" in lines[0] and f"127.0.0.1:{port}" in lines[0], lines
            assert "share=True" not in proc.stderr + proc.stdout
