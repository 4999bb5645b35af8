"""Options IV prediction: estimate an option's implied volatility from its price, the stock price, the
strike, the time to expiry and the risk-free rate.

The reply may reason in ``<think>...</think>``; the answer is the one statement "The implied volatility will be:
X%" after it (several different statements, or none, are no answer).

Reward, as the original: the prediction's distance ``d`` in percentage points from the option's implied
volatility gives a closeness (``d < 0.5``: 1.0, ``<= 2``: 0.95, ``<= 5``: 0.85, ``<= 10``: 0.7, ``<= 15``: 0.5,
``<= 20``: 0.3, else 0.1); training scores are +1 when the closeness exceeds 0.5 and -1 otherwise (no answer
included). Evaluate counts a reply correct at closeness 0.7 or more (within 10 points) and reports
``eval/percent_correct``, ``eval/mean_closeness`` and ``eval/format_rate``.

Data: by default the live option chain of ``symbols`` (``UNH``) from Yahoo Finance through ``yahooquery``, as
the original (needs ``pip install yahooquery`` and the network; 5 % held out). ``--env.dataset_path`` /
``--env.eval_dataset_path`` read a saved chain in yahooquery's option-chain schema (the original's
``example_options_data.csv``): ``strike``, ``lastPrice``, ``impliedVolatility`` (a fraction), ``expiration``,
``lastTradeDate`` (the time the price was seen, from which the time to expiry is counted), and the stock
price from a ``stock_price`` column or ``--env.stock_price``.

``python environments/community/options_iv_prediction/options_iv_prediction.py {serve,process,evaluate}``
"""

from __future__ import annotations

import random
import re
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any, Optional

from pydantic import Field

from atroposlib.envs.data_loading import DatasetError, check_rows, load_rows
from atroposlib.envs.declared_defaults import DeclaredDefaults
from atroposlib.envs.reply_fields import ReplyFields
from atroposlib.envs.reporting import mean
from atroposlib.envs.single_turn import SingleTurnEnv, SingleTurnEnvConfig
from atroposlib.utils.replies import answer_section

SYSTEM_PROMPT = (
    "You are a stock options analyst. You may think before answering: put your reasoning inside "
    "<think> </think> tags, then give your prediction."
)
_STATEMENT = re.compile(r"The implied volatility will be:\s*([\d.]+)\s*%", re.IGNORECASE)
YEAR_SECONDS = 365.25 * 24 * 3600
#: the original's closeness tiers: (largest distance in points, closeness)
TIERS = ((0.5, 1.0), (2.0, 0.95), (5.0, 0.85), (10.0, 0.7), (15.0, 0.5), (20.0, 0.3))


@dataclass(frozen=True)
class OptionItem:
    """One option: its terms and its implied volatility in percent."""

    option_price: float
    stock_price: float
    strike_price: float
    time_to_expiry: float
    risk_free_rate: float
    iv_percent: float


def _time(value: Any, where: str, field: str) -> datetime:
    try:
        return datetime.fromisoformat(str(value).strip()[:19])
    except ValueError:
        raise DatasetError(f"{where}: field {field!r} is not a date: {value!r}") from None


def _number(row: dict[str, Any], field: str, where: str) -> float:
    try:
        return float(row[field])
    except (TypeError, ValueError):
        raise DatasetError(f"{where}: field {field!r} is not a number: {row[field]!r}") from None


def items_from_rows(
    rows: list[dict[str, Any]], source: str, stock_price: Optional[float], risk_free_rate: float
) -> list[OptionItem]:
    """Items of option-chain rows; rows without a positive price or time to expiry are left out, as in the
    original. :class:`DatasetError` naming the row and field for a missing or unreadable value."""
    check_rows(rows, ["strike", "lastPrice", "impliedVolatility", "expiration", "lastTradeDate"], source)
    items = []
    for index, row in enumerate(rows):
        where = f"{source}: row {index}"
        if row.get("stock_price") is None and stock_price is None:
            raise DatasetError(f"{where}: missing field 'stock_price' (or pass --env.stock_price)")
        price = _number(row, "lastPrice", where)
        expiry = _time(row["expiration"], where, "expiration").replace(hour=16)
        years = (expiry - _time(row["lastTradeDate"], where, "lastTradeDate")).total_seconds() / YEAR_SECONDS
        if price <= 0 or years <= 0:
            continue
        items.append(
            OptionItem(
                option_price=price,
                stock_price=_number(row, "stock_price", where)
                if row.get("stock_price") is not None
                else stock_price,
                strike_price=_number(row, "strike", where),
                time_to_expiry=years,
                risk_free_rate=risk_free_rate,
                iv_percent=_number(row, "impliedVolatility", where) * 100,
            )
        )
    if not items:
        raise DatasetError(f"{source}: no option with a positive price and time to expiry")
    return items


