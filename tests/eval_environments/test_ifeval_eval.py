"""IFEval on a fixture in its hub schema, against the scripted server: strict and loose accuracy at prompt and
instruction level (exact values), by instruction group, for every kind of reply."""

from __future__ import annotations

import pytest

from atroposlib.envs.data_loading import DatasetError
from environments.eval_environments.ifeval_eval import IFEvalEnv
from tests.eval_environments.test_math_evals import DATA, responder, stderr
from tests.helpers.single_turn_runs import offline_env, write_jsonl

STORY = "The keeper climbed the stairs every night to light the lamp. " * 40  # 480 words, cut at 64 tokens
REPLIES = {
    "lost cat Mittens": "<think>Lower case, no commas.</think>mittens is lost. please call us if you see her.",
    "harbour at dawn": "* calm grey water\n* boats leaving for the day\nAny other questions?",
    "title for a poem": "River Song\nThe water runs.",  # no <<title>>
    "capital letters only": "Sure!\nTHE SKY ABOVE THE DESERT IS A DEEP AND CLEAR BLUE.",  # loose only
    "Explain tides": "",
    "haiku about snow": '<think>Quotes around "snow falls"',
    "lighthouse keeper": STORY,
}


def test_ifeval_strict_and_loose(scripted):
    run = scripted.evaluation(
        IFEvalEnv,
        [
            "--env.dataset_path",
            DATA / "ifeval.jsonl",
            "--env.eval_max_tokens",
            "64",
            "--env.retry_delay",
            "0",
        ],
        responder(REPLIES),
        server_type=None,
    )
    m = run.metrics
    strict = [1, 1, 0, 0, 0, 0, 0]
    assert m["eval/prompt_level_strict_acc"] == pytest.approx(2 / 7)
    assert m["eval/prompt_level_strict_acc_stderr"] == pytest.approx(stderr(strict))
    assert m["eval/prompt_level_loose_acc"] == pytest.approx(3 / 7)
    # nine instructions: four followed strictly, five loosely
    assert m["eval/num_instructions"] == 9
    assert m["eval/inst_level_strict_acc"] == pytest.approx(4 / 9)
    assert m["eval/inst_level_loose_acc"] == pytest.approx(5 / 9)
    assert m["eval/inst_level_strict_acc_stderr"] == pytest.approx(stderr([1, 1, 1, 1, 0, 0, 0, 0, 0]))
    assert m["eval/instruction_change_case_strict_acc"] == pytest.approx(1 / 2)
    assert m["eval/instruction_detectable_format_strict_acc"] == pytest.approx(1 / 2)
    assert m["eval/instruction_keywords_strict_acc"] == 0.0 and m["eval/truncated_rate"] == pytest.approx(
        1 / 7
    )
    samples = {s["id"]: s for s in run.samples}
    assert samples["1"]["inst_strict"] == [True, True] and samples["1"]["score"] == 1.0
    assert samples["4"]["inst_strict"] == [False] and samples["4"]["inst_loose"] == [True]
    assert samples["4"]["metrics"] == {"prompt_level_loose_acc": 1.0}
    assert samples["5"]["method"] == "empty" and samples["6"]["method"] == "unclosed_think"
    assert samples["7"]["finish_reason"] == "length" and samples["7"]["score"] == 0.0
    assert samples["2"]["instruction_id_list"] == [
        "detectable_format:number_bullet_lists",
        "startend:end_checker",
    ]
    assert samples["1"]["messages"][-1]["content"] == (
        "Write a note about the lost cat Mittens in all lowercase letters. Do not use any commas."
    )


async def test_unknown_instructions_and_bad_arguments_are_one_line_errors(tiny_model_dir, tmp_path):
    bad = write_jsonl(
        tmp_path / "bad.jsonl",
        [
            {"key": 1, "prompt": "p", "instruction_id_list": ["punctuation:no_comma"], "kwargs": [{}]},
            {"key": 2, "prompt": "p", "instruction_id_list": ["made:up"], "kwargs": [{}]},
        ],
    )
    env = offline_env(IFEvalEnv, tiny_model_dir, dataset_path=bad)
    with pytest.raises(
        DatasetError,
        match=r"bad\.jsonl: row 1: field 'instruction_id_list' .*unknown instruction id 'made:up'",
    ):
        await env.setup()
    wrong = write_jsonl(
        tmp_path / "wrong.jsonl",
        [
            {
                "key": 1,
                "prompt": "p",
                "instruction_id_list": ["detectable_format:number_bullet_lists"],
                "kwargs": [{}],
            }
        ],
    )
    env = offline_env(IFEvalEnv, tiny_model_dir, dataset_path=wrong)
    with pytest.raises(DatasetError, match=r"wrong\.jsonl: row 0: .*'num_bullets': missing"):
        await env.setup()
