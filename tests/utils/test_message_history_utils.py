"""strip_thinking / truncate_thinking / ensure_trajectory_token_limit with the real tiny tokenizer."""

from __future__ import annotations

import logging

import pytest
from transformers import AutoTokenizer

from atroposlib.utils.message_history_utils import (
    ensure_trajectory_token_limit,
    strip_thinking,
    truncate_thinking,
)
from atroposlib.utils.tokenize_for_trainer import tokenize_for_trainer


@pytest.fixture(scope="module")
def tok(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


# -- strip_thinking ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("<think>plan</think>answer", "answer"),
        ("pre <think>a</think> mid <think>b</think> end", "pre  mid <think>b</think> end"),
        ("no tags", "no tags"),
        ("<think>unclosed", "<think>unclosed"),
        ("closed only</think> tail", "closed only</think> tail"),
        ("</think>x<think>", "</think>x<think>"),
        ("<think></think>", ""),
    ],
)
def test_strip_thinking(text, expected):
    assert strip_thinking(text) == expected


# -- truncate_thinking ---------------------------------------------------------------------------------


def test_truncate_thinking_short_block_is_reformatted_only(tok):
    assert truncate_thinking("<think> the sum is two </think> Answer: 2", tok, 50) == (
        "<think>\nthe sum is two\n</think> Answer: 2"
    )


def test_truncate_thinking_without_block_is_unchanged(tok):
    for text in ["plain answer", "<think>open only", "a</think>b<think>c"]:
        assert truncate_thinking(text, tok, 3) == text


def test_truncate_thinking_empty_block_is_normalised(tok):
    assert truncate_thinking("<think>  \n </think>  Answer", tok, 5) == "<think></think>  Answer"


def test_truncate_thinking_keeps_last_paragraph_when_it_fits(tok):
    thinking = "first we add the numbers one by one to get the total\n\nso the answer is four"
    out = truncate_thinking(f"<think>{thinking}</think>4", tok, 8)
    assert out == "<think>\n... so the answer is four\n</think>4"


def test_truncate_thinking_keeps_last_tokens_when_no_paragraph_fits(tok):
    thinking = "one two three four five six seven eight nine ten"
    out = truncate_thinking(f"<think>{thinking}</think>done", tok, 4)
    kept = out[len("<think>\n... ") : out.index("\n</think>")]
    ids = tok.encode(thinking, add_special_tokens=False)
    assert kept == tok.decode(ids[-4:]).strip()
    assert len(tok.encode(kept, add_special_tokens=False)) <= 4
    assert thinking.endswith(kept) and out.endswith("</think>done")


def test_truncate_thinking_returns_input_on_tokenizer_error(caplog):
    class Broken:
        def encode(self, *a, **k):
            raise RuntimeError("boom")

    text = "<think>some long thinking here</think>x"
    with caplog.at_level(logging.ERROR):
        assert truncate_thinking(text, Broken(), 1) == text
    assert "truncate_thinking failed" in caplog.text


# -- ensure_trajectory_token_limit ---------------------------------------------------------------------

SYSTEM = {"role": "system", "content": "You play a game. Reply with one move."}


def _history(turns: int, final_env: str, final_agent: str) -> list[dict]:
    msgs = [SYSTEM]
    for t in range(turns):
        msgs.append({"role": "environment", "content": f"observation number {t}: the board shows many tiles"})
        msgs.append({"role": "agent", "content": f"I move left on turn {t}"})
    msgs.append({"role": "environment", "content": final_env})
    msgs.append({"role": "agent", "content": final_agent})
    return msgs


def _step(tok, alternatives: list[list[dict]], **extra) -> dict:
    tokenized = [tokenize_for_trainer(tok, m) for m in alternatives]
    step = {
        "messages": alternatives,
        "tokens": [t["tokens"] for t in tokenized],
        "masks": [t["masks"] for t in tokenized],
        "scores": [1.0, -1.0][: len(alternatives)],
    }
    step.update(extra)
    return step


def test_compliant_steps_are_returned_untouched(tok):
    step = _step(tok, [_history(1, "final board", "move up"), _history(1, "final board", "move down")])
    limit = max(len(t) for t in step["tokens"])
    out = ensure_trajectory_token_limit([step], tok, limit)
    assert len(out) == 1 and out[0] is step


def test_empty_trajectory():
    assert ensure_trajectory_token_limit([], None, 10) == []


def test_long_step_is_truncated_uniformly_and_keeps_every_field(tok):
    alts = [_history(4, "final board A", "move up"), _history(4, "final board B", "move down")]
    logprobs = [[1.0] * len(t) for t in _step(tok, alts)["tokens"]]
    for lp, masks in zip(logprobs, _step(tok, alts)["masks"], strict=True):
        for i, m in enumerate(masks):
            if m != -100:
                lp[i] = -0.25  # generated positions carry real logprobs
    step = _step(
        tok,
        alts,
        seed=7,
        parsed_actions=["up", "down"],
        overrides=[{"temperature": 1.0}, {}],
        group_overrides={"group_size": 2},
        inference_logprobs=logprobs,
        custom_field="kept",
    )
    original_len = max(len(t) for t in step["tokens"])
    short_len = len(tokenize_for_trainer(tok, _history(1, "final board A", "move up"))["tokens"])
    limit = short_len + 2
    assert original_len > limit

    [out] = ensure_trajectory_token_limit([step], tok, limit)
    assert max(len(t) for t in out["tokens"]) <= limit
    for msgs, original in zip(out["messages"], alts, strict=True):
        assert msgs[0] == SYSTEM  # first message kept
        assert msgs[-2:] == original[-2:]  # final observation and reply kept
        assert len(msgs) == 5  # two older env/agent pairs removed... down to one pair
        assert tokenize_for_trainer(tok, msgs)["tokens"] == out["tokens"][out["messages"].index(msgs)]
    for key in ("seed", "parsed_actions", "overrides", "group_overrides", "custom_field", "scores"):
        assert out[key] == step[key]
    assert step["tokens"] != out["tokens"]  # the input step was not modified in place
    assert len(step["messages"][0]) == 11
    for lp, tokens, masks in zip(out["inference_logprobs"], out["tokens"], out["masks"], strict=True):
        assert len(lp) == len(tokens)
        assert all(v == -0.25 for v, m in zip(lp, masks, strict=True) if m != -100)
        assert all(v == 1.0 for v, m in zip(lp, masks, strict=True) if m == -100)


