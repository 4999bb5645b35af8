"""``atropos-eval``: suites and names resolve to files; a run writes one table; an interrupted run, started
again, asks the model only for the items it had not scored."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from atroposlib.cli._tooling.errors import ToolError
from atroposlib.cli.eval_suite import split_flags
from atroposlib.evals.journal import JOURNAL_NAME
from atroposlib.evals.suite import (
    SUITES,
    SuiteError,
    command_args,
    load_env_class,
    local_data,
    resolve_benchmarks,
)
from atroposlib.testing.scripted_server import launch_scripted_server
from tests.helpers.cli_runs import FIXTURES, REPO_ROOT
from tests.helpers.single_turn_runs import OFFLINE, prompt_text

EVALS = REPO_ROOT / "environments" / "eval_environments"
DATA = FIXTURES / "evals"
BENCHMARKS = ["mmlu", "gpqa", "boolq"]  # 8 + 7 + 7 items in the fixtures


def suite(tmp_path: Path, base_url: str, *extra: str) -> subprocess.Popen:
    """``atropos-eval`` on the three fixture benchmarks, started in the background."""
    args = [sys.executable, "-m", "atroposlib.cli.eval_suite", *BENCHMARKS, "--base-url", base_url,
            "--model", "scripted-model", "--evals-dir", str(EVALS), "--data-dir", str(DATA),
            "--output-dir", str(tmp_path / "out"), *extra]  # fmt: skip
    return subprocess.Popen(
        args,
        cwd=tmp_path,
        env={**os.environ, **OFFLINE},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def asked(requests: list[dict]) -> list[str]:
    """The user prompts of the chat requests the scripted server received."""
    return [prompt_text(r["body"]["messages"]) for r in requests if r["path"] == "/v1/chat/completions"]


def journaled(out: Path) -> list[str]:
    """The user prompts of every item the journals hold (complete lines only)."""
    prompts = []
    for name in BENCHMARKS:
        path = out / name / JOURNAL_NAME
        if path.is_file():
            for line in path.read_text().splitlines():
                try:
                    prompts.append(prompt_text(json.loads(line)["samples"][0]["messages"]))
                except ValueError:
                    pass
    return prompts


def test_names_suites_and_files_resolve():
    resolved = dict(resolve_benchmarks(["mmlu", "mc", str(EVALS / "gpqa_eval.py")], EVALS))
    assert list(resolved)[:2] == ["mmlu", "mmlu_pro"] and len(resolved) == len(SUITES["mc"])
    assert resolved["gpqa"] == EVALS / "gpqa_eval.py" and resolved["musr"] == EVALS / "musr_eval.py"
    assert len(SUITES["core"]) == 10
    with pytest.raises(SuiteError, match="unknown benchmark or suite 'nope'"):
        resolve_benchmarks(["nope"], EVALS)
    assert local_data(DATA, "mmlu") == DATA / "mmlu" and local_data(DATA, "gpqa") == DATA / "gpqa.jsonl"
    assert local_data(DATA, "nope") is None


def test_flags_go_to_the_benchmarks_that_have_the_field(tmp_path):
    mmlu = load_env_class(EVALS / "mmlu_eval.py")
    flags = {"env.subjects": '["anatomy"]', "env.eval_limit": "3", "openai.model_name": "m"}
    args = command_args(mmlu, flags, tmp_path / "mmlu", restart=False)
    assert args[0] == "evaluate" and "--env.subjects" in args and "--env.resume" in args
    assert args[args.index("--env.resume") + 1] == "true"
    gpqa = load_env_class(EVALS / "gpqa_eval.py")
    args = command_args(gpqa, flags, tmp_path / "gpqa", restart=True)
    assert "--env.subjects" not in args and args[args.index("--env.resume") + 1] == "false"
    assert args[args.index("--env.eval_limit") + 1] == "3" and "--openai.model_name" in args


def test_flags_for_all_and_for_one_benchmark():
    common, own = split_flags(
        [
            "--env.eval_limit",
            "5",
            "--openai.api_key=k",
            "--arc.subset",
            "ARC-Easy",
            "--judge.model_name",
            "j",
        ],
        ["mmlu", "arc"],
    )
    assert common == {"env.eval_limit": "5", "openai.api_key": "k", "judge.model_name": "j"}
    assert own == {"arc": {"env.subset": "ARC-Easy"}}
    with pytest.raises(ToolError, match="'gpqa' is none of the benchmarks run"):
        split_flags(["--gpqa.subset", "x"], ["mmlu"])
    with pytest.raises(ToolError, match="unrecognized argument '--eval_limit'"):
        split_flags(["--eval_limit", "5"], ["mmlu"])
    with pytest.raises(ToolError, match="needs a value"):
        split_flags(["--env.eval_limit"], ["mmlu"])


def test_a_suite_writes_one_table(tiny_model_dir, tmp_path):
    with launch_scripted_server(
        respond=lambda p, i: "<think>ok</think><answer>A</answer>", tokenizer=tiny_model_dir
    ) as server:
        proc = suite(tmp_path, server.base_url, "--boolq.eval_limit", "5")  # a flag for boolq alone
        out, err = proc.communicate(timeout=300)
    assert proc.returncode == 0, err[-3000:]
    table = json.loads((tmp_path / "out" / "results.json").read_text())
    assert [row["benchmark"] for row in table["rows"]] == BENCHMARKS
    for row in table["rows"]:
        report = json.loads((tmp_path / "out" / row["benchmark"] / "metrics.json").read_text())
        assert row["metrics"]["accuracy"] == report["results"]["all"]["eval/accuracy"]
        assert row["metrics"]["accuracy_stderr"] == report["results"]["all"]["eval/accuracy_stderr"]
        assert row["status"] == "ok" and row["reused_items"] == 0
    assert [r["metrics"]["num_items"] for r in table["rows"]] == [8, 7, 5]
    markdown = (tmp_path / "out" / "results.md").read_text()
    assert "| benchmark | accuracy | accuracy_stderr |" in markdown
    assert markdown.count("\n| mmlu |") == 1 and "| boolq |" in markdown and markdown in out


def test_an_interrupted_suite_asks_only_for_what_it_had_not_scored(tiny_model_dir, tmp_path):
    respond = lambda p, i: "<think>ok</think><answer>A</answer>"  # noqa: E731
    with launch_scripted_server(respond=respond, tokenizer=tiny_model_dir) as server:
        server.control(delay_s=0.25)
        first = suite(tmp_path, server.base_url, "--max-concurrency", "1")
        deadline = time.monotonic() + 120
        while len(journaled(tmp_path / "out")) < 10 and time.monotonic() < deadline:  # inside gpqa
            time.sleep(0.05)
        first.send_signal(signal.SIGKILL)
        first.communicate(timeout=30)
        done = journaled(tmp_path / "out")
        assert 10 <= len(done) < 22, "killed mid-run"
        before = len(server.requests)
        server.control(delay_s=0.0)
        second = suite(tmp_path, server.base_url, "--max-concurrency", "1")
        out, err = second.communicate(timeout=300)
        again = asked(server.requests[before:])
        every = asked(server.requests[:before]) + again
    assert second.returncode == 0, err[-3000:]
    assert not set(again) & set(done)  # nothing scored before was asked again
    assert sorted(again) == sorted(set(every) - set(done))  # and everything else exactly once
    table = json.loads((tmp_path / "out" / "results.json").read_text())
    assert sum(r["reused_items"] for r in table["rows"]) == len(done)
    assert sum(r["requests"] for r in table["rows"]) == len(again) == 22 - len(done)
    assert [r["metrics"]["num_items"] for r in table["rows"]] == [8, 7, 7]
    samples = (tmp_path / "out" / "mmlu" / "samples.jsonl").read_text().splitlines()
    assert len(samples) == 8
    assert "| reused items | status | seconds |" in (tmp_path / "out" / "results.md").read_text()


def test_restart_and_bad_names(tiny_model_dir, tmp_path):
    with launch_scripted_server(
        respond=lambda p, i: "<answer>A</answer>", tokenizer=tiny_model_dir
    ) as server:
        assert suite(tmp_path, server.base_url).wait(timeout=300) == 0
        before = len(server.requests)
        assert suite(tmp_path, server.base_url).wait(timeout=300) == 0
        assert len(server.requests) == before  # all reused
        assert suite(tmp_path, server.base_url, "--restart").wait(timeout=300) == 0
        assert len(asked(server.requests[before:])) == 22
    bad = subprocess.run(
        [sys.executable, "-m", "atroposlib.cli.eval_suite", "nope", "--evals-dir", str(EVALS), "--model", "m"],
        capture_output=True, text=True, cwd=tmp_path,
    )  # fmt: skip
    assert bad.returncode == 2 and bad.stderr.startswith(
        "atropos-eval: error: unknown benchmark or suite 'nope'"
    )
    assert "Traceback" not in bad.stderr


def test_a_down_server_fails_one_row_and_skips_the_rest(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", "atroposlib.cli.eval_suite", *BENCHMARKS, "--base-url", "http://127.0.0.1:9/v1",
         "--model", "m", "--evals-dir", str(EVALS), "--data-dir", str(DATA), "--output-dir", str(tmp_path / "out"),
         "--env.server_unavailable_timeout", "1", "--env.max_retries", "1"],
        capture_output=True, text=True, cwd=tmp_path, env={**os.environ, **OFFLINE}, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 1
    rows = json.loads((tmp_path / "out" / "results.json").read_text())["rows"]
    assert "ServerUnavailableError" in rows[0]["error"]
    assert [r["error"] for r in rows[1:]] == ["not run: the inference server is unavailable"] * 2
    assert "| mmlu |" in (tmp_path / "out" / "results.md").read_text()
