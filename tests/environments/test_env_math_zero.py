"""The Open-Reasoner-Zero math environment: completion prompt, ``<answer>`` block, ``process`` and
``evaluate`` (data and checking are shared with the chat math environment)."""

from __future__ import annotations

from typing import Any

import pytest
from transformers import AutoTokenizer

from environments.math_server import MathEnv as ChatMathEnv
from environments.math_server import MathItem
from environments.math_server_zero import (
    STOP_STRINGS,
    MathZeroEnv,
    zero_prompt,
    zero_reply_answers,
)
from tests.environments.test_env_math import OTHER_FORM, ROWS, SAMPLE
from tests.helpers.single_turn_runs import (
    check_groups,
    offline_env,
    prompt_text,
)


def _row_of(prompt: Any) -> dict[str, Any]:
    text = prompt_text(prompt)
    return next(row for row in ROWS if row["problem"] in text)


def _completion(answer: str) -> str:
    # What a model writes after "Assistant: <think>"; the scripted server cuts it at "</answer>".
    return (
        f"Checking each step of the problem carefully. </think> <answer> The result is \\boxed{{{answer}}} "
        "</answer>\nUser: and another question?"
    )


def alternating_responder(prompt: Any, index: int) -> str:
    row = _row_of(prompt)
    return _completion(OTHER_FORM[row["answer"]] if index % 2 == 0 else "0")


def even_rows_right_responder(prompt: Any, index: int) -> str:
    row = _row_of(prompt)
    return _completion(OTHER_FORM[row["answer"]] if ROWS.index(row) % 2 == 0 else "0")


def _env(tiny_model_dir, **overrides) -> MathZeroEnv:
    return offline_env(
        MathZeroEnv, tiny_model_dir, **{"group_size": 4, "dataset_path": str(SAMPLE), **overrides}
    )


@pytest.fixture(scope="module")
def env(tiny_model_dir):
    env = _env(tiny_model_dir)
    yield env
    env.checker.close()


def test_shares_the_chat_environment():
    assert issubclass(MathZeroEnv, ChatMathEnv) and MathZeroEnv.name == "math_zero"
    assert STOP_STRINGS == ["User:", "Human:", "Assistant:", "</answer>"]


def test_prompt_is_a_transcript_ending_in_an_open_think_block():
    prompt = zero_prompt("Compute $2+3$.")
    assert prompt.endswith("\nAssistant: <think>")
    assert "User: " in prompt and "Compute $2+3$." in prompt
    assert "<answer> </answer>" in prompt and "\\boxed{...}" in prompt


@pytest.mark.parametrize(
    "reply, answers",
    [
        ("2 and 3 make 5. </think> <answer> \\boxed{5} ", ["5"]),  # cut at the stop string
        ("2 and 3 make 5. </think> <answer>\\boxed{5}</answer>", ["5"]),
        ("x </think> <answer> \\boxed{5} </answer> so \\boxed{5}", ["5"]),  # the same value again
        ("x </think> <answer> \\boxed{5} </answer> or \\boxed{6}", ["5", "6"]),  # a hedge: both are checked
        ("2 and 3 make \\boxed{5} <answer> \\boxed{5}", None),  # reasoning never closed
        ("x </think> The answer is \\boxed{5}", None),  # no answer block
        ("x </think> <answer> 5 </answer>", None),  # unboxed
        (
            "the answer is \\boxed{5} </think> <answer> I am not sure </answer>",
            None,
        ),  # boxed in the reasoning
        ("x </think> <answer> \\boxed{5} </answer> <answer> \\boxed{6}", None),  # two answer blocks
        ("<think> again </think> <answer> \\boxed{5}", None),  # a second think block
        ("x </think> </answer> <answer> \\boxed{5}", None),  # tags out of order
        ("", None),
    ],
)
def test_zero_reply_answers(reply, answers):
    assert zero_reply_answers(reply) == answers


async def test_scores(env):
    item = MathItem("p", "\\frac{19}{12}")
    replies = [
        "x </think> <answer> \\boxed{19/12} ",
        "x </think> <answer> \\boxed{\\frac{38}{24}} </answer>",
        "x </think> <answer> \\boxed{\\frac{19}{12}} </answer> or \\boxed{1.5}",
        "x </think> <answer> \\boxed{1.5} ",
        "\\boxed{\\frac{19}{12}}",
        "",
    ]
    assert await env.score_replies_async(replies, item) == [1.0, 1.0, -1.0, -1.0, -1.0, -1.0]


def test_generation_budget_grows_from_start_tok_length(tiny_model_dir):
    env = _env(tiny_model_dir, max_token_length=1000, start_tok_length=200, total_steps=100)
    assert env.generation_budget == 200
    env.curr_step = 50
    assert env.generation_budget == 600
    env.curr_step = 150
    assert env.generation_budget == 1000
    assert _env(tiny_model_dir, max_token_length=1000).generation_budget == 1000


def test_process_writes_completion_groups(scripted, tiny_model_dir):
    args = ["--env.dataset_path", SAMPLE, "--env.group_size", "4", "--env.total_steps", "2",
            "--env.max_tokens", "128"]  # fmt: skip
    groups = scripted.process(MathZeroEnv, args, alternating_responder)
    check_groups(groups, 2, [-1.0, -1.0, 1.0, 1.0])
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    for group in groups:
        trained = tokenizer.decode(group["tokens"][0], skip_special_tokens=True)
        assert trained.startswith("This is a conversation")  # the raw prompt was sent, no chat template
        for messages, score in zip(group["messages"], group["scores"], strict=True):
            prompt, reply = messages[0]["content"], messages[-1]["content"]
            assert prompt.endswith("Assistant: <think>")  # the completion prompt, no chat template
            assert "</answer>" not in reply and "User:" not in reply  # stopped at </answer>
            assert ("\\boxed{0}" in reply) == (score == -1.0)


def test_evaluate_reports_accuracy(scripted):
    metrics, samples, out = scripted.evaluate(
        MathZeroEnv, ["--env.dataset_path", SAMPLE, "--env.max_tokens", "64"], even_rows_right_responder
    )
    assert metrics["eval/math500_sample_percent_correct"] == pytest.approx(0.5)
    assert metrics["eval/percent_correct"] == pytest.approx(0.5)
    assert len(samples) == len(ROWS)
    assert all(s["messages"][0]["content"].endswith("Assistant: <think>") for s in samples)
    assert "math_zero evaluation: percent_correct=0.5000" in out
