"""The company-fundamentals environment: rows, prediction parsing, direction-then-magnitude reward,
``process`` and ``evaluate`` (directional accuracy and magnitude error)."""

from __future__ import annotations

from typing import Any

import pytest

from environments import fundamental_prediction_environment as fundamentals
from environments.fundamental_prediction_environment import (
    FundamentalPredictionEnv,
    FundamentalsItem,
    Prediction,
    magnitude_closeness,
    parse_magnitude,
    parse_prediction,
    prediction_score,
    row_to_item,
)
from tests.helpers.cli_runs import FIXTURES, read_jsonl
from tests.helpers.single_turn_runs import (
    check_groups,
    offline_env,
    prompt_text,
    setup_failure,
    write_jsonl,
)

SAMPLE = FIXTURES / "fundamentals_sample.jsonl"
ROWS = read_jsonl(SAMPLE)
ITEMS = [row_to_item(row, i, "f") for i, row in enumerate(ROWS)]
DIVIDEND = FundamentalsItem("ctx", "quarterly dividend per share", "raised", 4.0)
OTHER = {"raised": "reduced", "reduced": "maintained", "maintained": "raised"}


def _statement(metric: str, direction: str, size: float) -> str:
    return f"The {metric} will be: {direction} and the magnitude will be: {size:g}%"


def _env(tiny_model_dir, **overrides) -> FundamentalPredictionEnv:
    return offline_env(FundamentalPredictionEnv, tiny_model_dir, **{"dataset_path": str(SAMPLE), **overrides})


def _item_of(prompt: Any) -> FundamentalsItem:
    text = prompt_text(prompt)
    return next(item for item in ITEMS if item.context in text)


def group_responder(prompt: Any, index: int) -> str:
    """Choice 0: exact; 1: wrong direction; 2: right direction, off by half the change; 3: malformed."""
    item = _item_of(prompt)
    off = item.magnitude * 1.5 if item.magnitude else 0.5
    statement = [
        _statement(item.metric, item.direction, item.magnitude),
        _statement(item.metric, OTHER[item.direction], item.magnitude),
        _statement(item.metric, item.direction, off),
        f"I expect the {item.metric} to go {item.direction}.",
    ][index % 4]
    return f"<think>Weighing the filings, the news and the macro picture.</think>{statement}"


def first_rows_responder(prompt: Any, index: int) -> str:
    """Rows 0-3: right direction, magnitude 2 points too high; rows 4-7: wrong direction."""
    item = _item_of(prompt)
    position = ITEMS.index(item)
    if position < 4:
        return f"<think>ok</think>{_statement(item.metric, item.direction, item.magnitude + 2)}"
    return f"<think>ok</think>{_statement(item.metric, OTHER[item.direction], item.magnitude)}"


# -- data ------------------------------------------------------------------------------------------------
def test_rows_become_items():
    assert ITEMS[0] == FundamentalsItem(ROWS[0]["context"], "quarterly dividend per share", "raised", 4.0)
    assert [i.magnitude for i in ITEMS[1:4]] == [7.5, 0.0, 12.0]  # "7.5", 0 and "12.0%"
    assert parse_magnitude("-3.5 %") == 3.5 and parse_magnitude(".5") == 0.5
    assert parse_magnitude("n/a") is None and parse_magnitude(True) is None


@pytest.mark.parametrize(
    "change, message",
    [
        (
            {"answer": "increased"},
            r"bad\.jsonl: row 1: field 'answer' must be one of raised, reduced, maintained",
        ),
        ({"magnitude": "about ten"}, r"bad\.jsonl: row 1: field 'magnitude' is not a number"),
        ({"magnitude": None}, r"bad\.jsonl: row 1: missing field 'magnitude'"),
        ({"context": None}, r"bad\.jsonl: row 1: missing field 'context'"),
    ],
)
async def test_bad_rows_stop_setup_with_one_line(tiny_model_dir, tmp_path, change, message):
    env = _env(
        tiny_model_dir, dataset_path=write_jsonl(tmp_path / "bad.jsonl", [ROWS[0], {**ROWS[1], **change}])
    )
    await setup_failure(env, message)


async def test_setup_local_and_empty(tiny_model_dir, tmp_path):
    env = _env(tiny_model_dir)
    await env.setup()
    assert sorted(i.context for i in env.train) == sorted(r["context"] for r in ROWS)
    assert sorted(i.context for i in env.test) == sorted(r["context"] for r in ROWS)
    empty = _env(tiny_model_dir, dataset_path=write_jsonl(tmp_path / "empty.jsonl", []))
    await setup_failure(empty, "empty.jsonl: no rows")


async def test_default_data_is_the_hub_set(tiny_model_dir, hub_offline):
    env = _env(tiny_model_dir, dataset_path=None)
    await setup_failure(env, "NousResearch/company-fundamentals-prediction-lite: cannot load")


async def test_hub_rows_are_split_for_evaluation(tiny_model_dir, monkeypatch):
    rows = ROWS * 5  # 40 rows: 2 held out at 5%
    monkeypatch.setattr(fundamentals, "hub_split", lambda name, split, config=None: lambda: rows)
    env = _env(tiny_model_dir, dataset_path=None)
    await env.setup()
    assert len(env.test) == 2 and len(env.train) == 38


