"""The one group policy: environments return every group they scored; ``process`` writes them all (uniform ones
marked in the JSONL and on the HTML page) and ``serve`` leaves out those that carry no learning signal."""

from __future__ import annotations

from atroposlib.envs.serve.group_validation import (
    IDENTICAL_SCORES,
    SCORES_ALL_EQUAL,
    carries_no_signal,
    prepare_group,
)
from environments.text_reversal_environment import TextReversalEnv
from tests.environments.test_env_text_reversal import SAMPLE


def _group(scores, **extra):
    n = len(scores)
    return {"tokens": [[1, 2, 3]] * n, "masks": [[-100, 2, 3]] * n, "scores": scores, **extra}


def test_serve_discards_a_uniform_group_and_process_keeps_it_marked():
    _, problem = prepare_group(_group([0.0, 0.0]), default_group_size=2, reject_identical_scores=True)
    assert problem.code == IDENTICAL_SCORES
    kept, problem = prepare_group(_group([0.0, 0.0]), default_group_size=2, reject_identical_scores=False)
    assert problem is None and kept[SCORES_ALL_EQUAL] is True
    varied, _ = prepare_group(_group([0.0, 1.0]), default_group_size=2, reject_identical_scores=False)
    assert SCORES_ALL_EQUAL not in varied


def test_a_uniform_group_with_its_own_advantages_carries_a_signal():
    turn_level = _group([1.0, 1.0], advantages=[[0.0, 0.5, -0.5], [0.0, -0.5, 0.5]])
    assert not carries_no_signal(turn_level)
    kept, problem = prepare_group(turn_level, default_group_size=2, reject_identical_scores=True)
    assert problem is None and kept[SCORES_ALL_EQUAL] is True
    assert carries_no_signal(_group([1.0, 1.0])) and not carries_no_signal(_group([1.0]))


def test_process_writes_every_group_of_a_model_whose_replies_all_score_the_same(scripted):
    args = ["--env.dataset_path", SAMPLE, "--env.group_size", "2", "--env.total_steps", "3",
            "--env.max_tokens", "256"]  # fmt: skip
    groups = scripted.process(TextReversalEnv, args, lambda prompt, index: "<answer>not it</answer>")
    assert len(groups) == 3
    assert all(g["scores"] == [0.0, 0.0] and g[SCORES_ALL_EQUAL] is True for g in groups)
    page = (scripted.tmp_path / "data" / f"{TextReversalEnv.name}.html").read_text(encoding="utf-8")
    assert page.count("(scores all equal)") == 3
