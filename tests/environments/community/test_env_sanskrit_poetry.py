"""Sanskrit poetry: syllable weights, metre scores, the prompt, ``process`` and ``evaluate``."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from environments.community.sanskrit_poetry.chandas_meter import (
    meter_named,
    meter_score,
    verse_lines,
    weights,
)
from environments.community.sanskrit_poetry.sanskrit_poetry_env import (
    SanskritPoetryEnv,
    SanskritPoetryEnvConfig,
)
from tests.environments.community.community_runs import always, env_flags
from tests.helpers.single_turn_runs import check_groups, offline_env

GITA = "dharmakṣetre kurukṣetre\nsamavetā yuyutsavaḥ\nmāmakāḥ pāṇḍavāś caiva\nkim akurvata sañjaya"
KUMARA = (
    "asty uttarasyāṃ diśi devatātmā\nhimālayo nāma nagādhirājaḥ\n"
    "pūrvāparau toyanidhī vagāhya\nsthitaḥ pṛthivyā iva mānadaṇḍaḥ"
)


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        ("dharmakṣetre kurukṣetre", "GGGGLGGG"),  # conjuncts make the syllable before them heavy
        ("samavetā yuyutsavaḥ", "LLGGLGLG"),  # visarga
        ("kim akurvata sañjaya", "LLGLLGLL"),  # a final consonant before a vowel is one consonant
        ("asty uttarasyāṃ diśi devatātmā", "GGLGGLLGLGG"),  # anusvāra, across word boundaries
        ("bhava", "LL"),  # an aspirate is one consonant
        ("", ""),
    ],
)
def test_weights(line, expected):
    assert weights(line) == expected


@pytest.mark.parametrize(
    ("verse", "meter", "score"),
    [
        (GITA, "anuṣṭubh", 1.0),  # the Bhagavad Gītā's first śloka
        (KUMARA, "tristubh", 1.0),  # Kumārasambhava 1.1, upajāti
        (KUMARA.replace("\n", " |\n") + " ||1||", "triṣṭubh", 1.0),  # daṇḍas and the verse number
        (KUMARA, "anustubh", 0.0),  # every pāda has the wrong length
        (KUMARA, "indravajra", 0.95),  # two pādas open light: 9 of 10 fixed syllables
        ("\n".join(KUMARA.splitlines()[:2]), "tristubh", 0.5),  # half a verse
        (KUMARA + "\n" + KUMARA, "tristubh", 0.5),  # twice as many lines as pādas
        ("tat tvam asi", "tristubh", 0.0),
        ("", "tristubh", 0.0),
    ],
)
def test_meter_scores(verse, meter, score):
    assert meter_score(verse, meter_named(meter)) == pytest.approx(score, abs=0.03)


def test_lines_and_meters():
    assert verse_lines("1. abc |\n\n॥ 2 ॥\n def") == ["abc", "def"]
    assert len(meter_named("gāyatrī").padas) == 3
    with pytest.raises(ValidationError, match="unknown metre 'hexameter'"):
        SanskritPoetryEnvConfig(meter="hexameter")


def test_prompt_and_reasoning(tiny_model_dir):
    env = offline_env(SanskritPoetryEnv, tiny_model_dir, meter="anustubh")
    messages = env.prompt_messages("anustubh")
    assert messages[0]["content"].startswith("You are a Sanskrit poet")
    assert "4-line Sanskrit poem in the anustubh meter" in messages[1]["content"]
    assert env.score_reply(f"<think>ślokas have eight syllables</think>\n{GITA}", "anustubh") == 1.0
    assert env.score_reply(f"<think>{GITA}", "anustubh") == 0.0  # reasoning never closed
    assert (
        offline_env(SanskritPoetryEnv, tiny_model_dir, system_prompt=None).prompt_messages("tristubh")[0][
            "role"
        ]
        == "user"
    )
    config, server = SanskritPoetryEnv.config_init()
    assert (server.server_type, server.base_url, server.model_name) == (
        "trl",
        "http://localhost:9001",
        "Qwen/Qwen3-1.7B",
    )
    assert (config.temperature, config.top_p, config.max_tokens, config.meter) == (0.7, 0.9, 256, "tristubh")


def _poet(prompt, index):
    """A real triṣṭubh verse for even choices, the Gītā's śloka (the wrong metre) for odd ones."""
    return KUMARA if index % 2 == 0 else GITA


def test_process_scores_the_meter(scripted):
    groups = scripted.process(
        SanskritPoetryEnv, env_flags(group_size=2, total_steps=2, max_tokens=128), _poet
    )
    check_groups(groups, 2, [0.0, 1.0])


def test_evaluate_counts_perfect_verses(scripted):
    evaluation = scripted.evaluation(
        SanskritPoetryEnv, env_flags(meter="anustubh", eval_size=4, max_tokens=128), always(GITA)
    )
    assert evaluation.metrics["eval/percent_correct"] == 1.0 and evaluation.metrics["eval/mean_score"] == 1.0
    assert [s["meter"] for s in evaluation.samples] == ["anustubh"] * 4
