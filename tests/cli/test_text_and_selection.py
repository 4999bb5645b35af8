"""Prompt/completion splitting and the rejection-sampling rules of the SFT/DPO generators."""

from __future__ import annotations

import random

from atroposlib.cli._tooling.formats import GroupView, dpo_record, sft_record
from atroposlib.cli._tooling.selection import select_dpo_pairs, select_sft
from atroposlib.cli._tooling.text import (
    common_prefix,
    first_trained_index,
    mask_runs,
    split_conversations,
    split_on_common_prefix,
)


def test_common_prefix_basic_and_empty():
    assert common_prefix(["abcde", "abcxy", "abc"]) == "abc"
    assert common_prefix(["xyz", "abc"]) == ""
    assert common_prefix([]) == ""
    assert common_prefix(["same", "same"]) == "same"


def test_split_empty_prefix_does_not_crash():
    # the original's str.split(prefix) raised "empty separator" here
    prefix, completions = split_on_common_prefix(["hello", "world"])
    assert prefix == ""
    assert completions == ["hello", "world"]


def test_split_repeated_prefix_keeps_whole_completion():
    # the original returned the text between the 1st and 2nd occurrence of the prefix: "says "
    texts = ["Q: hi A: says Q: hi again", "Q: hi A: no"]
    prefix, completions = split_on_common_prefix(texts)
    assert prefix == "Q: hi A: "
    assert completions == ["says Q: hi again", "no"]


def test_prompt_heads_cap_the_prefix():
    # identical completions would otherwise leave nothing after the prefix
    texts = ["prompt: answer 5", "prompt: answer 5"]
    prefix, completions = split_on_common_prefix(texts, ["prompt: ", "prompt: "])
    assert prefix == "prompt: "
    assert completions == ["answer 5", "answer 5"]
    # an empty head (fully trained sequence) does not cap
    assert split_on_common_prefix(["ab1", "ab2"], ["", ""])[0] == "ab"


def test_mask_helpers():
    assert first_trained_index([-100, -100, 7, 8]) == 2
    assert first_trained_index([-100, -100]) == 2
    assert first_trained_index(None) == 0
    runs = mask_runs([1, 2, 3, 4, 5], [-100, -100, 3, -100, 5])
    assert runs == [(False, [1, 2]), (True, [3]), (False, [4]), (True, [5])]
    assert mask_runs([1, 2, 3], [-100, 2]) == [(False, [1]), (True, [2]), (False, [3])]


def test_split_conversations_leaves_a_reply():
    sys_msg = {"role": "system", "content": "s"}
    user = {"role": "user", "content": "u"}
    convs = [
        [sys_msg, user, {"role": "assistant", "content": "a"}],
        [sys_msg, user, {"role": "assistant", "content": "b"}],
    ]
    prompt, replies = split_conversations(convs)
    assert prompt == [sys_msg, user]
    assert replies == [[{"role": "assistant", "content": "a"}], [{"role": "assistant", "content": "b"}]]
    same = [[user, {"role": "assistant", "content": "a"}]] * 2
    prompt, replies = split_conversations(same)
    assert prompt == [user] and replies == [[{"role": "assistant", "content": "a"}]] * 2


def test_select_sft_drops_zero_and_negative_by_default():
    assert select_sft([1.0, 0.0, -1.0, 0.5], top_n=10) == [0, 3]
    assert select_sft([1.0, 0.0, -1.0, 0.5], top_n=10, allow_negative_scores=True) == [0, 3, 1, 2]


def test_select_sft_ties_keep_order_and_top_n():
    assert select_sft([0.5, 1.0, 1.0, 1.0], top_n=2) == [1, 2]


def test_select_sft_min_diff_is_strict_over_unfiltered_min():
    scores = [1.0, 0.5, -1.0]
    # min = -1.0: 1.0 - (-1.0) = 2.0 > 1.5; 0.5 - (-1.0) = 1.5 is not > 1.5
    assert select_sft(scores, top_n=5, min_score_diff=1.5) == [0]
    assert select_sft(scores, top_n=5, min_score_diff=1.4) == [0, 1]
    assert select_sft([1.0, 1.0], top_n=5, min_score_diff=0.1) == []


def test_dpo_pairs_strict_threshold_and_pool():
    scores = [1.0, 0.5, 0.0, -1.0]
    pairs = select_dpo_pairs(scores, n_pairs=2, min_score_diff=0.5, rng=random.Random(0))
    # pool = the 2 lowest (indices 3, 2); positive 0 (1.0) may take either; positive 1 (0.5) needs < 0.0
    assert pairs[0][0] == 0
    assert len(pairs) <= 2
    for pos, neg in pairs:
        assert scores[neg] < scores[pos] - 0.5
        assert neg in (2, 3)
    # strict: a difference of exactly the threshold is not enough
    assert select_dpo_pairs([1.0, 0.5], n_pairs=1, min_score_diff=0.5) == []


def test_dpo_pairs_positive_filter_and_negatives_allowed():
    scores = [-0.2, -1.0]
    assert select_dpo_pairs(scores, n_pairs=3, min_score_diff=0.5) == []
    assert select_dpo_pairs(scores, n_pairs=3, min_score_diff=0.5, allow_negative_scores=True) == [(0, 1)]


def test_dpo_pairs_never_pair_a_sequence_with_itself():
    pairs = select_dpo_pairs([1.0, 1.0], n_pairs=2, min_score_diff=-1.0, rng=random.Random(3))
    assert all(p != n for p, n in pairs)
    assert len(pairs) == 2  # equal scores may pair with a negative threshold, as in the original


def test_dpo_pairs_deterministic_with_seed():
    scores = [1.0, 0.9, 0.8, 0.7, -1.0, -1.0, -1.0, -1.0]
    runs = {
        tuple(select_dpo_pairs(scores, n_pairs=4, min_score_diff=0.5, rng=random.Random(42)))
        for _ in range(5)
    }
    assert len(runs) == 1
    choices = {
        tuple(select_dpo_pairs(scores, n_pairs=4, min_score_diff=0.5, rng=random.Random(s)))
        for s in range(20)
    }
    assert len(choices) > 1  # the rejected side really is drawn at random


def test_record_formats():
    text = GroupView(prefix="P", completions=["good", "bad"])
    assert sft_record(text, 0, 1.0, "atropos") == {"prefix": "P", "completion": "good", "score": 1.0}
    assert sft_record(text, 0, 1.0, "trl") == {"prompt": "P", "completion": "good"}
    assert dpo_record(text, 0, 1, 1.0, "atropos") == {
        "prefix": "P",
        "pos": "good",
        "score": 1.0,
        "neg": "bad",
    }
    assert list(dpo_record(text, 0, 1, 1.0, "atropos")) == ["prefix", "pos", "score", "neg"]
    assert dpo_record(text, 0, 1, 1.0, "trl") == {"prompt": "P", "chosen": "good", "rejected": "bad"}
    user = {"role": "user", "content": "q"}
    a, b = {"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}
    msgs = GroupView(messages=[[user, a], [user, b]], prompt_messages=[user], replies=[[a], [b]])
    assert sft_record(msgs, 1, 0.5, "atropos") == {"messages": [user, b], "score": 0.5}
    assert sft_record(msgs, 1, 0.5, "trl") == {"messages": [user, b]}
    assert dpo_record(msgs, 0, 1, 1.0, "atropos") == {"pos": [user, a], "score": 1.0, "neg": [user, b]}
    assert dpo_record(msgs, 0, 1, 1.0, "trl") == {"prompt": [user], "chosen": [a], "rejected": [b]}
