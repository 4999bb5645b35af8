"""Metric-card prompts, the card schema and the card checks of the metric-card environment.

A prompt asks for one metric (``metric_type``) of a business ``domain`` over a ``time_period``
(:func:`random_prompt`: the original's vocabularies and five templates). A reply's card is the JSON object
after its reasoning: the body of its ```json (or plain ```) block, else the whole answer; several blocks that
differ are a hedge and give no card.

:func:`score_card`: 0.0 without a card that parses and passes the schema (:class:`MetricCardComponent`:
``componentType`` exactly ``metricCard``, ``props.title`` and ``props.value`` text, optional ``description``,
``trend`` {``value`` number, ``isPositive`` boolean}, ``icon``, ``className``; nothing else). A valid card
scores 0.5, plus 0.25 x the original's formatting share (a formatted value, a well-typed trend, a
description) and 0.25 x the content share: the title names the requested metric (its words, in at most four
extra words), the value has digits and the unit its metric calls for (``%`` for rates, shares, margins and
percentages; a currency symbol for money), the description names the time period (in at most 160
characters), and the icon is one of the known icons.
"""

from __future__ import annotations

import json
import random
import re
from dataclasses import dataclass
from typing import Any, Literal, Optional

from pydantic import BaseModel, ConfigDict, ValidationError

from atroposlib.utils.replies import answer_section

DOMAINS = (
    "e-commerce", "finance", "healthcare", "education", "real estate", "social media", "marketing",
    "transportation", "manufacturing", "hospitality", "technology", "energy", "retail", "agriculture", "media",
    "telecommunications", "insurance", "entertainment",
)  # fmt: skip
METRIC_TYPES = (
    "revenue", "user growth", "conversion rate", "customer acquisition cost", "average order value",
    "customer lifetime value", "page views", "bounce rate", "churn rate", "active users", "session duration",
    "retention rate", "engagement rate", "click-through rate", "inventory turnover", "profit margin",
    "return on investment", "customer satisfaction", "net promoter score", "sales growth", "market share",
    "employee productivity", "website traffic", "operational costs", "customer support tickets",
    "app downloads", "subscription renewals", "delivery time", "error rate", "uptime percentage",
)  # fmt: skip
TIME_PERIODS = (
    "this month", "this quarter", "this year", "last 30 days", "last 7 days", "last 24 hours", "year-to-date",
    "Q1 2023", "Q2 2023", "Q3 2023", "Q4 2023", "Q1 2024", "Q2 2024", "January", "February", "March", "April",
    "May", "June", "July", "August", "September", "October", "November", "December",
)  # fmt: skip
ICONS = (
    "trending-up", "trending-down", "users", "dollar", "shopping-cart", "bar-chart", "percent", "activity",
    "alert-circle", "clock", "heart", "globe", "mail", "phone", "eye", "tag", "star", "bell", "download",
    "upload", "refresh", "check-circle", "shield", "pie-chart", "layers", "calendar", "thumbs-up",
)  # fmt: skip
TEMPLATES = (
    "Create a metric card for {metric} in {domain} for {period}.",
    "Generate a JSON output for a {domain} dashboard showing {metric} during {period}.",
    "I need a metric card showing {metric} statistics for our {domain} business for {period}.",
    "Design a metric component that displays {metric} for our {domain} platform for {period}.",
    "Provide a metric card JSON for {metric} in our {domain} analytics for {period}.",
)
#: Metric words that call for a percentage, and those that call for money.
PERCENT_WORDS = ("rate", "percentage", "margin", "share", "return on investment")
MONEY_WORDS = ("revenue", "cost", "value", "costs")
CURRENCY = ("$", "€", "£", "¥")
_FENCE = re.compile(r"```[ \t]*([A-Za-z]*)[^\n]*\n(.*?)```", re.DOTALL)


@dataclass(frozen=True)
class MetricPrompt:
    """One request: the ``prompt`` text and the ``domain``, ``metric_type`` and ``time_period`` it names."""

    prompt: str
    domain: str
    metric_type: str
    time_period: str


def random_prompt(rng: random.Random) -> MetricPrompt:
    """A prompt drawn as the original drew them: a domain, a metric, a period and one of five templates."""
    domain, metric, period = rng.choice(DOMAINS), rng.choice(METRIC_TYPES), rng.choice(TIME_PERIODS)
    text = rng.choice(TEMPLATES).format(metric=metric, domain=domain, period=period)
    return MetricPrompt(text, domain, metric, period)


