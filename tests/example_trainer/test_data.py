"""Padding, labels, advantages, temperatures and micro-batching of API batches."""

from __future__ import annotations

import copy
import logging
import math

import numpy as np
import pytest
import torch

from example_trainer.grpo import data as data_mod
from example_trainer.grpo.data import (
    normalize_scores,
    pad_data_to_good_offset,
    padded_length,
    prepare_batch,
    sequence_temperature,
    split_stale_groups,
)
from tests.helpers.trainer import make_group


@pytest.fixture(autouse=True)
def _reset_warnings():
    data_mod._WARNED.clear()
    yield
    data_mod._WARNED.clear()


@pytest.mark.parametrize(("longest", "k"), [(2, 64), (64, 64), (65, 64), (66, 128), (129, 128), (130, 192)])
def test_padded_length_is_64_times_ceil_of_longest_minus_one(longest, k):
    assert padded_length(longest) == k
    assert k == max(64, 64 * math.ceil((longest - 1) / 64))


def test_shapes_dtypes_padding_and_labels_from_masks():
    group = make_group(lengths=[70, 10], prompt_len=3, scores=[1.0, 0.0])
    tokens, labels, advs, temps, logprobs = pad_data_to_good_offset({"batch": [group]}, batch_size=2)
    assert len(tokens) == 1
    t, y = tokens[0], labels[0]
    assert t.shape == (2, 128) and t.dtype == torch.int64
    assert y.shape == (2, 128) and y.dtype == torch.int64
    assert advs[0].shape == (2, 1) and advs[0].dtype == torch.float64
    assert temps[0].shape == (2, 1, 1) and temps[0].dtype == torch.float32
    assert logprobs is None
    # rows are right-padded to K+1 (token 0, mask -100); inputs are [:-1], labels masks [1:]
    seq = group["tokens"][1]
    assert t[1, :10].tolist() == seq
    assert t[1, 10:].eq(0).all()
    assert y[1, :9].tolist() == group["masks"][1][1:]
    assert y[1, 9:].eq(-100).all()
    assert y[1, :2].eq(-100).all() and y[1, 2].item() == seq[3]
    assert t[0, :69].tolist() == group["tokens"][0][:69]


def test_population_std_normalisation_per_group():
    scores = [1.0, 0.0, 0.0, 1.0, 1.0]
    expected = (np.array(scores) - 0.6) / np.array(scores).std()  # ddof=0
    np.testing.assert_allclose(normalize_scores(scores), expected)
    batch = prepare_batch([make_group(n=5, scores=scores), make_group(n=2, scores=[3.0, 3.0], seed=1)], 8)
    adv = batch.micro_batches[0].advantages[:, 0]
    np.testing.assert_allclose(adv[:5].numpy(), expected)
    # identical scores: std floored at 1e-8, advantages exactly 0
    assert adv[5:].tolist() == [0.0, 0.0]


def test_single_sequence_group_keeps_raw_score():
    batch = prepare_batch([make_group(n=1, scores=[0.7])], 4)
    assert batch.micro_batches[0].advantages[:, 0].tolist() == pytest.approx([0.7])


def test_override_set_advantage_to_zero():
    overrides = [{"set_advantage_to_zero": True}, {}, None, {"set_advantage_to_zero": False}]
    group = make_group(n=4, scores=[1.0, 0.0, 1.0, 0.0], overrides=overrides)
    adv = prepare_batch([group], 4).micro_batches[0].advantages[:, 0].tolist()
    assert adv == [0.0, -1.0, 1.0, -1.0]


def test_temperature_precedence():
    group = make_group(
        n=4,
        overrides=[{"temperature": 0.5}, {}, {"temperature": None}, {}],
        generation_params={"temperature": 0.8},
        group_overrides={"temperature": 1.3},
    )
    temps = prepare_batch([group], 4).micro_batches[0].temperatures.view(-1).tolist()
    assert temps == pytest.approx([0.5, 0.8, 0.8, 0.8])
    only_group = make_group(n=2, group_overrides={"temperature": 1.3})
    assert sequence_temperature(only_group, 0) == pytest.approx(1.3)
    assert sequence_temperature(make_group(n=1), 0) == 1.0


def test_micro_batches_flatten_groups_in_order_last_may_be_short():
    groups = [make_group(n=3, seed=1), make_group(n=2, seed=2)]
    batch = prepare_batch(groups, micro_batch_size=2)
    assert [mb.num_sequences for mb in batch.micro_batches] == [2, 2, 1]
    flat = [seq for g in groups for seq in g["tokens"]]
    got = torch.cat([mb.tokens for mb in batch.micro_batches])
    for i, seq in enumerate(flat):
        assert got[i, : len(seq)].tolist() == seq
    assert batch.num_sequences == 5
    assert batch.num_tokens == sum(map(len, flat))
    assert batch.seq_len == 64


