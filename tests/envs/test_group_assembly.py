"""Default group assembly from single rollouts (ScoredDataItems)."""

from __future__ import annotations

from atroposlib.envs.group_assembly import assemble_group


def item(i, **extra):
    d = {"tokens": [i, i + 1], "masks": [-100, i + 1], "scores": float(i)}
    d.update(extra)
    return d


def test_absent_optionals_are_none_not_empty_lists():
    group, notes = assemble_group([item(1), item(2)])
    assert notes == []
    assert group["tokens"] == [[1, 2], [2, 3]]
    assert group["scores"] == [1.0, 2.0]
    for key in ("advantages", "ref_logprobs", "messages", "images", "overrides", "inference_logprobs"):
        assert group[key] is None
    assert group["group_overrides"] is None


def test_logprobs_and_distillation_are_kept():
    rollouts = [
        item(
            1, inference_logprobs=[1.0, -0.5], distill_token_ids=[[1], [2]], distill_logprobs=[[-0.1], [-0.2]]
        ),
        item(
            2, inference_logprobs=[1.0, -0.7], distill_token_ids=[[3], [4]], distill_logprobs=[[-0.3], [-0.4]]
        ),
    ]
    group, _ = assemble_group(rollouts)
    assert group["inference_logprobs"] == [[1.0, -0.5], [1.0, -0.7]]
    assert group["distill_token_ids"] == [[[1], [2]], [[3], [4]]]
    assert group["distill_logprobs"][1] == [[-0.3], [-0.4]]


def test_none_rollouts_are_skipped_and_extra_keys_ignored():
    msgs = [{"role": "user", "content": "hi"}]
    group, notes = assemble_group(
        [None, item(1, messages=msgs, finish_reason="stop"), None, item(2, messages=msgs)]
    )
    assert len(group["tokens"]) == 2
    assert group["messages"] == [msgs, msgs]
    assert "finish_reason" not in group
    assert notes == []


def test_partial_optional_field_is_dropped_with_a_note():
    group, notes = assemble_group([item(1, advantages=[0.0, 1.0]), item(2)])
    assert group["advantages"] is None
    assert notes == ["only 1 of 2 rollouts set 'advantages'; dropped it for the group"]


def test_group_overrides_merge_and_bad_rollouts():
    group, notes = assemble_group(
        [
            item(1, group_overrides={"a": 1}),
            "oops",
            {"tokens": [1]},
            item(2, group_overrides={"b": 2, "a": 3}),
        ]
    )
    assert group["group_overrides"] == {"a": 3, "b": 2}
    assert len(group["tokens"]) == 2
    assert any("rollout 1 is a str" in n for n in notes)
    assert any("rollout 2 lacks masks, scores" in n for n in notes)


def test_nothing_usable():
    assert assemble_group([None, None]) == (None, [])
