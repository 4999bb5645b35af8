"""``repetitionpenalty``: a penalty in [-1, 0] for repetitive text."""

from __future__ import annotations

import logging
import re
from collections import Counter
from typing import Any

from .registry import registry
from .reward_function import RewardFunction

logger = logging.getLogger(__name__)

DEFAULT_COMPONENT_WEIGHTS = {
    "word_repetition": 0.3,
    "phrase_repetition": 0.4,
    "consecutive_repetition": 0.6,
    "beginning_repetition": 0.5,
}
DEFAULT_STOPWORDS = frozenset(
    "this that with from what when where which who whom whose will shall should would could have has had "
    "been being than then there these those their".split()
)
ERROR_PENALTY = -0.2
MIN_PENALTY_WHEN_REPETITIVE = -0.1


@registry.register
class RepetitionPenaltyReward(RewardFunction):
    """Penalise repetition.

    * fewer than ``min_words`` words or ``min_sentences`` sentences: ``short_text_penalty``;
    * a substantial sentence (more than 3 words) repeated: ``paragraph_repetition_base_penalty - 0.4 *
      min(1, repeats / sentences)``;
    * otherwise a weighted score ``s`` of word repetition (content words seen more than twice), 3-5-gram
      repetition, consecutive duplicate words and repeated sentence openings; 0 when ``s <= threshold``,
      else ``-min(1, (s - threshold) / (1 - threshold))`` but at least -0.1;
    * an error while scoring: -0.2.
    """

    def __init__(
        self,
        threshold: float = 0.05,
        min_words: int = 10,
        min_sentences: int = 2,
        short_text_penalty: float = -0.1,
        paragraph_repetition_base_penalty: float = -0.6,
        component_weights: dict[str, float] | None = None,
        stopwords: set[str] | None = None,
        weight: float = 1.0,
        **kwargs: Any,
    ):
        super().__init__(weight=weight, **kwargs)
        self.threshold = threshold
        self.min_words = min_words
        self.min_sentences = min_sentences
        self.short_text_penalty = short_text_penalty
        self.paragraph_repetition_base_penalty = paragraph_repetition_base_penalty
        self.component_weights = {**DEFAULT_COMPONENT_WEIGHTS, **(component_weights or {})}
        self.stopwords = set(stopwords) if stopwords else set(DEFAULT_STOPWORDS)

    def repetition_components(self, words: list[str], sentences: list[str]) -> dict[str, float]:
        """The four repetition rates (per word or per sentence) of a text."""
        counts = Counter(words)
        repeated_words = sum(
            c - 1 for w, c in counts.items() if c > 2 and len(w) > 3 and w not in self.stopwords
        )
        phrase = 0.0
        for n in (3, 4, 5):
            if len(words) >= max(n, 5):
                grams = Counter(" ".join(words[i : i + n]) for i in range(len(words) - n + 1))
                phrase += sum(c - 1 for c in grams.values() if c > 1) * (n / 3)
        stutter = sum(1 for a, b in zip(words, words[1:], strict=False) if a == b and len(b) > 2)
        openings = Counter(" ".join(s.split()[:3]) for s in sentences if len(s.split()) >= 3)
        repeated_openings = sum(c - 1 for c in openings.values() if c > 1)
        n_words = len(words) or 1
        return {
            "word_repetition": repeated_words / n_words,
            "phrase_repetition": phrase / n_words,
            "consecutive_repetition": stutter / n_words,
            "beginning_repetition": repeated_openings / (len(sentences) or 1),
        }

    def score_text(self, content: str) -> float:
        words = re.findall(r"\b\w+\b", content.lower())
        sentences = [s.strip() for s in re.split(r"[.!?]", content) if s.strip()]
        if len(words) < self.min_words or len(sentences) < self.min_sentences:
            return self.short_text_penalty

        sentence_counts = Counter(sentences)
        repeated_sentences = sum(c - 1 for s, c in sentence_counts.items() if c > 1 and len(s.split()) > 3)
        if repeated_sentences > 0:
            fraction = min(1.0, repeated_sentences / len(sentences))
            return self.paragraph_repetition_base_penalty - fraction * 0.4

        rates = self.repetition_components(words, sentences)
        score = sum(rates[k] * self.component_weights.get(k, DEFAULT_COMPONENT_WEIGHTS[k]) for k in rates)
        if score <= self.threshold:
            penalty = 0.0
        else:
            penalty = -min(1.0, (score - self.threshold) / max(1 - self.threshold, 1e-9))
            penalty = min(penalty, MIN_PENALTY_WHEN_REPETITIVE)
        logger.debug(
            "repetition: word=%.3f phrase=%.3f consecutive=%.3f openings=%.3f score=%.3f penalty=%.3f",
            rates["word_repetition"],
            rates["phrase_repetition"],
            rates["consecutive_repetition"],
            rates["beginning_repetition"],
            score,
            penalty,
        )
        return penalty

    def compute(self, completions: list[Any], **kwargs: Any) -> list[float]:
        rewards = []
        for completion in completions:
            try:
                rewards.append(self.score_text(self.get_content(completion)))
            except Exception as exc:
                logger.error("repetition penalty failed on a completion: %s", exc, exc_info=True)
                rewards.append(ERROR_PENALTY)
        return rewards


def repetition_penalty_reward(completions: list[Any], threshold: float = 0.05, **kwargs: Any) -> list[float]:
    """Plain-function form of :class:`RepetitionPenaltyReward`."""
    return RepetitionPenaltyReward(threshold=threshold).compute(completions, **kwargs)