# -- parsing and reward ----------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "reply, prediction",
    [
        ("<think>x</think>The quarterly dividend per share will be: raised and the magnitude will be: 4%",
         Prediction("raised", 4.0)),
        ("the quarterly  dividend per share WILL BE: Raised and the magnitude will be: 4.5 %", Prediction("raised", 4.5)),
        ("<think>x</think>The quarterly dividend per share will be: reduced and the magnitude will be: -10%",
         Prediction("reduced", 10.0)),
        ("<think>x</think>" + 2 * "The quarterly dividend per share will be: raised and the magnitude will be: 4%. ",
         Prediction("raised", 4.0)),  # the same statement twice
        ("<think>x</think>The quarterly dividend per share will be: raised and the magnitude will be: 4%. "
         "The quarterly dividend per share will be: reduced and the magnitude will be: 4%", None),  # conflicting
        ("<think>x</think>The quarterly dividend per share will be: raised and the magnitude will be: 4% "
         "or The quarterly dividend per share will be: raised and the magnitude will be: 6%", None),
        ("<think>The quarterly dividend per share will be: raised and the magnitude will be: 4%</think>Unsure.",
         None),  # only inside the think block
        ("<think>The quarterly dividend per share will be: raised and the magnitude will be: 4%", None),  # unclosed
        ("<think>x</think>The revenue will be: raised and the magnitude will be: 4%", None),  # another metric
        ("<think>x</think>The quarterly dividend per share will be: raised and the magnitude will be: 4", None),
        ("<think>x</think>The quarterly dividend per share will be: up and the magnitude will be: 4%", None),
        ("<think>x</think>I think the dividend goes up by about 4%.", None),
        ("", None),
    ],
)  # fmt: skip
def test_parse_prediction(reply, prediction):
    assert parse_prediction(reply, "quarterly dividend per share") == prediction


def test_reward_direction_first_then_magnitude():
    assert prediction_score(Prediction("raised", 4.0), DIVIDEND) == pytest.approx(1.0)
    assert prediction_score(Prediction("raised", 6.0), DIVIDEND) == pytest.approx(0.85)
    assert prediction_score(Prediction("raised", 2.0), DIVIDEND) == pytest.approx(0.85)
    assert prediction_score(Prediction("raised", 9.0), DIVIDEND) == pytest.approx(0.7)
    assert prediction_score(Prediction("reduced", 4.0), DIVIDEND) == 0.0
    assert prediction_score(Prediction("maintained", 0.0), DIVIDEND) == 0.0
    assert prediction_score(None, DIVIDEND) == 0.0
    maintained = FundamentalsItem("ctx", "revenue", "maintained", 0.0)
    assert prediction_score(Prediction("maintained", 0.0), maintained) == pytest.approx(1.0)
    assert prediction_score(Prediction("maintained", 0.5), maintained) == pytest.approx(0.85)
    assert magnitude_closeness(12.0, 12.0) == 1.0 and magnitude_closeness(30.0, 12.0) == 0.0


async def test_magnitude_separates_right_direction_replies(tiny_model_dir):
    # The original collapsed every right-direction reply to +1, so a group of right directions with
    # different magnitudes carried no signal and was dropped; here the closer magnitude scores higher.
    env = _env(tiny_model_dir)
    replies = [f"<think>x</think>{_statement(DIVIDEND.metric, 'raised', size)}" for size in (4, 5, 8)]
    scores = await env.score_replies_async(replies, DIVIDEND)
    assert scores[0] > scores[1] > scores[2] >= 0.7
    assert env.magnitude_error_buffer == [0.0, 1.0, 4.0]


# -- process and evaluate --------------------------------------------------------------------------------
def test_process_writes_groups(scripted):
    args = ["--env.dataset_path", SAMPLE, "--env.group_size", "4", "--env.total_steps", "3",
            "--env.max_tokens", "96"]  # fmt: skip
    groups = scripted.process(FundamentalPredictionEnv, args, group_responder)
    check_groups(groups, 3, [0.0, 0.0, 0.85, 1.0])


def test_evaluate_reports_direction_accuracy_and_magnitude_error(scripted):
    metrics, samples, out = scripted.evaluate(
        FundamentalPredictionEnv,
        ["--env.dataset_path", SAMPLE, "--env.max_tokens", "96"],
        first_rows_responder,
    )
    assert metrics["eval/direction_accuracy"] == metrics["eval/percent_correct"] == pytest.approx(0.5)
    assert metrics["eval/magnitude_abs_error"] == pytest.approx(2.0)  # over the 4 right directions
    right = [magnitude_closeness(i.magnitude + 2, i.magnitude) for i in ITEMS[:4]]
    assert metrics["eval/magnitude_accuracy"] == pytest.approx(sum(right) / 4)
    assert metrics["eval/mean_score"] == pytest.approx(sum(0.7 + 0.3 * c for c in right) / 8)
    assert len(samples) == 8 and {s["gold_answer"] for s in samples} == {"raised", "reduced", "maintained"}
    assert "fundamental_prediction evaluation: percent_correct=0.5000" in out
