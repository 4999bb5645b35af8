"""The eval core: metrics from samples (standard errors, breakdowns, pass@k / mean@k / maj@k, replies that
could not be scored), rows from files and directories, the resume journal, the system prompt, several
samples per item and a resumed single evaluation against the scripted server."""

from __future__ import annotations

import json
import math

import pytest

from atroposlib.envs.data_loading import DatasetError
from atroposlib.envs.eval import pass_at_k
from atroposlib.evals import HubSet, load_eval_rows
from atroposlib.evals.journal import Journal, item_key
from atroposlib.evals.report import aggregate, headline, mean_and_stderr, pass_ks
from environments.eval_environments.mmlu_eval import MMLUEvalEnv
from tests.helpers.cli_runs import FIXTURES
from tests.helpers.single_turn_runs import ScriptedRuns, offline_env, prompt_text, write_jsonl

MMLU = FIXTURES / "evals" / "mmlu"


@pytest.fixture
def scripted(tiny_model_dir, tmp_path, capsys) -> ScriptedRuns:
    return ScriptedRuns(tiny_model_dir, tmp_path, capsys)


def sample(item: str, score, extracted="A", group="g1", **extra):
    return {"id": item, "score": score, "extracted": extracted, "groups": {"part": group}, **extra}


# -- metrics ---------------------------------------------------------------------------------------------
def test_mean_and_stderr():
    assert mean_and_stderr([1.0]) == (1.0, 0.0)
    mean, err = mean_and_stderr([1.0, 0.0, 0.0, 1.0])
    assert mean == 0.5 and err == pytest.approx(math.sqrt((4 * 0.25) / 3 / 4))
    assert pass_ks(1) == [1] and pass_ks(5) == [1, 2, 4, 5] and pass_ks(8) == [1, 2, 4, 8]


def test_several_samples_per_item():
    samples = [
        *(sample("q1", s, e) for s, e in [(1.0, "B"), (0.0, "A"), (1.0, "B"), (0.0, "C")]),  # 2 of 4 right
        *(sample("q2", s, e, "g2") for s, e in [(0.0, "A"), (0.0, "A"), (1.0, "D"), (0.0, None)]),  # 1 of 4
        *(sample("q3", 0.0, "A", "g2") for _ in range(4)),  # none
    ]
    metrics, subtasks = aggregate(samples, breakdowns=("part",), n=4)
    item_means = [0.5, 0.25, 0.0]
    assert metrics["eval/accuracy"] == pytest.approx(0.25) == metrics["eval/mean@4"]
    assert metrics["eval/accuracy_stderr"] == pytest.approx(mean_and_stderr(item_means)[1])
    for k in (1, 2, 4):
        expected = (pass_at_k(4, 2, k) + pass_at_k(4, 1, k) + 0.0) / 3
        assert metrics[f"eval/pass@{k}"] == pytest.approx(expected)
    assert metrics["eval/pass@1"] == pytest.approx(0.25) and metrics["eval/pass@4"] == pytest.approx(2 / 3)
    assert metrics["eval/maj@4"] == pytest.approx(
        1 / 3
    )  # q1's majority B is right; q2's A and q3's A are not
    assert metrics["eval/num_items"] == 3 and metrics["eval/num_samples"] == 12
    assert metrics["eval/no_answer_rate"] == pytest.approx(1 / 12)
    assert metrics["eval/part_g1_accuracy"] == 0.5 and metrics["eval/part_g2_count"] == 2
    assert subtasks["part:g2"] == {"accuracy": 0.125, "accuracy_stderr": pytest.approx(0.125), "num_items": 2}
    assert "part_g1_accuracy" not in headline(metrics, ("part",)) and "pass@2" in headline(metrics, ("part",))


