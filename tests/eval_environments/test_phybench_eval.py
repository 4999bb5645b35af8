"""PHYBench on a fixture in its hub schema, against the scripted server: accuracy and the EED score (exact
values), by tag, for every kind of reply; the hub's repeated questions are dropped."""

from __future__ import annotations

import pytest

from environments.eval_environments.phybench_eval import PHYBenchEvalEnv
from tests.eval_environments.test_math_evals import DATA, LONG, MATH_ARGS, responder, stderr
from tests.helpers.single_turn_runs import offline_env

REPLIES = {
    "kinetic energy": "<think>Half m v squared.</think>\\boxed{0.5 m v^2}",  # equivalent: EED 100
    "magnetic field": "\\boxed{\\frac{\\mu_0 I}{4 \\pi r}}",  # one number off in a 10-node tree: EED 50
    "friction force": "\\boxed{m g \\cos\\theta}",  # one function off in 5 nodes: EED 40
    "fringe spacing": "",
    "pressure": "<think>pV = nRT, so the pressure is",
    "photon": "\\boxed{\\frac{h c}{\\lambda}} or \\boxed{\\frac{h}{\\lambda}}",  # a hedge: the worse box, 43.3
    "angular frequency": LONG,
}
EED = {"1": 100.0, "2": 50.0, "3": 40.0, "4": 0.0, "5": 0.0, "6": 60 - 100 / 6, "7": 0.0}


def test_phybench_accuracy_and_eed_score(scripted):
    run = scripted.evaluation(
        PHYBenchEvalEnv,
        ["--env.dataset_path", DATA / "phybench.jsonl", *MATH_ARGS],
        responder(REPLIES),
        server_type=None,
    )
    m = run.metrics
    assert m["eval/num_items"] == 7  # the repeated question is dropped
    assert m["eval/accuracy"] == pytest.approx(1 / 7)
    assert m["eval/eed_score"] == pytest.approx(sum(EED.values()) / 7)
    assert m["eval/eed_score_stderr"] == pytest.approx(stderr(list(EED.values())))
    assert m["eval/tag_mechanics_accuracy"] == 0.5 and m["eval/tag_mechanics_eed_score"] == pytest.approx(
        70.0
    )
    assert m["eval/tag_modern_eed_score"] == pytest.approx(60 - 100 / 6)
    assert m["eval/tag_optics_accuracy"] == 0.0 and m["eval/tag_advanced_count"] == 1
    assert m["eval/no_answer_rate"] == pytest.approx(4 / 7)  # empty, unclosed, cut, hedge
    samples = {s["id"]: s for s in run.samples}
    assert {k: s["metrics"]["eed_score"] for k, s in samples.items()} == pytest.approx(EED)
    assert samples["1"]["method"] == "correct" and samples["1"]["extracted"] == "0.5 m v^2"
    assert samples["2"]["method"] == "wrong" and samples["2"]["eed_relative_distance"] == pytest.approx(0.1)
    assert samples["6"]["method"] == "hedge" and samples["6"]["answers"] == [
        "\\frac{h c}{\\lambda}",
        "\\frac{h}{\\lambda}",
    ]
    assert samples["7"]["finish_reason"] == "length"
    messages = samples["1"]["messages"]
    assert len(messages) == 1  # thinking mode is off by default: no system prompt
    assert messages[0]["content"].startswith("You are a physics expert.") and messages[0]["content"].endswith(
        "Answer:"
    )


async def test_tags_filter_max_samples_and_detailed_prompt(tiny_model_dir):
    env = offline_env(
        PHYBenchEvalEnv, tiny_model_dir, dataset_path=str(DATA / "phybench.jsonl"), tags_filter=["MECHANICS"]
    )
    await env.setup()
    assert sorted(item.id for item in env.items) == ["1", "3"]
    env = offline_env(
        PHYBenchEvalEnv, tiny_model_dir, dataset_path=str(DATA / "phybench.jsonl"), max_samples=3,
        use_detailed_prompt=True,
    )  # fmt: skip
    await env.setup()
    assert len(env.items) == 3 and env.items[0].prompt.startswith("Solve the following physics problem.")


def test_accuracy_without_the_eed_score(scripted):
    run = scripted.evaluation(
        PHYBenchEvalEnv,
        ["--env.dataset_path", DATA / "phybench.jsonl", "--env.compute_eed_score", "false", *MATH_ARGS],
        responder(REPLIES),
        server_type=None,
    )  # fmt: skip
    assert run.metrics["eval/accuracy"] == pytest.approx(1 / 7)
    assert "eval/eed_score" not in run.metrics
