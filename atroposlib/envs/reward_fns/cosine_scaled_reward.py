"""``cosinescaled``: semantic similarity of a completion to the reference solution (sentence embeddings)."""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from typing import Any

import numpy as np

from .registry import registry
from .reward_function import RewardFunction

logger = logging.getLogger(__name__)

DEFAULT_EMBEDDING_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
EmbedFn = Callable[[str], "np.ndarray | None"]


class _EmbeddingModel:
    """A Hugging Face encoder with attention-masked mean pooling (the sentence-transformers recipe)."""

    def __init__(self, model_name: str):
        import torch
        from transformers import AutoModel, AutoTokenizer

        self._torch = torch
        self.tokenizer = AutoTokenizer.from_pretrained(model_name)
        self.model = AutoModel.from_pretrained(model_name)
        self.model.eval()

    def __call__(self, text: str) -> np.ndarray:
        torch = self._torch
        encoded = self.tokenizer(text, padding=True, truncation=True, return_tensors="pt")
        with torch.no_grad():
            output = self.model(**encoded)
        hidden = output[0]
        mask = encoded["attention_mask"].unsqueeze(-1).to(hidden.dtype)
        pooled = (hidden * mask).sum(1) / mask.sum(1).clamp(min=1e-9)
        return pooled[0].float().numpy()


def cosine_distance(a: np.ndarray, b: np.ndarray) -> float:
    """``1 - cos(a, b)`` in [0, 2]. Raises ValueError for a zero vector (the angle is undefined)."""
    a = np.asarray(a, dtype=np.float64).ravel()
    b = np.asarray(b, dtype=np.float64).ravel()
    if a.shape != b.shape:
        raise ValueError(f"embedding shapes differ: {a.shape} vs {b.shape}")
    norm = float(np.linalg.norm(a) * np.linalg.norm(b))
    if norm == 0.0:
        raise ValueError("cosine distance of a zero vector is undefined")
    return 1.0 - float(np.dot(a, b)) / norm


@registry.register
class CosineScaledReward(RewardFunction):
    """``clamp(1 - cosine_distance(embed(solution), embed(completion)) * scale_factor, min_reward,
    max_reward)``.

    Embeddings come from ``model_name`` (default ``sentence-transformers/all-MiniLM-L6-v2``, loaded once per
    process with ``transformers`` and mean-pooled), or from ``embed_fn(text) -> vector`` when given. When
    the model cannot be loaded (no torch, no network, unknown name) a warning is logged and every
    completion scores ``default_reward``; so does a completion without a solution or whose embedding fails.
    """

    _models: dict[str, _EmbeddingModel | None] = {}
    _lock = threading.Lock()
    _model_name = DEFAULT_EMBEDDING_MODEL

    def __init__(
        self,
        model_name: str | None = None,
        scale_factor: float = 1.0,
        min_reward: float = -1.0,
        max_reward: float = 1.0,
        default_reward: float = 0.0,
        weight: float = 1.0,
        embed_fn: EmbedFn | None = None,
        **kwargs: Any,
    ):
        super().__init__(weight=weight, **kwargs)
        self.model_name = model_name or self._model_name
        self.scale_factor = scale_factor
        self.min_reward = min_reward
        self.max_reward = max_reward
        self.default_reward = default_reward
        self._embed: EmbedFn | None = embed_fn if embed_fn is not None else self._load_model(self.model_name)

    @classmethod
    def _load_model(cls, model_name: str) -> _EmbeddingModel | None:
        with cls._lock:
            if model_name not in cls._models:
                try:
                    cls._models[model_name] = _EmbeddingModel(model_name)
                    logger.info("cosinescaled: loaded embedding model %s", model_name)
                except Exception as exc:
                    # Remembered as unavailable so that every instance does not retry a slow failing load.
                    cls._models[model_name] = None
                    logger.warning(
                        "cosinescaled: cannot load embedding model %r (%s); every completion will score "
                        "default_reward",
                        model_name,
                        exc,
                    )
            return cls._models[model_name]

    @property
    def available(self) -> bool:
        """Whether embeddings can be computed."""
        return self._embed is not None

    def _embedding(self, text: str) -> np.ndarray | None:
        if self._embed is None:
            return None
        try:
            vector = self._embed(text)
            return None if vector is None else np.asarray(vector)
        except Exception as exc:
            logger.warning("cosinescaled: embedding failed: %s", exc)
            return None

    def similarity_reward(self, solution_vec: np.ndarray, completion_vec: np.ndarray) -> float:
        """The clamped, scaled reward for two embeddings."""
        scaled = 1.0 - cosine_distance(solution_vec, completion_vec) * self.scale_factor
        return min(self.max_reward, max(self.min_reward, scaled))

    def compute(self, completions: list[Any], solution: Any = None, **kwargs: Any) -> list[float]:
        if not solution:
            logger.warning("cosinescaled: no solution given; scoring default_reward")
            return [self.default_reward] * len(completions)
        if self._embed is None:
            return [self.default_reward] * len(completions)
        solution_text = solution if isinstance(solution, str) else self.get_content(solution)
        solution_vec = self._embedding(solution_text)
        if solution_vec is None:
            return [self.default_reward] * len(completions)
        rewards = []
        for completion in completions:
            vec = self._embedding(self.get_content(completion))
            try:
                rewards.append(
                    self.default_reward if vec is None else self.similarity_reward(solution_vec, vec)
                )
            except ValueError as exc:
                logger.warning("cosinescaled: %s; scoring default_reward", exc)
                rewards.append(self.default_reward)
        return rewards


def cosine_scaled_reward(completions: list[Any], solution: Any = None, **kwargs: Any) -> list[float]:
    """Plain-function form of :class:`CosineScaledReward` with the default model."""
    return CosineScaledReward().compute(completions, solution=solution, **kwargs)