def test_unscored_replies_are_counted_apart_and_extra_metrics_averaged():
    samples = [
        sample("a", 1.0, metrics={"f1": 1.0}),
        sample("b", None, extracted=None),  # e.g. a judge that answered garbage
        sample("c", 0.0, metrics={"f1": 0.5}, finish_reason="length"),
    ]
    metrics, _ = aggregate(samples, metric="em")
    assert metrics["eval/em"] == 0.5 and metrics["eval/unscored"] == 1 and metrics["eval/num_items"] == 3
    assert metrics["eval/f1"] == 0.75 and metrics["eval/f1_stderr"] == pytest.approx(0.25)
    assert metrics["eval/truncated_rate"] == pytest.approx(1 / 3)


# -- data ------------------------------------------------------------------------------------------------
def test_rows_from_a_directory_of_subsets(tmp_path):
    hub = HubSet("lighteval/mmlu", "test", ("anatomy", "marketing", "virology"), subset_field="subject")
    rows = load_eval_rows(MMLU, hub, ("question",))
    assert [r.subset for r in rows] == ["anatomy"] * 3 + ["marketing"] * 3
    assert rows[0].source.endswith("anatomy.jsonl") and rows[3].index == 0
    (tmp_path / "anatomy.jsonl").write_text(json.dumps({"question": "q"}) + "\n")
    (tmp_path / "notes.txt").write_text("ignored")
    rows = load_eval_rows(tmp_path, hub, ("question",))
    assert rows[0].data == {"question": "q", "subject": "anatomy"}  # the subset's name fills the field
    with pytest.raises(DatasetError, match="no file named after a selected subset"):
        load_eval_rows(tmp_path, HubSet("x", "test", ("astronomy",)), ())
    with pytest.raises(DatasetError, match="no data files"):
        load_eval_rows(tmp_path / "empty", HubSet("x", "test"), ()) if (
            tmp_path / "empty"
        ).mkdir() is None else None


