"""``chandasmeter``: confidence that a verse (IAST) is in a target Sanskrit meter (needs ``chandas``)."""

from __future__ import annotations

import logging
import re
from typing import Any

from .registry import registry
from .reward_function import RewardFunction

logger = logging.getLogger(__name__)

# IAST -> SLP1; aspirated and diphthong digraphs first so that "kh" is not read as "k" + "h".
IAST_TO_SLP1: list[tuple[str, str]] = [
    ("kh", "K"), ("gh", "G"), ("ch", "C"), ("jh", "J"), ("ṭh", "W"), ("ḍh", "Q"), ("th", "T"), ("dh", "D"),
    ("ph", "P"), ("bh", "B"), ("ai", "E"), ("au", "O"),
    ("ā", "A"), ("ī", "I"), ("ū", "U"), ("ṛ", "f"), ("ṝ", "F"), ("ḷ", "x"), ("ḹ", "X"), ("ṅ", "N"), ("ñ", "Y"),
    ("ṭ", "w"), ("ḍ", "q"), ("ṇ", "R"), ("ś", "S"), ("ṣ", "z"), ("ṃ", "M"), ("ṁ", "M"), ("ḥ", "H"),
]  # fmt: skip
_IAST_MAP = dict(IAST_TO_SLP1)
_IAST_RE = re.compile("|".join(re.escape(k) for k, _ in IAST_TO_SLP1))


def iast_to_slp1(text: str) -> str:
    """Transliterate IAST to SLP1 (plain ASCII letters map to themselves)."""
    return _IAST_RE.sub(lambda m: _IAST_MAP[m.group(0)], text)


def _load_classifier() -> Any | None:
    try:
        from chandas import Classifier  # type: ignore[import-not-found]
    except ImportError:
        logger.warning("chandasmeter: the 'chandas' package is not installed; every completion scores 0.0")
        return None
    try:
        from importlib.resources import files

        data = files("chandas") / "data" / "data.json"
        if data.is_file():
            return Classifier.from_json_file(str(data))
        return Classifier.from_default_location()
    except Exception as exc:
        logger.warning(
            "chandasmeter: cannot load the chandas classifier (%s); every completion scores 0.0", exc
        )
        return None


@registry.register
class ChandasMeterReward(RewardFunction):
    """Score in [0, 1] that a completion (IAST, converted to SLP1) is in ``meter``.

    The classifier's confidence (1.0 when it gives none) is used when it predicts the target meter,
    ``1 - confidence`` when it predicts another one; the result is clamped to [0, 1]. Without the ``chandas`` package (or with a failing classifier) every
    completion scores 0.0. ``classifier`` may be passed to use another object with ``classify(text)``.
    """

    def __init__(self, meter: str = "tristubh", weight: float = 1.0, classifier: Any = None, **kwargs: Any):
        super().__init__(weight=weight, **kwargs)
        self.meter = meter
        self.classifier = classifier if classifier is not None else _load_classifier()

    def score_text(self, text: str) -> float:
        if not self.classifier:
            return 0.0
        try:
            result = self.classifier.classify(iast_to_slp1(text))
            if not result:
                return 0.0
            predicted = str(getattr(result, "name", result)).lower()
            target = self.meter.lower()
            # Without a score the classifier is taken as certain of its prediction.
            confidence = float(getattr(result, "score", 1.0))
            score = confidence if predicted == target else 1.0 - confidence
            return max(0.0, min(1.0, score))
        except Exception as exc:
            logger.error("chandasmeter: classification failed: %s", exc)
            return 0.0

    def compute(self, completions: list[Any], **kwargs: Any) -> list[float]:
        return [self.score_text(self.get_content(c)) for c in completions]


def chandas_meter_reward(completions: list[Any], meter: str = "tristubh", **kwargs: Any) -> list[float]:
    """Plain-function form of :class:`ChandasMeterReward`."""
    return ChandasMeterReward(meter=meter).compute(completions, **kwargs)