class TrendModel(BaseModel):
    """A card's trend: the percentage change and its direction."""

    model_config = ConfigDict(extra="forbid", strict=True)
    value: float
    isPositive: bool


class MetricCardProps(BaseModel):
    """A card's properties."""

    model_config = ConfigDict(extra="forbid", strict=True)
    title: str
    value: str
    description: Optional[str] = None
    trend: Optional[TrendModel] = None
    icon: Optional[str] = None
    className: Optional[str] = None


class MetricCardComponent(BaseModel):
    """The whole card."""

    model_config = ConfigDict(extra="forbid", strict=True)
    componentType: Literal["metricCard"]
    props: MetricCardProps


def card_text(reply: str) -> Optional[str]:
    """The JSON text of a reply (see the module docstring), or None (no answer, or differing blocks)."""
    section = answer_section(reply)
    if section is None or not section.strip():
        return None
    blocks = _FENCE.findall(section)
    if not blocks:
        return section.strip()
    tagged = [body for tag, body in blocks if tag.lower() == "json"] or [body for _, body in blocks]
    bodies = {re.sub(r"\s+", "", body) for body in tagged}
    return tagged[-1].strip() if len(bodies) == 1 else None


def parse_card(text: Optional[str]) -> tuple[Optional[MetricCardComponent], Optional[str]]:
    """``(card, None)`` for a schema-valid card, else ``(None, why)``."""
    if text is None:
        return None, "no card"
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        return None, f"not JSON ({exc.msg})"
    try:
        return MetricCardComponent.model_validate(data), None
    except ValidationError as exc:
        first = exc.errors()[0]
        return None, f"schema: {'.'.join(map(str, first['loc']))}: {first['msg']}"


def formatting_share(props: MetricCardProps) -> float:
    """The original's formatting checks: a formatted value (currency, percent or thousands separator), a
    trend, a non-empty description."""
    value = props.value
    formatted = any(c in value for c in (*CURRENCY, "%")) or (
        "," in value and any(c.isdigit() for c in value)
    )
    return (formatted + (props.trend is not None) + bool(props.description)) / 3


def _words(text: str) -> list[str]:
    return re.findall(r"[a-z0-9]+", text.lower())


def names_metric(title: str, metric: str) -> bool:
    """Whether ``title`` holds every word of ``metric`` (a trailing ``s`` aside) and at most four others."""
    title_words = [w.rstrip("s") for w in _words(title)]
    metric_words = [w.rstrip("s") for w in _words(metric)]
    return all(w in title_words for w in metric_words) and len(title_words) <= len(metric_words) + 4


def value_fits(value: str, metric: str) -> bool:
    """Whether the value has digits and the unit ``metric`` calls for."""
    if not any(c.isdigit() for c in value):
        return False
    lowered = metric.lower()
    if any(word in lowered for word in PERCENT_WORDS):
        return "%" in value
    if any(word in _words(lowered) for word in MONEY_WORDS):
        return any(c in value for c in CURRENCY)
    return True


def content_share(props: MetricCardProps, request: MetricPrompt) -> float:
    """The share of the content checks the card passes (see the module docstring)."""
    description = props.description or ""
    checks = (
        names_metric(props.title, request.metric_type),
        value_fits(props.value, request.metric_type),
        request.time_period.lower() in description.lower() and len(description) <= 160,
        props.icon in ICONS,
    )
    return sum(checks) / len(checks)


@dataclass(frozen=True)
class CardScore:
    """A reply's ``score``, whether its card passed the schema (``valid``) and why not (``error``)."""

    score: float
    valid: bool
    error: Optional[str] = None


def score_card(reply: str, request: MetricPrompt) -> CardScore:
    """The reward of a reply to ``request`` (see the module docstring)."""
    card, error = parse_card(card_text(reply))
    if card is None:
        return CardScore(0.0, False, error)
    props = card.props
    return CardScore(0.5 + 0.25 * formatting_share(props) + 0.25 * content_share(props, request), True)


def prompt_from_row(row: dict[str, Any]) -> MetricPrompt:
    """A request from a local row (``prompt``, ``domain``, ``metric_type``, ``time_period``)."""
    return MetricPrompt(*(str(row[k]).strip() for k in ("prompt", "domain", "metric_type", "time_period")))
