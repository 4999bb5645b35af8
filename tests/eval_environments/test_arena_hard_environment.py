"""Arena-Hard against the scripted server and a scripted judge: every answer judged in both orders (a judge
that always prefers the first answer scores a tie), judge failures counted apart, exact win rate."""

from __future__ import annotations

import pytest

from atroposlib.envs.data_loading import DatasetError
from environments.eval_environments.arena_hard_environment import ArenaHardEnv, parse_verdict
from tests.helpers.cli_runs import FIXTURES
from tests.helpers.judged_runs import judged_evaluation
from tests.helpers.single_turn_runs import offline_env, prompt_text, write_jsonl

PROMPTS = FIXTURES / "evals" / "arena_hard_prompts.jsonl"
BASELINE = FIXTURES / "evals" / "arena_hard_baseline.jsonl"
REPLIES = {
    "haiku": "<think>Five, seven, five.</think>MODEL answer a1",
    "recursion": "MODEL answer a2",
    "Sort a list": "MODEL answer a3",
    "prime numbers": "MODEL answer a4",
    "Hamlet": "<think>One line only",  # never closes: no answer, a loss without a judge
    "monad": "MODEL answer a6",
}
#: uid -> (verdict when the model's answer is shown first, verdict when it is shown second)
VERDICTS = {
    "a1": ("Mine is better. [[A>B]]", "[[B>A]]"),  # the model wins in both orders
    "a2": ("[[A>B]]", "[[A>B]]"),  # the judge always prefers the first answer: a tie overall
    "a3": ("no verdict at all", "Clearly [[A>>B]]"),  # one order failed; the baseline wins the other
    "a4": ("[[C]]", "[[A>B]] or maybe [[B>A]]"),  # both orders failed: unscored
    "a6": ("[[A=B]]", "[[A=B]]"),
}


def respond(prompt, index):
    text = prompt_text(prompt)
    return next(reply for key, reply in REPLIES.items() if key in text)


def judge(prompt, index):
    first = prompt.split("<|The Start of Assistant A's Answer|>\n", 1)[1].split("\n", 1)[0]
    uid = first.rsplit(" ", 1)[-1]
    forward, swapped = VERDICTS[uid]
    return forward if first.startswith("MODEL") else swapped


def test_parse_verdict():
    assert parse_verdict("... [[A>>B]]") == 1.0 and parse_verdict("[[a>b]]") == 1.0
    assert (
        parse_verdict("[[A=B]]") == 0.5
        and parse_verdict("[[B > A]]") == 0.0
        and parse_verdict("[[B>>A]]") == 0.0
    )
    assert parse_verdict("first [[B>A]], then on reflection [[B>A]]") == 0.0
    for garbage in ("", "A>B", "[[A>B]] [[B>A]]", "[[C]]"):
        assert parse_verdict(garbage) is None


def test_every_answer_is_judged_in_both_orders(scripted):
    run, prompts = judged_evaluation(
        scripted,
        ArenaHardEnv,
        [
            "--env.dataset_path",
            PROMPTS,
            "--env.baseline_dataset_path",
            BASELINE,
            "--env.eval_max_tokens",
            "0",
        ],
        respond,
        judge,
    )
    m = run.metrics
    # a1 1.0, a2 0.5, a3 0.0, a5 0.0 (no answer), a6 0.5; a4 unscored
    assert m["eval/win_rate"] == pytest.approx(2.0 / 5)
    assert m["eval/unscored"] == 1 and m["eval/num_items"] == 6
    assert m["eval/judge_failures"] == 3 and m["eval/judge_failure_rate"] == pytest.approx(3 / 10)
    assert m["eval/category_creative_win_rate"] == pytest.approx(0.5)
    assert m["eval/category_code_win_rate"] == pytest.approx(0.25)
    # two judgements per answered item, one with each answer first
    assert len(prompts) == 10
    for uid in ("a1", "a2", "a3", "a4", "a6"):
        shown_first = [p.split("Answer|>\n", 1)[1].split("\n", 1)[0] for p in prompts if f" {uid}\n" in p]
        assert sorted(shown_first) == [f"BASE answer {uid}", f"MODEL answer {uid}"]
    by_uid = {s["id"]: s for s in run.samples}
    a2 = by_uid["a2"]["judgements"][0]
    assert (a2["forward"]["verdict"], a2["swapped"]["verdict"], a2["judge_score"]) == (1.0, 1.0, 0.5)
    assert by_uid["a3"]["score"] == 0.0 and by_uid["a3"]["judge_failures"] == 1
    assert by_uid["a4"]["score"] is None and by_uid["a5"]["method"] == "no_answer"


async def test_a_prompt_without_baseline_is_one_line(tiny_model_dir, tmp_path):
    baseline = write_jsonl(tmp_path / "baseline.jsonl", [{"uid": "a1", "answer": "x"}])
    env = offline_env(ArenaHardEnv, tiny_model_dir, dataset_path=str(PROMPTS), baseline_dataset_path=baseline)
    with pytest.raises(
        DatasetError, match=r"arena_hard_prompts.jsonl: row 1: .*no baseline answer with uid 'a2'"
    ):
        await env.setup()
