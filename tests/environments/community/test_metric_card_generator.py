"""Metric card generation: the schema, the formatting and content checks, hedges and hacks, drawn and local
requests, ``process`` and ``evaluate``."""

from __future__ import annotations

import json
import random

import pytest

from environments.community.metric_card_generator.metric_card_generator import MetricCardEnv
from environments.community.metric_card_generator.metric_cards import (
    METRIC_TYPES,
    MetricPrompt,
    card_text,
    random_prompt,
    score_card,
    value_fits,
)
from tests.environments.community.community_runs import evaluate_local, process_local
from tests.helpers.cli_runs import FIXTURES, read_jsonl
from tests.helpers.single_turn_runs import check_groups, offline_env, prompt_text, setup_failure, write_jsonl

SAMPLE = FIXTURES / "community" / "metric_card_generator" / "metric_requests.jsonl"
ROWS = read_jsonl(SAMPLE)
CHURN = MetricPrompt(ROWS[0]["prompt"], "telecommunications", "churn rate", "Q2 2024")


def card(**props) -> dict:
    base = {"title": "Churn Rate", "value": "2.4%", "description": "Customers lost in Q2 2024",
            "trend": {"value": -0.3, "isPositive": False}, "icon": "trending-down"}  # fmt: skip
    return {
        "componentType": "metricCard",
        "props": {k: v for k, v in {**base, **props}.items() if v is not None},
    }


def fenced(data: dict, tag: str = "json") -> str:
    return f"```{tag}\n{json.dumps(data, indent=2)}\n```"


PERFECT = fenced(card())


@pytest.mark.parametrize(
    ("reply", "score"),
    [
        (PERFECT, 1.0),
        (f"<think>churn is a rate, so a percent</think>Here it is:\n{PERFECT}", 1.0),
        (json.dumps(card()), 1.0),  # bare JSON
        (fenced(card(), ""), 1.0),  # a plain block
        (PERFECT + "\nAgain:\n" + fenced(card()), 1.0),  # the same card twice
        (fenced({"props": card()["props"], "componentType": "metricCard"}), 1.0),  # key order
        (fenced(card(trend={"value": 1, "isPositive": True})), 1.0),  # an integer trend is a number
        (fenced(card(value="2.4")), 0.5 + 0.25 * 2 / 3 + 0.25 * 3 / 4),  # no percent sign: both lose
        (fenced(card(description=None, trend=None, icon=None)), 0.5 + 0.25 / 3 + 0.25 * 0.5),
        (fenced(card(title="Churn Rate Revenue Users Growth Sales Costs Score Share")), 0.9375),  # stuffed
        (fenced(card(description="Q1 2023 Q2 2023 Q3 2023 Q4 2023 Q1 2024 Q2 2024 " * 4)), 0.9375),  # stuffed
        (fenced(card(icon="rocket")), 0.9375),
        (PERFECT + "\n" + fenced(card(value="3.1%")), 0.0),  # two different cards: a hedge
        (fenced(card(color="red")), 0.0),  # an extra property
        (fenced({**card(), "version": 2}), 0.0),
        (fenced({"componentType": "MetricCard", "props": card()["props"]}), 0.0),
        (fenced(card(value=2.4)), 0.0),  # value must be text
        (fenced(card(trend={"value": "5%", "isPositive": True})), 0.0),
        (fenced(card(title=None)), 0.0),
        ('```json\n{"componentType": "metricCard", "props": {"title": "Churn"\n```', 0.0),  # cut off
        (f"<think>{PERFECT}</think>I hope that helps.", 0.0),  # only inside the reasoning
        (f"<think>{PERFECT}", 0.0),  # reasoning never closes
        (CHURN.prompt, 0.0),  # prompt echo
        ("", 0.0),
    ],
)
def test_scoring(reply, score):
    assert score_card(reply, CHURN).score == pytest.approx(score)


@pytest.mark.parametrize(
    ("metric", "value", "fits"),
    [("revenue", "$1,234", True), ("revenue", "1,234", False), ("operational costs", "€980k", True),
     ("app downloads", "12,400", True), ("uptime percentage", "99.95%", True), ("market share", "18", False),
     ("active users", "many", False), ("return on investment", "14%", True)],
)  # fmt: skip
def test_value_units_follow_the_metric(metric, value, fits):
    assert value_fits(value, metric) is fits


def test_card_text_and_drawn_prompts():
    assert card_text("<think>x</think>  ") is None and card_text("```json\n{}\n```\n```\n[]\n```") == "{}"
    drawn = [random_prompt(random.Random(3)) for _ in range(2)]
    assert drawn[0] == drawn[1] and drawn[0].metric_type in METRIC_TYPES
    assert drawn[0].metric_type in drawn[0].prompt and drawn[0].time_period in drawn[0].prompt


async def test_requests_drawn_or_local(tiny_model_dir, tmp_path):
    env = offline_env(MetricCardEnv, tiny_model_dir, eval_size=5)
    await env.setup()
    assert env.train == [] and len(env.test) == 5
    first = [await env.get_next_item() for _ in range(3)]
    assert len({p.prompt for p in first}) > 1 and not {p.prompt for p in first} & {p.prompt for p in env.test}
    local = offline_env(
        MetricCardEnv, tiny_model_dir, dataset_path=str(SAMPLE), eval_dataset_path=str(SAMPLE)
    )
    await local.setup()
    assert [await local.get_next_item() for _ in range(3)] == local.test and local.test[0] == CHURN
    path = write_jsonl(tmp_path / "rows.jsonl", [ROWS[0], {"prompt": "p", "domain": "d", "metric_type": "m"}])
    error = await setup_failure(
        offline_env(MetricCardEnv, tiny_model_dir, dataset_path=path), "row 1: missing field 'time_period'"
    )
    assert path in str(error)


def _card_for(text: str) -> str:
    row = next(r for r in ROWS if r["prompt"] in text)
    unit = {"churn rate": "4.2%", "revenue": "$88,120", "app downloads": "12,400"}[row["metric_type"]]
    props = {"title": row["metric_type"].title(), "value": unit, "description": f"Total for {row['time_period']}",
             "trend": {"value": 3.5, "isPositive": True}, "icon": "bar-chart"}  # fmt: skip
    return fenced({"componentType": "metricCard", "props": props})


def _responder(prompt, index):
    text = prompt_text(prompt)
    return _card_for(text) if index % 2 == 0 else '{"componentType": "metricCard"}'


def test_process_with_a_local_file(scripted):
    groups = process_local(
        scripted, MetricCardEnv, SAMPLE, _responder, group_size=2, total_steps=3, max_tokens=256
    )
    check_groups(groups, 3, [0.0, 1.0])


def test_evaluate_reports_schema_validity(scripted):
    evaluation = evaluate_local(
        scripted, MetricCardEnv, SAMPLE, lambda prompt, index: _card_for(prompt_text(prompt)), max_tokens=256
    )
    metrics = evaluation.metrics
    assert metrics["eval/percent_correct"] == 1.0 and metrics["eval/schema_valid"] == 1.0
    assert metrics["eval/mean_score"] == 1.0 and len(evaluation.samples) == 3
