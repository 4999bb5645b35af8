"""SimpleQA against the scripted server and a scripted judge: the three grades, a judge answering garbage
(counted apart), a reply that is not attempted without asking the judge, the F-score, string-match mode."""

from __future__ import annotations

import pytest

from atroposlib.envs.data_loading import DatasetError
from environments.eval_environments.simpleqa_eval import SimpleQAEvalEnv, parse_grade
from tests.helpers.cli_runs import FIXTURES
from tests.helpers.judged_runs import judged_evaluation
from tests.helpers.single_turn_runs import offline_env, prompt_text

DATA = FIXTURES / "evals" / "simpleqa.jsonl"
CUT = "<think>" + "Counting the moons of Mars takes a while. " * 40 + "</think><answer>2</answer>"
REPLIES = {
    "capital of France": "<think>Easy.</think><answer>Paris</answer>",
    "play Hamlet": "<answer>Christopher Marlowe</answer>",
    "Apollo 11": "<answer>I don't know</answer>",
    "largest planet": "Jupiter",  # no tag: the whole reply is the answer
    "symbol of gold": "<think>Aurum, so the symbol is",  # unclosed think: not attempted
    "moons does Mars": CUT,  # cut at max tokens inside the think block: not attempted
}
#: predicted answer -> judge reply
VERDICTS = {
    "Paris": "A",
    "Christopher Marlowe": "B",
    "I don't know": " c. ",
    "Jupiter": "Let me think about it.",
}


def respond(prompt, index):
    text = prompt_text(prompt)
    return next(reply for key, reply in REPLIES.items() if key in text)


def judge(prompt, index):
    predicted = prompt.split("Predicted answer: ", 1)[1].split("\n", 1)[0]
    return VERDICTS[predicted]


def test_parse_grade_reads_letters_and_words_and_nothing_else():
    assert parse_grade("A") == "CORRECT" and parse_grade(" (b) ") == "INCORRECT"
    assert parse_grade("NOT ATTEMPTED") == "NOT_ATTEMPTED" and parse_grade("Grade: INCORRECT") == "INCORRECT"
    for garbage in ("", "AB", "A or B", "CORRECT, no INCORRECT", "I think it is fine"):
        assert parse_grade(garbage) is None


def test_evaluate_grades_with_the_judge_and_counts_its_failures_apart(scripted):
    run, prompts = judged_evaluation(
        scripted, SimpleQAEvalEnv, ["--env.dataset_path", DATA, "--env.eval_max_tokens", "40"], respond, judge
    )
    m = run.metrics
    # scored: Paris (correct), Marlowe (incorrect), I don't know, unclosed, cut (not attempted); Jupiter unscored
    assert m["eval/unscored"] == 1 and m["eval/num_samples"] == 6
    assert m["eval/accuracy"] == pytest.approx(1 / 5) and m["eval/correct"] == pytest.approx(1 / 5)
    assert m["eval/incorrect"] == pytest.approx(1 / 5) and m["eval/not_attempted"] == pytest.approx(3 / 5)
    assert m["eval/correct_given_attempted"] == pytest.approx(0.5)
    assert m["eval/f_score"] == pytest.approx(2 * 0.2 * 0.5 / 0.7)
    assert m["eval/judge_failures"] == 1 and m["eval/judge_failure_rate"] == pytest.approx(1 / 4)
    assert m["eval/truncated_rate"] == pytest.approx(1 / 6)
    assert m["eval/topic_geography_accuracy"] == 1.0 and m["eval/topic_art_accuracy"] == 0.0
    # the judge was asked only about the four attempted answers, each with the question and the gold target
    assert len(prompts) == 4
    assert any("Question: Who wrote the play Hamlet?\nGold target: William Shakespeare" in p for p in prompts)
    by_answer = {s["gold"]: s for s in run.samples}
    assert by_answer["1969"]["grade"] == "NOT_ATTEMPTED" and by_answer["1969"]["extracted"] == "I don't know"
    assert by_answer["Jupiter"]["score"] is None and by_answer["Jupiter"]["judge_failures"] == 1
    assert by_answer["Jupiter"]["judgements"][0]["judgement"] == "Let me think about it."
    assert by_answer["Au"]["method"] == "no_answer" and by_answer["Au"]["judges_asked"] == 0


def test_string_match_mode_needs_no_judge(scripted):
    run = scripted.evaluation(
        SimpleQAEvalEnv,
        ["--env.dataset_path", DATA, "--env.use_llm_judge", "false", "--env.eval_max_tokens", "40"],
        respond,
        server_type=None,
    )
    # Paris and Jupiter match; "2" is inside the cut think block, so nothing is answered there
    assert run.metrics["eval/accuracy"] == pytest.approx(2 / 6)
    assert "eval/unscored" not in run.metrics


async def test_a_remote_judge_without_its_key_is_one_line(tiny_model_dir, monkeypatch):
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    env = offline_env(SimpleQAEvalEnv, tiny_model_dir, dataset_path=str(DATA))
    with pytest.raises(Exception, match="environment variable OPENAI_API_KEY is not set") as error:
        await env.setup()
    assert "\n" not in str(error.value)


async def test_a_row_without_its_answer_names_file_row_and_field(tiny_model_dir, tmp_path):
    path = tmp_path / "simpleqa.jsonl"
    path.write_text('{"problem": "Q?", "answer": "A"}\n{"problem": "Q2?"}\n')
    env = offline_env(SimpleQAEvalEnv, tiny_model_dir, dataset_path=str(path), use_llm_judge=False)
    with pytest.raises(DatasetError, match=r"simpleqa.jsonl: row 1: missing field 'answer'"):
        await env.setup()