def test_null_inference_logprobs_does_not_crash():
    group = make_group(n=2, inference_logprobs=None)
    *_, logprobs = pad_data_to_good_offset({"batch": [group]}, 2)
    assert logprobs is None
    assert prepare_batch([group], 2).has_inference_logprobs is False


def test_inference_logprobs_shifted_like_labels_nan_where_unknown():
    lengths = [6, 5]
    lps = [[1.0, 1.0, 1.0, -0.1, -0.2, -0.3], [1.0, 1.0, 1.0, -0.4, -0.5]]
    group = make_group(lengths=lengths, prompt_len=3, inference_logprobs=lps)
    *_, logprobs = pad_data_to_good_offset({"batch": [group]}, 2)
    lp = logprobs[0]
    assert lp.shape == (2, 64) and lp.dtype == torch.float32
    assert lp[0, :5].tolist() == pytest.approx(lps[0][1:])
    assert torch.isnan(lp[0, 5:]).all()
    # a group with logprobs for only one sequence: the other is unknown (NaN), not 1.0
    partial = make_group(lengths=[6, 5], prompt_len=3, inference_logprobs=[lps[0], None])
    lp2 = prepare_batch([partial], 2).micro_batches[0].inference_logprobs
    assert torch.isnan(lp2[1]).all() and lp2[0, 2].item() == pytest.approx(-0.1)


def test_misaligned_inference_logprobs_are_treated_as_unknown(caplog):
    group = make_group(lengths=[6], prompt_len=3, inference_logprobs=[[-0.1, -0.2]])
    with caplog.at_level(logging.WARNING):
        batch = prepare_batch([group, copy.deepcopy(group)], 2)
    assert batch.has_inference_logprobs is False
    assert sum("inference_logprobs row has 2 entries" in r.message for r in caplog.records) == 1


def test_token_level_advantages_are_honoured_and_shifted():
    group = make_group(
        lengths=[5, 4],
        prompt_len=2,
        scores=[1.0, 0.0],
        advantages=[[0.0, 0.0, 0.5, 0.6, 0.7], None],
    )
    adv = prepare_batch([group], 2).micro_batches[0].advantages
    assert adv.shape == (2, 64)
    assert adv[0, :4].tolist() == pytest.approx([0.0, 0.5, 0.6, 0.7])
    # the second sequence has no token-level row: its normalised sequence advantage, broadcast
    assert adv[1].eq(-1.0).all()


def test_token_level_advantages_zeroed_by_override_and_misaligned_rows_fall_back():
    group = make_group(
        lengths=[5, 4],
        prompt_len=2,
        scores=[1.0, 0.0],
        advantages=[[0.1] * 5, [0.2] * 3],
        overrides=[{"set_advantage_to_zero": True}, {}],
    )
    adv = prepare_batch([group], 2).micro_batches[0].advantages
    assert adv[0].eq(0.0).all()
    assert adv[1].eq(-1.0).all()  # 3 entries for 4 tokens: sequence advantage instead


def test_micro_batch_without_token_advantages_stays_per_sequence():
    g1 = make_group(lengths=[5, 5], advantages=[[0.1] * 5, [0.2] * 5])
    g2 = make_group(lengths=[5, 5], seed=3)
    mbs = prepare_batch([g1, g2], 2).micro_batches
    assert mbs[0].advantages.shape == (2, 64)
    assert mbs[1].advantages.shape == (2, 1)


def test_input_is_not_mutated():
    group = make_group(n=3, inference_logprobs=None, overrides=[{"temperature": 0.3}, {}, {}])
    data = {"batch": [group]}
    before = copy.deepcopy(data)
    pad_data_to_good_offset(data, 2)
    assert data == before


def test_bad_batches_raise_clear_errors():
    with pytest.raises(ValueError, match="no sequences"):
        prepare_batch([], 2)
    bad = make_group(lengths=[5, 5])
    bad["masks"][1] = bad["masks"][1][:-1]
    with pytest.raises(ValueError, match="group 0: sequence 1 has 5 tokens but 4 mask entries"):
        prepare_batch([bad], 2)
    short = make_group(n=2)
    short["scores"] = [1.0]
    with pytest.raises(ValueError, match="group 0: 2 token sequences but 1 scores"):
        prepare_batch([short], 2)


def test_split_stale_groups_uses_recorded_policy_step():
    old = make_group(n=2, group_overrides={"policy_step": 1})
    new = make_group(n=2, generation_params={"policy_step": 9, "temperature": 1.0})
    unknown = make_group(n=2)
    fresh, stale = split_stale_groups([old, new, unknown], current_step=10, max_staleness=3)
    assert stale == [old] and fresh == [new, unknown]
    assert split_stale_groups([old], 10, None) == ([old], [])
