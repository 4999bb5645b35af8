"""tokenize_for_trainer against the real tiny byte-level BPE tokenizer (ChatML template)."""

from __future__ import annotations

import numpy as np
import pytest
from transformers import AutoTokenizer, BatchEncoding

from atroposlib.utils.tokenize_for_trainer import (
    UNMASKED_ROLES,
    _as_id_list,
    chat_template_ids,
    tokenize_for_trainer,
)
from atroposlib.utils.tokenizers.qwen_fixed_tokenizer import QwenFixedTokenizer

MULTI_TURN = [
    {"role": "system", "content": "You are a helpful assistant."},
    {"role": "user", "content": "What is two plus two?"},
    {"role": "assistant", "content": "The answer is 4."},
    {"role": "user", "content": "And three times three?"},
    {"role": "assistant", "content": "<tool_call>{'name': 'calc', 'arguments': {'x': 9}}</tool_call>"},
    {"role": "tool", "content": "9"},
    {"role": "assistant", "content": "It is 9."},
]


@pytest.fixture(scope="module")
def hf_tokenizer(tiny_model_dir):
    return AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.fixture(scope="module", params=["transformers", "list-returning wrapper"])
def tokenizer(request, tiny_model_dir, hf_tokenizer):
    """The plain tokenizer (returns a BatchEncoding under transformers 5) and a wrapper that returns a
    plain list like transformers 4.x does."""
    if request.param == "transformers":
        return hf_tokenizer
    return QwenFixedTokenizer(str(tiny_model_dir))


def full_ids(tokenizer, messages, **kw):
    return _as_id_list(tokenizer.apply_chat_template(messages, **kw))


def test_as_id_list_accepts_every_return_shape():
    ids = [5, 6, 7]
    assert _as_id_list(ids) == ids
    assert _as_id_list(BatchEncoding({"input_ids": ids, "attention_mask": [1, 1, 1]})) == ids
    assert _as_id_list({"input_ids": ids}) == ids
    assert _as_id_list(np.array(ids)) == ids
    assert _as_id_list([ids]) == ids
    assert all(type(t) is int for t in _as_id_list(np.array(ids, dtype=np.int64)))


def test_plain_tokenizer_returns_batch_encoding_so_both_paths_are_exercised(hf_tokenizer, tiny_model_dir):
    msgs = MULTI_TURN[:3]
    raw = hf_tokenizer.apply_chat_template(msgs)
    wrapped = QwenFixedTokenizer(str(tiny_model_dir)).apply_chat_template(msgs)
    assert isinstance(wrapped, list)
    assert _as_id_list(raw) == wrapped


def test_last_turn_only_masks_the_prompt(tokenizer):
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    total = full_ids(tokenizer, messages)
    prefix = chat_template_ids(tokenizer, messages[:1], add_generation_prompt=True)
    out = tokenize_for_trainer(tokenizer, messages)
    assert out["tokens"] == total
    assert len(out["masks"]) == len(total)
    assert out["masks"][: len(prefix)] == [-100] * len(prefix)
    assert out["masks"][len(prefix) :] == total[len(prefix) :]
    assert "messages" not in out
    trained = [t for t in out["masks"] if t != -100]
    assert tokenizer.decode(trained) == "hello<|im_end|>\n"


def test_include_messages_returns_the_chat(tokenizer):
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    out = tokenize_for_trainer(tokenizer, messages, True)
    assert out["messages"] is messages
    assert out["tokens"] == full_ids(tokenizer, messages)


def test_last_turn_only_on_a_long_chat_trains_only_the_final_reply(tokenizer):
    out = tokenize_for_trainer(tokenizer, MULTI_TURN)
    trained = [t for t in out["masks"] if t != -100]
    assert tokenizer.decode(trained) == "It is 9.<|im_end|>\n"
    first_trained = next(i for i, m in enumerate(out["masks"]) if m != -100)
    assert all(m != -100 for m in out["masks"][first_trained:])


def _trained_spans(masks):
    spans, start = [], None
    for i, m in enumerate([*masks, -100]):
        if m != -100 and start is None:
            start = i
        elif m == -100 and start is not None:
            spans.append((start, i))
            start = None
    return spans


