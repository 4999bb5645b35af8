"""Options IV prediction: reading the prediction, the original's closeness tiers, saved option chains,
``process`` and ``evaluate``."""

from __future__ import annotations

import pytest

from environments.community.options_iv_prediction.options_iv_prediction import (
    OptionsIVEnv,
    closeness,
    reply_prediction,
)
from tests.environments.community.community_runs import always, evaluate_local, process_local
from tests.helpers.cli_runs import FIXTURES
from tests.helpers.single_turn_runs import check_groups, offline_env, prompt_text, setup_failure, write_jsonl

SAMPLE = FIXTURES / "community" / "options_chain_sample.csv"


@pytest.mark.parametrize(
    ("reply", "value"),
    [
        ("<think>vega...</think>The implied volatility will be: 45.2%", 45.2),
        ("the implied volatility will be:45%\n", 45.0),  # any case and spacing
        ("The implied volatility will be: 45 %. Again: The implied volatility will be: 45.0%", 45.0),
        ("The implied volatility will be: 45% or The implied volatility will be: 50%", None),  # hedged
        ("The implied volatility will be: 0.45", None),  # not a percentage
        ("IV = 45%", None),
        ("<think>The implied volatility will be: 45%</think>", None),  # only inside the reasoning
        ("", None),
    ],
)
def test_reading_the_prediction(reply, value):
    assert reply_prediction(reply) == value


@pytest.mark.parametrize(
    ("predicted", "score"),
    [
        (45.2, 1.0),
        (45.6, 0.95),
        (47.0, 0.95),
        (50.0, 0.85),
        (55.0, 0.7),
        (60.0, 0.5),
        (65.0, 0.3),
        (90.0, 0.1),
        (None, 0.0),
    ],
)
def test_closeness_tiers(predicted, score):
    assert closeness(predicted, 45.0) == score


async def test_saved_chain(tiny_model_dir, tmp_path):
    env = offline_env(OptionsIVEnv, tiny_model_dir, dataset_path=str(SAMPLE))
    await env.setup()
    items = env.train + env.test
    assert len(items) == 4 and len(env.test) == 1  # the expired and the unpriced options are left out
    first = next(i for i in items if i.strike_price == 170.0)
    assert first.iv_percent == pytest.approx(258.887) and first.stock_price == 288.0
    assert first.time_to_expiry == pytest.approx(
        (7 * 86400 + (16 * 3600 - 17 * 3600 - 12 * 60 - 46)) / (365.25 * 86400)
    )
    assert "Strike Price: $170.00" in env.prompt_messages(first)[1]["content"]
    rows = [{"strike": 1, "lastPrice": 2, "impliedVolatility": 0.3, "expiration": "2025-06-01",
             "lastTradeDate": "2025-05-01"}]  # fmt: skip
    path = write_jsonl(tmp_path / "chain.jsonl", rows)
    await setup_failure(
        offline_env(OptionsIVEnv, tiny_model_dir, dataset_path=path), "row 0: missing field 'stock_price'"
    )
    priced = offline_env(
        OptionsIVEnv, tiny_model_dir, dataset_path=path, eval_dataset_path=path, stock_price=10.0
    )
    await priced.setup()
    assert priced.train[0].stock_price == 10.0
    bad = write_jsonl(tmp_path / "bad.jsonl", [{**rows[0], "stock_price": 1, "expiration": "soon"}])
    await setup_failure(
        offline_env(OptionsIVEnv, tiny_model_dir, dataset_path=bad), "row 0: field 'expiration' is not a date"
    )


async def test_live_chain_needs_yahooquery_or_a_file(tiny_model_dir, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_yahooquery(name, *args, **kwargs):
        if name == "yahooquery":
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_yahooquery)
    await setup_failure(
        offline_env(OptionsIVEnv, tiny_model_dir), "pip install yahooquery, or pass --env.dataset_path"
    )


def _analyst(prompt, index):
    """The exact volatility (from the fixture) for even choices, 30 points off for odd ones."""
    text = prompt_text(prompt)
    strike = float(text.split("Strike Price: $", 1)[1].split("\n", 1)[0])
    iv = {170.0: 258.887, 290.0: 45.21, 280.0: 52.34, 300.0: 48.76}[strike]
    return (
        f"<think>Inverting Black-Scholes.</think>The implied volatility will be: {iv + 30 * (index % 2):.2f}%"
    )


def test_process_with_a_saved_chain(scripted):
    groups = process_local(
        scripted, OptionsIVEnv, SAMPLE, _analyst, group_size=2, total_steps=2, max_tokens=64
    )
    check_groups(groups, 2, [-1.0, 1.0])
    assert all("Strike Price: $" in prompt_text(g["messages"][0][:-1]) for g in groups)  # the chain's rows


def test_evaluate_reports_closeness(scripted):
    answer = always("The implied volatility will be: 50%")
    metrics = evaluate_local(scripted, OptionsIVEnv, SAMPLE, answer, max_tokens=64).metrics
    # 50 % against 258.9 (0.1), 45.2 (4.8 off: 0.85), 52.3 (2.3 off: 0.85), 48.8 (1.2 off: 0.95)
    assert metrics["eval/percent_correct"] == 0.75 and metrics["eval/format_rate"] == 1.0
    assert metrics["eval/mean_closeness"] == pytest.approx((0.1 + 0.85 + 0.85 + 0.95) / 4)
