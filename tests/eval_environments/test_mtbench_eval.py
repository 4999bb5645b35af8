"""MT-Bench against the scripted server and a scripted judge: two turns with the first reply in the second
turn's context, each turn scored 1-5, a turn without an answer scored 1 unjudged, a judge failure leaving
its conversation unscored."""

from __future__ import annotations

import pytest

from atroposlib.envs.data_loading import DatasetError
from environments.eval_environments.mtbench_eval import MTBenchEvalEnv, parse_score
from tests.helpers.cli_runs import FIXTURES
from tests.helpers.judged_runs import judged_evaluation
from tests.helpers.single_turn_runs import offline_env, write_jsonl

DATA = FIXTURES / "evals" / "mtbench.jsonl"
#: last user turn -> reply
REPLIES = {
    "poem about tea": "POEM-1",
    "about coffee": "<think>Swap the drink.</think>POEM-2",
    "What is 3*7?": "<think>3*7</think>21",
    "times 2?": "<think>Doubling never ends",  # unclosed: no answer, scored 1
    "some animals cats?": "R-1",
    "Why?": "R-2",
}
#: answer -> judge reply
VERDICTS = {
    "POEM-1": "<feedback>Fine.</feedback>\n<score>4</score>",
    "POEM-2": "<feedback>Great.</feedback><score> 5 </score>",
    "21": "<feedback>Right.</feedback><score>5</score>",
    "R-1": "Score: 4",  # no tag: a judge failure
    "R-2": "<score>3</score>",
}


def respond(prompt, index):
    last = prompt[-1]["content"]
    return next(reply for key, reply in REPLIES.items() if key in last)


def judge(prompt, index):
    answer = prompt.split("<output>\n", 1)[1].split("\n</output>", 1)[0]
    return VERDICTS[answer]


def test_parse_score():
    assert (
        parse_score("<feedback>x</feedback><score>3</score>") == 3 and parse_score("<SCORE> 5</SCORE>") == 5
    )
    for garbage in (
        "",
        "Score: 4",
        "<score>6</score>",
        "<score>4.5</score>",
        "<score>2</score><score>3</score>",
    ):
        assert parse_score(garbage) is None


def test_two_turns_scored_with_exact_metrics(scripted):
    run, prompts = judged_evaluation(scripted, MTBenchEvalEnv, ["--env.dataset_path", DATA], respond, judge)
    m = run.metrics
    # q81: (4 + 5) / 2; q82: (5 + 1) / 2; q83: unscored (turn 1's judge answered garbage)
    assert m["eval/avg_score"] == pytest.approx(3.75) and m["eval/unscored"] == 1
    assert m["eval/score_turn_1"] == pytest.approx(4.5) and m["eval/score_turn_2"] == pytest.approx(3.0)
    assert m["eval/category_writing_avg_score"] == pytest.approx(4.5)
    assert m["eval/category_math_avg_score"] == pytest.approx(3.0)
    assert m["eval/judge_failures"] == 1 and m["eval/judge_failure_rate"] == pytest.approx(1 / 5)
    # the second turn is asked with the first exchange in the conversation
    chats = [r["body"]["messages"] for r in run.requests if r["path"] == "/v1/chat/completions"]
    assert len(chats) == 6
    second = next(c for c in chats if c[-1]["content"] == "Now rewrite it about coffee.")
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
    assert second[0]["content"] == "You are a helpful assistant." and second[2]["content"] == "POEM-1"
    # the judge sees the reference answer of a math turn and the first exchange when judging the second
    assert any("The reference answer is:\n21" in p for p in prompts)
    assert any("User: Write a two-line poem about tea.\nAssistant: POEM-1" in p for p in prompts)
    by_id = {s["id"]: s for s in run.samples}
    assert by_id["82"]["turn_scores"] == [5.0, 1.0] and by_id["83"]["turn_scores"] == [None, 3.0]
    assert by_id["81"]["turn_replies"] == ["POEM-1", "<think>Swap the drink.</think>POEM-2"]


async def test_a_row_with_one_turn_is_one_line(tiny_model_dir, tmp_path):
    path = write_jsonl(
        tmp_path / "mt.jsonl", [{"question_id": 1, "category": "coding", "turns": ["Only one"]}]
    )
    env = offline_env(MTBenchEvalEnv, tiny_model_dir, dataset_path=path)
    with pytest.raises(DatasetError, match=r"mt.jsonl: row 0: .*turns.*two user turns"):
        await env.setup()
