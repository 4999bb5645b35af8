"""The text-reversal environment: generated and local data, answer-tag scoring, ``process`` and ``evaluate``."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from environments.text_reversal_environment import (
    SYSTEM_PROMPT,
    THINKING_PROMPT,
    TextReversalEnv,
    TextReversalEnvConfig,
    reverse_text,
    score_reply,
)
from tests.helpers.cli_runs import FIXTURES, read_jsonl
from tests.helpers.single_turn_runs import (
    check_groups,
    offline_env,
    prompt_text,
    setup_failure,
    write_jsonl,
)

SAMPLE = FIXTURES / "text_reversal_sample.jsonl"
CHAT_SAMPLE = FIXTURES / "text_reversal_chat_sample.jsonl"


def _env(tiny_model_dir, **overrides) -> TextReversalEnv:
    return offline_env(TextReversalEnv, tiny_model_dir, **overrides)


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ("<answer>olleH</answer>", 1.0),
        ("<think>H-e-l-l-o backwards</think><answer>olleH</answer>", 1.0),
        ("<answer>\n  olleH \n</answer>", 1.0),  # surrounding whitespace is not part of the answer
        ("Reversed: <answer>olleH</answer>, and again <answer>olleH</answer>", 1.0),
        ("<answer>olleh</answer>", 0.0),  # case counts
        ("<answer>Hello</answer>", 0.0),
        ("olleH", 0.0),  # no answer tags
        ("\\boxed{olleH}", 0.0),
        ("<think><answer>olleH</answer></think>done", 0.0),  # only inside the reasoning
        ("<answer>olleH</answer> or <answer>olleh</answer>", 0.0),  # several answers
        ("<answer>olleH", 0.0),  # unclosed tag
        ("<think>never closed <answer>olleH</answer>", 0.0),
        ("<answer></answer>", 0.0),
        ("", 0.0),
    ],
)
def test_scoring(reply, expected):
    assert score_reply(reply, "olleH") == expected


def test_partial_credit_ranks_near_misses_below_exact():
    exact = score_reply("<answer>olleH</answer>", "olleH", partial_credit=True)
    near = score_reply("<answer>olleh</answer>", "olleH", partial_credit=True)
    far = score_reply("<answer>Hxyz</answer>", "olleH", partial_credit=True)
    assert exact == 1.0 and 0.0 < far < near < 0.5
    assert score_reply("<answer>xyz</answer>", "olleH", partial_credit=True) == 0.0  # nothing in common
    assert score_reply("olleH", "olleH", partial_credit=True) == 0.0  # still needs the tags
    assert score_reply("<answer>olleH</answer> <answer>x</answer>", "olleH", partial_credit=True) == 0.0


def test_whole_reply_form_for_chat_rows():
    assert score_reply("<think>ok</think>\n desserts \n", "desserts", "whole_reply") == 1.0
    assert score_reply("desserts!", "desserts", "whole_reply") == 0.0
    assert score_reply("<think>desserts</think>", "desserts", "whole_reply") == 0.0


async def test_generated_texts_are_deterministic_and_eval_is_held_out(tiny_model_dir):
    env, again = _env(tiny_model_dir, test_set_size=20), _env(tiny_model_dir, test_set_size=20)
    await env.setup()
    await again.setup()
    first = [await env.get_next_item() for _ in range(30)]
    assert first == [await again.get_next_item() for _ in range(30)]
    assert env.test_items == again.test_items and len(env.test_items) == 20
    train_words = set(env.train_words)
    for item in env.test_items:
        text = reverse_text(item.expected)
        assert 3 <= len(text.split()) <= 8 and not set(text.split()) & train_words
        assert item.form == "answer_tag" and text in item.messages[-1][1]
    assert all(set(reverse_text(item.expected).split()) <= train_words for item in first)


async def test_local_text_rows_and_chat_rows(tiny_model_dir):
    env = _env(tiny_model_dir, dataset_path=str(SAMPLE), test_set_size=2)
    await env.setup()
    assert len(env.test_items) == 2 and len(env.train_items) == len(read_jsonl(SAMPLE)) - 2
    texts = {row["text"] for row in read_jsonl(SAMPLE)}
    assert {reverse_text(i.expected) for i in env.train_items + env.test_items} == texts
    chat = _env(tiny_model_dir, dataset_path=str(CHAT_SAMPLE), eval_dataset_path=str(CHAT_SAMPLE))
    await chat.setup()
    item = next(i for i in chat.train_items if i.expected == "desserts")
    assert item.form == "whole_reply"
    assert item.messages == (("user", "Reverse the text you are given, character by character.\n\nstressed"),)
    assert len(chat.test_items) == 3


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{"text": "abc"}, {"txt": "def"}], "row 1: missing field 'text'"),
        ([{"prompt": [{"role": "user", "content": "x"}]}], "row 0: missing field 'completion'"),
        (
            [{"prompt": [{"role": "system", "content": "x"}], "completion": []}],
            "row 0: field 'prompt' has no user",
        ),
        ([], "no rows"),
    ],
)
async def test_bad_local_files(tiny_model_dir, tmp_path, rows, message):
    path = write_jsonl(tmp_path / "rows.jsonl", rows)
    assert path in str(await setup_failure(_env(tiny_model_dir, dataset_path=path), message))


async def test_hub_default_when_named(tiny_model_dir, hub_offline):
    env = _env(tiny_model_dir, dataset_name="PrimeIntellect/Reverse-Text-SFT")
    await setup_failure(env, "PrimeIntellect/Reverse-Text-SFT: cannot load from the hub")


def test_config_checks():
    with pytest.raises(ValidationError, match="min_words"):
        TextReversalEnvConfig(min_words=5, max_words=2)


def _responder():
    """The exact reversal for even choice indices, the text unchanged for odd ones."""

    def respond(prompt, index):
        text = prompt_text(prompt).split("keeping every character:\n\n", 1)[-1]
        text = text.split("<|im_end|>")[0]  # a rendered prompt (completion route) carries the template tail
        return f"<think>Reading it backwards.</think><answer>{reverse_text(text) if index % 2 == 0 else text}</answer>"

    return respond


def test_process_with_a_local_file(scripted):
    args = ["--env.dataset_path", SAMPLE, "--env.group_size", "2", "--env.total_steps", "3",
            "--env.max_tokens", "256"]  # fmt: skip
    groups = scripted.process(TextReversalEnv, args, _responder())
    check_groups(groups, 3, [0.0, 1.0])
    texts = {row["text"] for row in read_jsonl(SAMPLE)}
    for group in groups:
        user = group["messages"][0][1]["content"]
        assert any(user.endswith(t) for t in texts)


def test_evaluate_reports_accuracy(scripted):
    metrics, samples, out = scripted.evaluate(
        TextReversalEnv, ["--env.test_set_size", "5", "--env.max_tokens", "256"], _responder()
    )
    assert metrics["eval/percent_correct"] == 1.0
    assert len(samples) == 5 and all(s["score"] == 1.0 for s in samples)
    assert "text_reversal evaluation: percent_correct=1.0000" in out


async def test_use_thinking_opens_every_prompt_with_the_thinking_turn(tiny_model_dir):
    plain = _env(tiny_model_dir, dataset_path=str(CHAT_SAMPLE), eval_dataset_path=str(CHAT_SAMPLE))
    thinking = _env(
        tiny_model_dir, dataset_path=str(CHAT_SAMPLE), eval_dataset_path=str(CHAT_SAMPLE), use_thinking=True
    )
    await plain.setup()
    await thinking.setup()
    item = plain.train_items[0]
    assert [m["role"] for m in plain.prompt_messages(item)] == ["user"]
    messages = thinking.prompt_messages(item)
    assert messages[0] == {"role": "system", "content": THINKING_PROMPT} and messages[
        1:
    ] == plain.prompt_messages(item)
    generated = _env(tiny_model_dir, use_thinking=True)
    await generated.setup()
    messages = generated.prompt_messages(await generated.get_next_item())
    assert [m["role"] for m in messages] == ["system", "user"]
    assert messages[0]["content"] == f"{THINKING_PROMPT}\n\n{SYSTEM_PROMPT}"


def test_original_budget_keys_set_the_training_and_evaluation_budgets(scripted, tmp_path):
    config = tmp_path / "reversal.yaml"
    config.write_text(
        "env:\n  max_train_token_length: 200\n  max_eval_token_length: 300\n  test_set_size: 3\n"
    )
    evaluation = scripted.evaluation(TextReversalEnv, ["--config", config], _responder())
    assert [r["body"]["max_tokens"] for r in evaluation.requests] == [300, 300, 300]
    groups_args = ["--config", config, "--env.dataset_path", SAMPLE, "--env.group_size", "2",
                   "--env.total_steps", "1"]  # fmt: skip
    requests = scripted.command(TextReversalEnv, "process", groups_args, _responder())
    assert {r["body"]["max_tokens"] for r in requests} == {200}