def live_chain(symbols: Sequence[str]) -> list[dict[str, Any]]:
    """The current option chains of ``symbols`` from Yahoo Finance (``yahooquery``), with the stock price and
    the present time as ``lastTradeDate``."""
    try:
        from yahooquery import Ticker
    except ImportError:
        raise DatasetError(
            "yahooquery is not installed: pip install yahooquery, or pass --env.dataset_path FILE"
        ) from None
    ticker = Ticker(list(symbols))
    chain, financial = ticker.option_chain, ticker.financial_data
    now = datetime.now().isoformat(timespec="seconds")
    rows = []
    for (symbol, expiration, _kind), row in chain.iterrows():
        rows.append({**row.to_dict(), "expiration": str(expiration)[:10], "lastTradeDate": now,
                     "stock_price": financial[symbol]["currentPrice"]})  # fmt: skip
    return rows


def option_prompt(item: OptionItem) -> str:
    """The user turn of an option."""
    return (
        "Predict the implied volatility of this option.\n\n"
        f"Option Price: ${item.option_price:.2f}\n"
        f"Stock Price: ${item.stock_price:.2f}\n"
        f"Strike Price: ${item.strike_price:.2f}\n"
        f"Time to Expiry: {item.time_to_expiry:.6f} years\n"
        f"Risk-Free Rate: {item.risk_free_rate:.2f}\n\n"
        'End with exactly one line "The implied volatility will be: X%" giving the volatility in percent '
        "(for example 70%)."
    )


def reply_prediction(reply: str) -> Optional[float]:
    """The volatility (percent) a reply states after its reasoning, or None."""
    section = answer_section(reply)
    if section is None:
        return None
    values = set()
    for match in _STATEMENT.findall(section):
        try:
            values.add(float(match))
        except ValueError:
            return None
    return values.pop() if len(values) == 1 else None


def closeness(predicted: Optional[float], actual: float) -> float:
    """The original's tiered closeness of a prediction (0.0 for none)."""
    if predicted is None:
        return 0.0
    distance = abs(predicted - actual)
    return next(
        (score for limit, score in TIERS if distance < limit or (limit > 0.5 and distance <= limit)), 0.1
    )


class OptionsIVConfig(SingleTurnEnvConfig):
    """SingleTurnEnvConfig plus the data source and the option terms the data lacks."""

    dataset_path: Optional[str] = Field(None, description="a saved option chain (yahooquery's schema)")
    eval_dataset_path: Optional[str] = Field(None, description="a saved chain for evaluation")
    symbols: list[str] = Field(["UNH"], description="stocks whose live option chains are used")
    stock_price: Optional[float] = Field(None, gt=0, description="the stock price for rows without one")
    risk_free_rate: float = Field(0.05, description="the risk-free rate given with every option")
    test_fraction: float = Field(
        0.05, gt=0, lt=1, description="share held out for evaluation without an eval file"
    )
    split_seed: int = Field(42, description="seed of the split")


class OptionsIVEnv(DeclaredDefaults, ReplyFields, SingleTurnEnv):
    """Rewards implied-volatility predictions close to the market's."""

    name = "options_iv_prediction"
    env_config_cls = OptionsIVConfig
    config: OptionsIVConfig
    default_env_values = dict(group_size=16, batch_size=16, steps_per_eval=20, max_token_length=16384)
    correct_threshold = 1.0

    def _items(self, path: Optional[str]) -> list[OptionItem]:
        cfg = self.config
        rows = load_rows(
            path, lambda: live_chain(cfg.symbols), required=[], hub_name="Yahoo Finance (yahooquery)"
        )
        return items_from_rows(rows, str(path or "Yahoo Finance"), cfg.stock_price, cfg.risk_free_rate)

    async def setup(self) -> None:
        cfg = self.config
        items = self._items(cfg.dataset_path)
        random.Random(cfg.split_seed).shuffle(items)
        if cfg.eval_dataset_path:
            self.train, self.test = items, self._items(cfg.eval_dataset_path)
            return
        held_out = min(max(1, round(len(items) * cfg.test_fraction)), len(items) // 2) or 1
        self.test, self.train = items[:held_out], items[held_out:] or items

    def prompt_messages(self, item: OptionItem) -> list[dict[str, str]]:
        return [
            {"role": "system", "content": SYSTEM_PROMPT},
            {"role": "user", "content": option_prompt(item)},
        ]

    def score_replies(self, replies: Sequence[str], item: OptionItem) -> list[float]:
        scores = [closeness(reply_prediction(r), item.iv_percent) for r in replies]
        if len(replies) > 1:  # training: the original's +1 / -1
            return [1.0 if s > 0.5 else -1.0 for s in scores]
        return [1.0 if s >= 0.7 else 0.0 for s in scores]  # evaluation: within 10 points

    def eval_sample_fields(self, item: OptionItem) -> dict[str, Any]:
        return {"iv_percent": round(item.iv_percent, 4)}

    def reply_fields(self, reply: str, item: OptionItem) -> dict[str, Any]:
        predicted = reply_prediction(reply)
        return {"predicted_iv": predicted, "closeness": closeness(predicted, item.iv_percent)}

    def extra_eval_metrics(self, samples: Sequence[dict[str, Any]]) -> dict[str, float]:
        return {
            "eval/mean_closeness": mean([s["closeness"] for s in samples]),
            "eval/format_rate": mean([0.0 if s["predicted_iv"] is None else 1.0 for s in samples]),
        }


if __name__ == "__main__":
    OptionsIVEnv.cli()
