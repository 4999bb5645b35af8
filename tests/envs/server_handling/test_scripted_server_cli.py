"""``python -m atroposlib.testing.scripted_server``: says where it listens; a busy port is one error line."""

from __future__ import annotations

import re
import socket
import subprocess
import sys

import requests


def test_command_line_prints_its_url_and_answers(tiny_model_dir):
    cmd = [sys.executable, "-m", "atroposlib.testing.scripted_server", "--port", "0"]
    cmd += ["--tokenizer", str(tiny_model_dir), "--response", "four"]
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        line = proc.stdout.readline()
        match = re.search(r"listening on (http://127\.0\.0\.1:\d+/v1)", line)
        assert match, line
        assert str(tiny_model_dir) in line and "1 fixed answer(s)" in line
        reply = requests.post(
            f"{match.group(1)}/chat/completions",
            json={"model": "m", "messages": [{"role": "user", "content": "2+2?"}]},
            timeout=30,
        ).json()
        assert reply["choices"][0]["message"]["content"] == "four"
    finally:
        proc.terminate()
        proc.wait(30)
        proc.stdout.close()


def test_busy_port_is_one_line():
    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "-m", "atroposlib.testing.scripted_server", "--port", str(port)],
            capture_output=True,
            text=True,
            timeout=120,
        )
    assert result.returncode == 2
    lines = [line for line in result.stderr.splitlines() if line.strip()]
    assert len(lines) == 1 and f"127.0.0.1:{port}" in lines[0] and "--port" in lines[0], result.stderr
