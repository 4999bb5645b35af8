"""JudgeMark v2 with the scripted server as the judge under test: criteria parsed and inverted, a garbage
reply unscored, calibration, the writers ranked against the reference, the final score's formula."""

from __future__ import annotations

import statistics

import pytest
from scipy import stats

from atroposlib.envs.data_loading import DatasetError
from atroposlib.evals.report import slug
from environments.eval_environments.judgemark_eval import (
    JudgeMarkEvalEnv,
    calibrate,
    normalise,
    parse_scores,
    raw_score,
)
from tests.helpers.cli_runs import FIXTURES
from tests.helpers.single_turn_runs import offline_env, prompt_text

DATA = FIXTURES / "evals" / "judgemark"
#: (writer, story) -> (positive criteria score, negative criteria score)
GRADES = {
    ("claude-opus-4", "sea"): (9, 1), ("claude-opus-4", "fox"): (8, 2),
    ("gpt-4.1-nano", "sea"): (6, 4), ("gpt-4.1-nano", "fox"): (5, 5),
    ("gemma-3-4b-it", "sea"): (3, 7), ("gemma-3-4b-it", "fox"): (2, 8),
}  # fmt: skip
RAW = {
    "claude-opus-4": [9.1, 8.2, 9.1, 8.2],
    "gpt-4.1-nano": [6.4, 5.5, 6.4, 5.5],
    "gemma-3-4b-it": [3.7, 3.7, 2.8],
}


def respond(prompt, index):
    text = prompt_text(prompt)
    writer = text.split("written by ", 1)[1].split(",", 1)[0]
    story = "sea" if "about the sea" in text else "fox"
    if writer == "gemma-3-4b-it" and story == "fox" and "iteration 1" in text:
        return "The story is fine."
    good, bad = GRADES[(writer, story)]
    return (
        f"<think>Reading it.</think>**Imagery:** {good}\nCoherence: [{good}]\nOriginality: {good}\n"
        f"Purple Prose: {bad}\nMeandering: **{bad}**"
    )


def test_scoring_functions():
    parsed = parse_scores("**Imagery:** 7.5\nCoherence: [6]\nnot a score line\nMeandering: 2")
    assert parsed == {"Imagery": 7.5, "Coherence": 6.0, "Meandering": 2.0}
    assert raw_score(parsed) is None  # fewer than 5 criteria
    assert raw_score({"A": 10, "B": 10, "C": 10, "Purple Prose": 0, "Overwrought": 0}) == 10.0
    assert raw_score({"A": 0, "B": 0, "C": 0, "D": 0, "E": 0, "F": 11}) == 1.0  # 11 is out of range
    assert calibrate([1, 2, 3, 4, 5]) == [0, 3, 5, 7, 10]
    assert normalise(0.45, 0.15, 0.75) == pytest.approx(0.5) and normalise(2, 0, 1) == 1.0


def test_judgemark_metrics(scripted):
    run = scripted.evaluation(JudgeMarkEvalEnv, ["--env.dataset_path", DATA], respond, server_type=None)
    m = run.metrics
    assert m["eval/num_items"] == 12 and m["eval/unscored"] == 1  # item 99 has no judge prompt
    assert m["eval/raw_score"] == pytest.approx(sum(sum(v) for v in RAW.values()) / 11)
    for writer, scores in RAW.items():
        assert m[f"eval/writer_model_{slug(writer)}_raw_score"] == pytest.approx(statistics.mean(scores))
    assert m["eval/kendall_tau_calibrated"] == pytest.approx(1.0) and m[
        "eval/kendall_tau_raw"
    ] == pytest.approx(1.0)
    assert m["eval/num_models_with_reference"] == 3
    all_raw = [x for v in RAW.values() for x in v]
    mapped = dict(zip(all_raw, calibrate(all_raw), strict=True))
    groups = [[mapped[x] for x in v] for v in RAW.values()]
    assert m["eval/kruskal_wallis_stat"] == pytest.approx(stats.kruskal(*groups).statistic)
    assert m["eval/std_dev_across_models"] == pytest.approx(
        statistics.pstdev([statistics.mean(g) for g in groups])
    )
    separability = (
        normalise(m["eval/kruskal_wallis_stat"], 100, 1300)
        + normalise(m["eval/std_dev_across_models"], 0, 2.6)
    ) / 2
    assert m["eval/final_judgemark_score"] == pytest.approx((1.0 + separability) / 2)
    sample = next(s for s in run.samples if s["id"] == "claude-opus-4/1/1")
    assert "Imagery\nCoherence" in sample["messages"][-1]["content"]  # the rubric was filled in
    assert (
        "[TEST MODEL RESPONSE]\nA story about the sea, written by claude-opus-4"
        in sample["messages"][-1]["content"]
    )
    assert sample["parsed_scores"]["Purple Prose"] == 1.0


async def test_missing_data_is_one_line(tiny_model_dir, tmp_path):
    env = offline_env(JudgeMarkEvalEnv, tiny_model_dir, dataset_path=str(tmp_path))
    with pytest.raises(DatasetError, match="judgemark_v3_samples_3_iter.json: no such file"):
        await env.setup()