def test_step_without_seed_or_parsed_actions_is_still_processed(tok):
    step = _step(tok, [_history(3, "end", "stop")])
    kept = ensure_trajectory_token_limit([step], tok, 10_000)
    assert kept == [step]
    limit = len(tokenize_for_trainer(tok, _history(0, "end", "stop"))["tokens"])
    [out] = ensure_trajectory_token_limit([step], tok, limit)
    assert out["messages"][0] == [
        SYSTEM,
        {"role": "environment", "content": "end"},
        {"role": "agent", "content": "stop"},
    ]
    assert "seed" not in out and out["scores"] == step["scores"]


def test_alternatives_of_different_lengths_pop_by_their_own_budget(tok):
    long_alt = _history(3, "end", "stop")
    short_alt = _history(0, "end", "go")
    step = _step(tok, [long_alt, short_alt])
    limit = len(step["tokens"][1]) + 1
    [out] = ensure_trajectory_token_limit([step], tok, limit)
    assert out["messages"][1] == short_alt  # already minimal: never popped
    assert out["tokens"][1] == step["tokens"][1]
    assert len(out["messages"][0]) == 3


def test_unfittable_step_is_dropped_with_a_reason(tok, caplog):
    fits = _step(tok, [_history(0, "short", "ok")])
    too_long = _step(tok, [_history(2, "a very long final observation " * 5, "and a long reply " * 5)])
    limit = len(fits["tokens"][0])
    with caplog.at_level(logging.WARNING, logger="atroposlib.utils.message_history_utils"):
        out = ensure_trajectory_token_limit([too_long, fits], tok, limit)
    assert out == [fits]
    assert "dropping step 0 of 2" in caplog.text
    assert "only the first message and the final exchange are left" in caplog.text
    assert "kept 1 of 2 steps" in caplog.text


def test_over_limit_step_without_messages_is_dropped_with_a_reason(tok, caplog):
    step = {"tokens": [[1, 2, 3, 4]], "masks": [[-100, 2, 3, 4]], "scores": [1.0]}
    with caplog.at_level(logging.WARNING):
        assert ensure_trajectory_token_limit([step], tok, 3) == []
    assert "no per-alternative messages to truncate" in caplog.text
    # ...but the same step under the limit is kept although it has no messages.
    assert ensure_trajectory_token_limit([step], tok, 4) == [step]


def test_step_without_tokens_is_dropped_with_a_reason(tok, caplog):
    with caplog.at_level(logging.WARNING):
        assert ensure_trajectory_token_limit([{"messages": [], "scores": []}], tok, 3) == []
    assert "no token sequences" in caplog.text


def test_per_token_fields_are_realigned_with_fill_values(tok, caplog):
    # Trained on every agent turn originally; the rebuilt step trains the final reply only.
    alts = [_history(3, "end", "stop")]
    tokenized = tokenize_for_trainer(tok, alts[0], train_on_all_assistant_turns=True)
    step = {
        "messages": alts,
        "tokens": [tokenized["tokens"]],
        "masks": [tokenized["masks"]],
        "scores": [1.0],
        "ref_logprobs": [[-0.5] * len(tokenized["tokens"])],
        "advantages": [[0.3] * len(tokenized["tokens"])],
    }
    limit = len(tokenize_for_trainer(tok, _history(1, "end", "stop"))["tokens"])
    with caplog.at_level(logging.WARNING):
        [out] = ensure_trajectory_token_limit([step], tok, limit)
    # re-tokenised with last-turn masking: only the final reply is trained, which the suffix covers
    assert len(out["ref_logprobs"][0]) == len(out["tokens"][0])
    assert out["advantages"][0][-1] == 0.3
    assert out["advantages"][0][0] == 0.0


def test_per_token_field_that_cannot_be_realigned_becomes_none(tiny_model_dir, caplog):
    # A template that writes the turn number after each message: removing turns changes the trained
    # tokens of the final reply, so the old logprobs no longer describe them.
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    tok.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }} #{{ loop.index }}<|im_end|>\n"
        "{% endfor %}{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    alts = [_history(3, "end", "stop")]
    step = _step(tok, alts)
    step["inference_logprobs"] = [[-0.5] * len(step["tokens"][0])]
    limit = len(tokenize_for_trainer(tok, _history(1, "end", "stop"))["tokens"])
    with caplog.at_level(logging.WARNING):
        [out] = ensure_trajectory_token_limit([step], tok, limit)
    assert out["inference_logprobs"] is None
    assert "cannot realign 'inference_logprobs'" in caplog.text
    assert max(len(t) for t in out["tokens"]) <= limit
