"""The procedural arithmetic environment: the task itself, and ``process``/``evaluate`` through its CLI."""

from __future__ import annotations

import pytest
import yaml
from pydantic import ValidationError

from atroposlib.testing.scripted_server import scripted_logprob
from environments.arithmetic_server import (
    ArithmeticEnv,
    ArithmeticEnvConfig,
    ArithmeticTask,
    extract_answer,
    score_completion,
    sft_examples,
)
from tests.helpers.cli_runs import arithmetic_responder, read_jsonl


# ------------------------------------------------------------------------------------------------ task
def test_problems_are_deterministic_per_seed():
    first = [ArithmeticTask(seed=3).train_problem(i) for i in range(20)]
    again = [ArithmeticTask(seed=3).train_problem(i) for i in range(20)]
    other = [ArithmeticTask(seed=4).train_problem(i) for i in range(20)]
    assert first == again
    assert first != other
    assert ArithmeticTask(seed=3).eval_problems == ArithmeticTask(seed=3).eval_problems


def test_eval_split_is_held_out_of_training():
    task = ArithmeticTask(seed=0, eval_size=64)
    assert len(task.eval_problems) == 64
    assert len({p.expression for p in task.eval_problems}) == 64
    held_out = {p.expression for p in task.eval_problems}
    assert not any(task.train_problem(i).expression in held_out for i in range(3000))


def test_answers_and_difficulty_settings():
    task = ArithmeticTask(min_digits=2, max_digits=3, operations=["+", "-", "*"], num_operands=3, seed=1)
    for i in range(200):
        problem = task.train_problem(i)
        assert problem.answer == eval(problem.expression)
        assert problem.answer >= 0
        numbers = [
            int(n) for n in problem.expression.replace("+", " ").replace("-", " ").replace("*", " ").split()
        ]
        assert len(numbers) == 3 and all(10 <= n <= 999 for n in numbers)
        assert problem.question == f"What is {problem.expression}?"
    negatives = ArithmeticTask(operations=["-"], allow_negative=True, seed=2)
    assert any(negatives.train_problem(i).answer < 0 for i in range(100))


def test_invalid_task_settings():
    with pytest.raises(ValueError, match="min_digits"):
        ArithmeticTask(min_digits=3, max_digits=2)
    with pytest.raises(ValueError, match="operations"):
        ArithmeticTask(operations=["/"])
    with pytest.raises(ValueError, match="distinct problems"):
        ArithmeticTask(min_digits=1, max_digits=1, operations=["+"], eval_size=500)
    with pytest.raises(ValidationError, match="min_digits"):
        ArithmeticEnvConfig(min_digits=3, max_digits=2)


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("82", 1.0),
        (" 82\n", 1.0),
        ("The answer is \\boxed{82}.", 1.0),
        ("37+45 = 82\n#### 82", 1.0),
        ("82 or maybe 83", 0.0),
        ("\\boxed{82} then 5", 1.0),
        ("eighty-two", 0.0),
        ("", 0.0),
        ("-82", 0.0),
    ],
)
def test_scoring(reply, expected):
    assert score_completion(reply, 82) == expected


def test_extract_answer_handles_negative_numbers():
    assert extract_answer("result: -7") == -7
    assert extract_answer("nothing") is None


def test_sft_examples_come_from_the_training_split():
    task = ArithmeticTask(seed=5, eval_size=16)
    held_out = {p.question for p in task.eval_problems}
    examples = list(sft_examples(50, seed=5, eval_size=16))
    assert len(examples) == 50
    for messages, answer in examples:
        assert messages[-1]["role"] == "user"
        question = messages[-1]["content"]
        assert question not in held_out
        assert int(answer) == eval(question[len("What is ") : -1])
        assert score_completion(answer, int(answer)) == 1.0
    with_system = next(sft_examples(1, system_prompt="Answer with a number."))
    assert with_system[0][0] == {"role": "system", "content": "Answer with a number."}


# ------------------------------------------------------------------------------------- through the CLI
def test_process_writes_scored_groups_and_html(scripted, tmp_path):
    out = tmp_path / "groups" / "arith.jsonl"
    requests = scripted.command(
        ArithmeticEnv,
        "process",
        ["--env.total_steps", "3", "--env.group_size", "4", "--env.data_path_to_save_groups", out],
        arithmetic_responder(),
        server_type=None,
    )
    # server_type vllm from config_init: token-level generation
    assert {r["path"] for r in requests} == {"/generate"}
    groups = read_jsonl(out)
    assert len(groups) == 3
    questions = []
    for group in groups:
        assert group["scores"] == [1.0, 0.0, 1.0, 0.0]
        assert len(group["tokens"]) == len(group["masks"]) == len(group["inference_logprobs"]) == 4
        for tokens, masks, logprobs in zip(
            group["tokens"], group["masks"], group["inference_logprobs"], strict=True
        ):
            assert len(tokens) == len(masks) == len(logprobs)
            generated = [i for i, m in enumerate(masks) if m != -100]
            assert generated and generated == list(range(generated[0], len(tokens)))
            assert all(masks[i] == tokens[i] for i in generated)
            assert all(logprobs[i] == 1.0 for i in range(generated[0]))
            assert [logprobs[i] for i in generated] == [
                scripted_logprob(tokens[i], j) for j, i in enumerate(generated)
            ]
        question = group["messages"][0][0]["content"]
        replies = [m[-1]["content"] for m in group["messages"]]
        answer = eval(question[len("What is ") : -1])
        assert replies == [str(answer), str(answer + 1), str(answer), str(answer + 1)]
        questions.append(question)
    html = (out.with_suffix(".html")).read_text()
    assert html.count("Group ") >= 3
    assert all(q in html for q in questions)


def test_evaluate_reports_held_out_accuracy(scripted):
    evaluation = scripted.evaluation(
        ArithmeticEnv,
        ["--openai.api_key", "sk-secret-value", "--env.eval_size", "6"],
        arithmetic_responder(),
        server_type=None,
    )
    eval_requests = [r for r in evaluation.requests if r["path"] == "/v1/chat/completions"]
    assert len(eval_requests) == 6
    assert all(r["body"]["temperature"] == 0.0 for r in eval_requests)
    assert evaluation.metrics["eval/percent_correct"] == 1.0
    assert "atropos|arithmetic_eval|0" in evaluation.report["results"]
    samples = evaluation.samples
    assert len(samples) == 6 and all(s["correct"] for s in samples)
    held_out = {p.question for p in ArithmeticTask(eval_size=6).eval_problems}
    assert {s["question"] for s in samples} == held_out
    written = yaml.safe_load((evaluation.directory / "evaluate_config.yaml").read_text())
    assert set(written) == {"env", "openai", "slurm", "testing"}
    assert written["env"]["eval_size"] == 6
    assert written["openai"][0]["base_url"] == evaluation.server_url
    assert written["openai"][0]["api_key"] == "<redacted>"
    assert written["slurm"] is False and written["testing"] is False
