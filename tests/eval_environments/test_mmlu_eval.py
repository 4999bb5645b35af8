"""MMLU on a per-subject fixture directory, against the scripted server: every kind of reply, exact metrics,
breakdowns by subject and category, samples.jsonl, few-shot prompts and one-line data errors."""

from __future__ import annotations

import math

import pytest

from atroposlib.envs.data_loading import DatasetError
from environments.eval_environments.mmlu_eval import CATEGORY_OF, MMLU_SUBJECTS, MMLUEvalEnv
from tests.helpers.cli_runs import FIXTURES
from tests.helpers.single_turn_runs import offline_env, prompt_text, write_jsonl

DATA = FIXTURES / "evals" / "mmlu"
LONG = "<think>" + "Let me weigh every option very carefully once more. " * 60 + "</think><answer>B</answer>"
#: question start -> reply (right: the first three, in three forms)
REPLIES = {
    "Which bone": "<think>The femur is longest.</think><answer>B</answer>",
    "Which chamber": "<think>Left side pumps to the body.</think>\\boxed{C}",
    "Which organ produces": "<think>Maybe D? No.</think>Answer: A",
    "In which year": "<answer>B</answer>",  # wrong
    "Who was the first": "<answer>A or C</answer>",  # two letters
    "Which of the four Ps": "",  # empty
    "What does a brand": "<think>Positioning is about the mind, so B",  # unclosed think
    "Which pricing": LONG,  # cut at max tokens
}


def respond(prompt, index):
    text = prompt_text(prompt).rsplit("---", 1)[-1]  # the question asked, not the few-shot examples
    return next(reply for start, reply in REPLIES.items() if start in text)


def test_categories_cover_all_57_subjects():
    assert len(MMLU_SUBJECTS) == 57 and set(CATEGORY_OF.values()) == {
        "STEM",
        "Humanities",
        "Social Sciences",
        "Other",
    }


def test_evaluate_reports_exact_metrics(scripted):
    run = scripted.evaluation(
        MMLUEvalEnv,
        ["--env.dataset_path", DATA, "--env.eval_max_tokens", "48", "--env.retry_delay", "0"],
        respond,
        server_type=None,
    )
    m = run.metrics
    scores = [1, 1, 1, 0, 0, 0, 0, 0]
    mean = sum(scores) / 8
    stderr = math.sqrt(sum((s - mean) ** 2 for s in scores) / 7 / 8)
    assert m["eval/accuracy"] == pytest.approx(0.375)
    assert m["eval/accuracy_stderr"] == pytest.approx(stderr)
    assert m["eval/num_items"] == 8 and m["eval/num_samples"] == 8
    assert m["eval/no_answer_rate"] == pytest.approx(4 / 8)  # two letters, empty, unclosed, cut
    assert m["eval/truncated_rate"] == pytest.approx(1 / 8)
    assert m["eval/subject_anatomy_accuracy"] == 1.0 and m["eval/subject_marketing_accuracy"] == 0.0
    assert m["eval/category_stem_accuracy"] == 1.0 and m["eval/category_humanities_count"] == 2
    results = run.report["results"]
    assert results["atropos|mmlu_eval|0"] == m
    assert results["atropos|mmlu_eval:subject:anatomy|0"] == {
        "accuracy": 1.0,
        "accuracy_stderr": 0.0,
        "num_items": 3,
    }
    assert results["atropos|mmlu_eval:category:Other|0"]["num_items"] == 3
    assert run.report["config_general"]["model_name"] == "scripted-model"
    # every prompt, reply, extracted answer and score
    by_q = {s["question"][:12]: s for s in run.samples}
    assert len(run.samples) == 8
    assert by_q["Which chambe"]["extracted"] == "C" and by_q["Which chambe"]["method"] == "boxed"
    assert by_q["Which organ "]["extracted"] == "A" and by_q["Which organ "]["score"] == 1.0
    assert by_q["Who was the "]["extracted"] is None and by_q["Who was the "]["method"] == "ambiguous"
    assert by_q["What does a "]["method"] == "unclosed_think"
    assert by_q["Which pricin"]["finish_reason"] == "length" and by_q["Which pricin"]["score"] == 0.0
    assert by_q["Which bone i"]["messages"][-1]["content"].startswith("Answer the following multiple choice")
    assert "B) Femur" in by_q["Which bone i"]["messages"][-1]["content"]
    assert by_q["Which bone i"]["gold"] == "B" and by_q["Which bone i"]["subject"] == "anatomy"
    # the empty reply was asked max_retries (3) times, every other item once
    assert len(run.requests) == 10


def test_subjects_and_few_shot(scripted, tmp_path):
    run = scripted.evaluation(
        MMLUEvalEnv,
        ["--env.dataset_path", DATA, "--env.subjects", '["anatomy"]', "--env.num_few_shot", "1",
         "--env.few_shot_dataset_path", DATA, "--env.include_subject_in_prompt", "true"],
        respond,
        server_type=None,
    )  # fmt: skip
    assert run.metrics["eval/num_items"] == 3 and run.metrics["eval/accuracy"] == 1.0
    prompt = run.samples[0]["messages"][-1]["content"]
    assert prompt.startswith("Question: Which bone is the longest") and "Answer: B\n\n---\n\n" in prompt
    assert "[anatomy]\n\nWhich bone" in prompt


async def test_bad_rows_and_subjects_are_one_line(tiny_model_dir, tmp_path, hub_offline):
    bad = write_jsonl(
        tmp_path / "bad.jsonl", [{"question": "q", "subject": "anatomy", "choices": ["a", "b"], "answer": 5}]
    )
    env = offline_env(MMLUEvalEnv, tiny_model_dir, dataset_path=bad)
    with pytest.raises(
        DatasetError, match=r"bad\.jsonl: row 0: field 'answer' must name one of the 2 options"
    ):
        await env.setup()
    env = offline_env(MMLUEvalEnv, tiny_model_dir, dataset_path=str(DATA), subjects=["astrology"])
    with pytest.raises(DatasetError, match="unknown subjects"):
        await env.setup()
    env = offline_env(MMLUEvalEnv, tiny_model_dir, subjects=["anatomy"])
    with pytest.raises(DatasetError, match=r"lighteval/mmlu/anatomy \(test\): cannot load from the hub"):
        await env.setup()