def test_malformed_files_are_one_line(tmp_path):
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"question": "q"}\n{"question": \n')
    with pytest.raises(DatasetError, match=r"bad\.jsonl: line 2: not valid JSON"):
        load_eval_rows(bad, HubSet("x", "test"), ("question",))
    missing = write_jsonl(tmp_path / "missing.jsonl", [{"question": "q"}, {"other": 1}])
    with pytest.raises(DatasetError, match=r"missing\.jsonl: row 1: missing field 'question'"):
        load_eval_rows(missing, HubSet("x", "test"), ("question",))
    with pytest.raises(DatasetError, match=r"nope\.jsonl: no such file"):
        load_eval_rows(tmp_path / "nope.jsonl", HubSet("x", "test"), ())


def test_hub_sets_name_their_source():
    assert HubSet("dmayhem93/agieval-{config}", "test", ("sat-math",)).describe("sat-math") == (
        "dmayhem93/agieval-sat-math (test)"
    )
    assert HubSet("lighteval/mmlu", "test").describe("anatomy") == "lighteval/mmlu/anatomy (test)"


# -- journal ---------------------------------------------------------------------------------------------
def test_journal_survives_a_line_cut_short(tmp_path):
    journal = Journal(tmp_path / "j.jsonl")
    journal.append("k1", [{"id": "a"}])
    journal.close()
    with open(tmp_path / "j.jsonl", "a") as fh:
        fh.write('{"key": "k2", "samples": [{"id"')  # killed mid-write
    journal = Journal(tmp_path / "j.jsonl")
    assert journal.load() == {"k1": [{"id": "a"}]}
    journal.append("k3", [{"id": "c"}])
    journal.close()
    assert Journal(tmp_path / "j.jsonl").load() == {"k1": [{"id": "a"}], "k3": [{"id": "c"}]}
    gen = {"temperature": 0.0, "n": 1}
    assert item_key("a", [{"role": "user", "content": "q"}], gen, "m") != item_key("a", [], gen, "m")
    assert item_key("a", [], gen, "m") != item_key("a", [], {**gen, "temperature": 0.6}, "m")
    assert item_key("a", [], gen, "m") != item_key("a", [], gen, "other-model")


# -- prompts, several samples, resume --------------------------------------------------------------------
def test_system_prompt(tiny_model_dir):
    env = offline_env(MMLUEvalEnv, tiny_model_dir)
    assert env.system_prompt() is None
    env.config.custom_thinking_prompt, env.config.custom_system_prompt = "Think.", "Be brief."
    assert env.system_prompt() == "Think.\n\nBe brief."
    env.config.thinking_mode = False
    assert env.system_prompt() == "Be brief."


def right_then_wrong(prompt, index):
    """Choice 0 and 2 right (as ``Answer: X`` and boxed), choice 1 wrong."""
    text = prompt_text(prompt)
    letter = next(
        line[0]
        for line in text.splitlines()
        if line[:3] in {"A) ", "B) ", "C) ", "D) "} and _right(text, line)
    )
    wrong = "A" if letter != "A" else "B"
    return [f"Answer: {letter}", f"<answer>{wrong}</answer>", f"\\boxed{{{letter}}}"][index % 3]


RIGHT = {
    "Femur",
    "Left ventricle",
    "Liver",
    "1776",
    "George Washington",
    "Place",
    "The place it occupies in customers' minds",
    "Price skimming",
}


def _right(text: str, line: str) -> bool:
    return line[3:] in RIGHT


def test_several_samples_per_item_against_the_server(scripted):
    run = scripted.evaluation(
        MMLUEvalEnv,
        ["--env.dataset_path", MMLU, "--env.pass_at_n_samples", "3"],
        right_then_wrong,
        server_type=None,
    )
    m = run.metrics
    assert m["eval/num_samples"] == 24 and m["eval/accuracy"] == pytest.approx(2 / 3) == m["eval/mean@3"]
    assert m["eval/pass@1"] == pytest.approx(2 / 3) and m["eval/pass@2"] == 1.0 and m["eval/pass@3"] == 1.0
    assert m["eval/maj@3"] == 1.0 and m["eval/accuracy_stderr"] == 0.0
    assert len(run.requests) == 8 and all(r["body"]["n"] == 3 for r in run.requests)
    assert sorted({s["sample"] for s in run.samples}) == [0, 1, 2]
    assert run.report["config_general"]["generation_parameters"]["n"] == 3


def test_a_resumed_evaluation_asks_nothing_twice(scripted):
    args = ["--env.dataset_path", MMLU, "--env.resume", "true"]
    first = scripted.evaluation(MMLUEvalEnv, args, right_then_wrong, server_type=None)
    again = scripted.evaluation(MMLUEvalEnv, args, right_then_wrong, server_type=None)
    assert len(first.requests) == 8 and again.requests == []
    assert again.metrics == first.metrics and again.samples == first.samples
    fresh = scripted.evaluation(MMLUEvalEnv, ["--env.dataset_path", MMLU], right_then_wrong, server_type=None)
    assert len(fresh.requests) == 8  # without --env.resume the journal starts over


def test_the_package_docstring_example_runs(scripted, tmp_path):
    """The declaration example of ``atroposlib.evals``' docstring is a working benchmark."""
    import textwrap

    import atroposlib.evals

    doc = atroposlib.evals.__doc__
    code = textwrap.dedent(doc[doc.index("    from pydantic import Field") : doc.index("Other benchmarks")])
    script = tmp_path / "arc_example.py"
    script.write_text(code)
    run = scripted.command(
        script,
        "evaluate",
        ["--env.dataset_path", FIXTURES / "evals" / "arc", "--env.data_dir_to_save_evals", tmp_path / "out"],
        lambda prompt, index: "<answer>A</answer>",
        server_type=None,
    )
    assert len(run) == 7
    results = json.loads((tmp_path / "out" / "metrics.json").read_text())["results"]
    assert results["all"]["eval/num_items"] == 7
    assert {"atropos|arc_eval:subset:ARC-Easy|0", "atropos|arc_eval:subset:ARC-Challenge|0"} <= set(results)