def test_train_on_all_assistant_turns_unmasks_each_assistant_reply(tokenizer):
    out = tokenize_for_trainer(tokenizer, MULTI_TURN, train_on_all_assistant_turns=True)
    tokens, masks = out["tokens"], out["masks"]
    assert tokens == full_ids(tokenizer, MULTI_TURN)
    assert len(masks) == len(tokens)
    for i, m in enumerate(masks):
        assert m in (-100, tokens[i])
    texts = [tokenizer.decode(tokens[a:b]) for a, b in _trained_spans(masks)]
    assistant = [m["content"] for m in MULTI_TURN if m["role"] == "assistant"]
    assert texts == [f"{c}<|im_end|>\n" for c in assistant]


def test_agent_role_and_extra_unmasked_role(tokenizer):
    assert UNMASKED_ROLES == ["assistant", "agent"]
    chat = [
        {"role": "user", "content": "go"},
        {"role": "agent", "content": "move left"},
        {"role": "environment", "content": "you moved"},
        {"role": "assistant", "content": "done"},
    ]
    out = tokenize_for_trainer(tokenizer, chat, train_on_all_assistant_turns=True)
    texts = [tokenizer.decode(out["tokens"][a:b]) for a, b in _trained_spans(out["masks"])]
    assert texts == ["move left<|im_end|>\n", "done<|im_end|>\n"]

    out = tokenize_for_trainer(
        tokenizer, chat, train_on_all_assistant_turns=True, unmasked_role="environment"
    )
    texts = [tokenizer.decode(out["tokens"][a:b]) for a, b in _trained_spans(out["masks"])]
    # environment directly follows agent, so their trained spans are separated only by its role header
    assert "".join(texts).count("<|im_start|>") == 0
    assert "".join(texts) == "move left<|im_end|>\nyou moved<|im_end|>\ndone<|im_end|>\n"


def test_chat_with_only_an_assistant_message_masks_the_generation_prompt(tokenizer):
    # transformers 5 refuses to render an empty conversation; the empty prefix is rendered directly.
    chat = [{"role": "assistant", "content": "solo"}]
    out = tokenize_for_trainer(tokenizer, chat)
    header = chat_template_ids(tokenizer, [], add_generation_prompt=True)
    assert tokenizer.decode(header) == "<|im_start|>assistant\n"
    assert out["masks"][: len(header)] == [-100] * len(header)
    assert tokenizer.decode([t for t in out["masks"] if t != -100]) == "solo<|im_end|>\n"
    all_turns = tokenize_for_trainer(tokenizer, chat, train_on_all_assistant_turns=True)
    assert all_turns["masks"] == out["masks"]


def test_empty_chat_is_rejected(tokenizer):
    with pytest.raises(ValueError, match="at least one message"):
        tokenize_for_trainer(tokenizer, [])


def test_finish_reason_length_keeps_a_trailing_newline_token(hf_tokenizer):
    # The ChatML template ends with "<|im_end|>\n": the last token is not EOS, so nothing is dropped.
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    out = tokenize_for_trainer(hf_tokenizer, messages, finish_reason="length")
    assert out["tokens"] == full_ids(hf_tokenizer, messages)


def test_finish_reason_length_drops_the_template_eos(tiny_model_dir):
    tok = AutoTokenizer.from_pretrained(tiny_model_dir)
    # Same ChatML template without the newline after each turn: renders end in the EOS token.
    tok.chat_template = (
        "{% for m in messages %}<|im_start|>{{ m['role'] }}\n{{ m['content'] }}<|im_end|>{% endfor %}"
        "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}"
    )
    messages = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]
    total = full_ids(tok, messages)
    assert total[-1] == tok.eos_token_id
    prefix = chat_template_ids(tok, messages[:1], add_generation_prompt=True)

    cut = tokenize_for_trainer(tok, messages, finish_reason="length")
    assert cut["tokens"] == total[:-1]
    assert len(cut["masks"]) == len(total) - 1
    assert cut["masks"][: len(prefix)] == [-100] * len(prefix)
    assert all(m != -100 for m in cut["masks"][len(prefix) :])

    stopped = tokenize_for_trainer(tok, messages, finish_reason="stop")
    assert stopped["tokens"] == total
    all_turns = tokenize_for_trainer(tok, messages, train_on_all_assistant_turns=True, finish_reason="length")
    assert all_turns["tokens"] == total[:-1] and len(all_turns["masks"]) == len(total) - 1
