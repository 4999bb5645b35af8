"""The EvalBase example (AIME 2024 with the Hermes prompt) against the scripted server: pass@k from several
samples, the math check's verdicts in samples.jsonl, the --env options and a one-line hub error."""

from __future__ import annotations

import json

import pytest

from atroposlib.testing.scripted_server import launch_scripted_server
from environments.eval_environments.aime24_hermes_example import HERMES_SYSTEM_PROMPT, main
from tests.eval_environments.test_math_evals import DATA, responder
from tests.helpers.cli_runs import read_jsonl

REPLIES = {
    "first AIME 2024": ["\\boxed{204}", "<think>Count the pairs.</think>\\boxed{204}"],
    "second AIME 2024": [
        "<think>Mod 100.</think>\\boxed{025}",
        "\\boxed{24} or \\boxed{25}",
    ],  # right, then a hedge
    "third AIME 2024": ["", "<think>The length is"],
}


def test_example_reports_pass_at_k(tiny_model_dir, tmp_path):
    with launch_scripted_server(respond=responder(REPLIES), tokenizer=tiny_model_dir) as server:
        metrics = main(
            ["evaluate", "--server-url", server.base_url, "--model-name", "m", "--env.dataset_path",
             str(DATA / "aime" / "2024.jsonl"), "--env.pass_at_n_samples", "2", "--env.data_dir_to_save_evals",
             str(tmp_path)],
        )  # fmt: skip
        requests = list(server.requests)
    assert metrics == {"pass@1:2": pytest.approx(0.5), "accuracy": pytest.approx(0.5)}
    report = json.loads((tmp_path / "metrics.json").read_text())
    assert report["results"]["atropos|AIME24@1:2|0"]["pass@1:2"] == pytest.approx(0.5)
    samples = [s for line in read_jsonl(tmp_path / "samples.jsonl") for s in line]  # one list per item
    methods = sorted(s["method"] for s in samples)
    assert methods == ["correct", "correct", "correct", "empty", "hedge", "unclosed_think"]
    body = requests[0]["body"]
    assert body["n"] == 2 and body["temperature"] == 1.0 and body["max_tokens"] == 32768
    assert body["messages"][0] == {"role": "system", "content": HERMES_SYSTEM_PROMPT}


def test_example_without_the_system_prompt(tiny_model_dir, tmp_path):
    with launch_scripted_server(respond=responder(REPLIES), tokenizer=tiny_model_dir) as server:
        metrics = main(
            ["--server-url", server.base_url, "--model-name", "m", "--env.dataset_path",
             str(DATA / "aime" / "2024.jsonl"), "--env.pass_at_n_samples", "1", "--env.use_system_prompt", "false"],
        )  # fmt: skip
        requests = list(server.requests)
    assert metrics == {"pass@1": pytest.approx(2 / 3), "accuracy": pytest.approx(2 / 3)}
    assert [m["role"] for m in requests[0]["body"]["messages"]] == ["user"]


def test_unreachable_hub_is_one_line(hub_offline, capsys):
    with pytest.raises(SystemExit) as exited:
        main(["--server-url", "http://127.0.0.1:9", "--model-name", "m"])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip()
    assert (
        err.startswith("error: HuggingFaceH4/aime_2024 (train): cannot load from the hub") and "\n" not in err
    )
