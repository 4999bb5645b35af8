"""Rewards that need a model or an optional package: cosinescaled (embeddings) and chandasmeter."""

from __future__ import annotations

import logging
import math
import sys
from types import SimpleNamespace

import numpy as np
import pytest

from atroposlib.envs.reward_fns import registry
from atroposlib.envs.reward_fns.chandas_meter_reward import ChandasMeterReward, iast_to_slp1
from atroposlib.envs.reward_fns.cosine_scaled_reward import (
    DEFAULT_EMBEDDING_MODEL,
    CosineScaledReward,
    cosine_distance,
)

VECTORS = {
    "reference": np.array([1.0, 0.0, 0.0]),
    "same": np.array([2.0, 0.0, 0.0]),
    "orthogonal": np.array([0.0, 3.0, 0.0]),
    "opposite": np.array([-1.0, 0.0, 0.0]),
    "diagonal": np.array([1.0, 1.0, 0.0]),
    "zero": np.array([0.0, 0.0, 0.0]),
}


def embed(text: str):
    if text == "broken":
        raise RuntimeError("encoder failed")
    return VECTORS.get(text)


def test_cosine_distance():
    assert cosine_distance(VECTORS["reference"], VECTORS["same"]) == pytest.approx(0.0)
    assert cosine_distance(VECTORS["reference"], VECTORS["opposite"]) == pytest.approx(2.0)
    assert cosine_distance(VECTORS["reference"], VECTORS["diagonal"]) == pytest.approx(1 - 1 / math.sqrt(2))
    with pytest.raises(ValueError, match="zero vector"):
        cosine_distance(VECTORS["reference"], VECTORS["zero"])
    with pytest.raises(ValueError, match="shapes differ"):
        cosine_distance(np.ones(2), np.ones(3))


def test_similarity_math_with_an_injected_embedding():
    reward = CosineScaledReward(embed_fn=embed)
    completions = ["same", "orthogonal", "opposite", "diagonal", "zero", "broken", "unknown"]
    assert reward.compute(completions, solution="reference") == pytest.approx(
        [1.0, 0.0, -1.0, 1 / math.sqrt(2), 0.0, 0.0, 0.0]
    )
    scaled = CosineScaledReward(
        embed_fn=embed, scale_factor=0.5, min_reward=0.2, max_reward=0.9, default_reward=-5
    )
    assert scaled.compute(["same", "orthogonal", "opposite", "zero"], solution="reference") == pytest.approx(
        [0.9, 0.5, 0.2, -5.0]
    )
    assert scaled.compute(["same"], solution=None) == [-5.0]
    assert scaled.compute(["same"], solution="broken") == [-5.0]
    assert reward.compute(
        [{"role": "assistant", "content": "same"}], solution={"role": "assistant", "content": "reference"}
    ) == [1.0]


def test_unloadable_model_degrades_to_default_reward(caplog):
    with caplog.at_level(logging.WARNING):
        reward = CosineScaledReward(model_name="/nonexistent/embedding-model", default_reward=0.25)
    assert reward.available is False
    assert "cannot load embedding model '/nonexistent/embedding-model'" in caplog.text
    assert reward.compute(["anything", "else"], solution="reference") == [0.25, 0.25]
    assert reward(["x"], solution="y") == [0.25]


def test_default_model_name_keeps_the_real_hub_path(caplog):
    # No hub is reachable here (HF_HUB_OFFLINE=1): the real loading path is taken and fails cleanly.
    with caplog.at_level(logging.WARNING):
        reward = registry.create("cosinescaled")
    assert reward.model_name == DEFAULT_EMBEDDING_MODEL
    assert reward.compute(["a"], solution="b") == [0.0]


def test_real_embedding_model_loaded_from_a_local_directory(tiny_model_dir):
    # The same loading code users get for sentence-transformers models, on the tiny local model.
    reward = CosineScaledReward(model_name=str(tiny_model_dir))
    assert reward.available
    text = "the sum of two apples and three apples is five apples"
    scores = reward.compute([text, "dog", "moon water fire tree"], solution=text)
    assert scores[0] == pytest.approx(1.0, abs=1e-5)
    assert all(-1.0 <= s <= 1.0 for s in scores)
    assert scores[1] < scores[0] and scores[2] < scores[0]
    again = CosineScaledReward(model_name=str(tiny_model_dir))
    assert again._embed is reward._embed  # loaded once per process


# -- chandasmeter --------------------------------------------------------------------------------------


def test_iast_to_slp1():
    assert iast_to_slp1("dharmakṣetre kurukṣetre") == "Darmakzetre kurukzetre"
    assert iast_to_slp1("śrī rāmaḥ") == "SrI rAmaH"
    assert iast_to_slp1("bhaktiṃ jñāna ṛṣi kaiśa gauḍa") == "BaktiM jYAna fzi kESa gOqa"


def test_chandas_missing_package_scores_zero(monkeypatch, caplog):
    monkeypatch.setitem(sys.modules, "chandas", None)  # import chandas -> ImportError, installed or not
    with caplog.at_level(logging.WARNING):
        reward = registry.create("chandasmeter")
    assert reward.classifier is None
    assert "'chandas' package is not installed" in caplog.text
    assert reward.compute(["dharmakṣetre kurukṣetre"]) == [0.0]
    assert reward(["x"]) == [0.0]


class ScriptedClassifier:
    def __init__(self, results):
        self.results = results
        self.seen: list[str] = []

    def classify(self, text):
        self.seen.append(text)
        return self.results.get(text)


def test_chandas_scores_from_the_classifier():
    classifier = ScriptedClassifier(
        {
            "Darma": SimpleNamespace(name="Tristubh", score=0.8),
            "kzetre": SimpleNamespace(name="anustubh", score=0.7),
            "rAma": SimpleNamespace(name="tristubh"),
            "sItA": "anustubh",
            "big": SimpleNamespace(name="tristubh", score=3.0),
            "vana": SimpleNamespace(name="jagati", score=1.5),
        }
    )
    reward = ChandasMeterReward(meter="tristubh", classifier=classifier)
    assert reward.compute(["dharma", "kṣetre", "rāma", "sītā", "big", "vana", "nothing"]) == pytest.approx(
        [0.8, 0.3, 1.0, 0.0, 1.0, 0.0, 0.0]
    )
    assert classifier.seen[:2] == ["Darma", "kzetre"]
