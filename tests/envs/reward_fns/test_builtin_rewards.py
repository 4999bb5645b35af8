"""The built-in reward functions: scores on crafted completions (math checked by the real math_verify)."""

from __future__ import annotations

import logging

import pytest

from atroposlib.envs.reward_fns import CombinedReward, RewardFunction, registry
from atroposlib.envs.reward_fns.accuracy_reward import AccuracyReward, accuracy_reward
from atroposlib.envs.reward_fns.cascading_r1_math_reward import (
    cascading_r1_math_reward,
    get_completion_content,
)
from atroposlib.envs.reward_fns.crossword_format_reward import CrosswordFormatReward, crossword_format_reward
from atroposlib.envs.reward_fns.format_reward import FormatReward, format_reward
from atroposlib.envs.reward_fns.r1_reward import (
    AccuracyXReward,
    FormatReasoningReward,
    R1Reward,
    format_reasoning_reward,
    parse_reasoning_response,
    r1_reward,
)
from atroposlib.envs.reward_fns.r1_reward import accuracy_reward as accuracyx_reward
from atroposlib.envs.reward_fns.reasoning_steps_reward import ReasoningStepsReward, reasoning_steps_reward
from atroposlib.envs.reward_fns.repetition_penalty_reward import (
    RepetitionPenaltyReward,
    repetition_penalty_reward,
)

GSM8K_GOLD = "Natalia sold 48/2 = <<48/2=24>>24 clips in May.\nAltogether she sold 48+24 = <<48+24=72>>72 clips.\n#### 72"

# -- accuracy ------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("completion", "gold", "expected"),
    [
        ("<think>48 + 24</think> The answer is \\boxed{72}.", GSM8K_GOLD, 1.0),
        ("<think>hmm</think> \\boxed{71}", GSM8K_GOLD, 0.0),
        ("So \\boxed{\\frac{1}{2}}", "0.5", 1.0),
        ("So \\boxed{0.5}", "\\frac{1}{2}", 1.0),
        ("\\boxed{x = 42}", 42, 1.0),
        ("\\boxed{1,234}", "1234", 1.0),
        ("Final: #### 18", "18", 1.0),
        ("no answer here", "5", 0.0),
        ("<think>\\boxed{3}</think> \\boxed{4}", "3", 0.0),  # only the part after </think> counts
        ("<think>\\boxed{3}</think> \\boxed{4}", "4", 1.0),
        ({"role": "assistant", "content": "\\boxed{9}"}, 9, 1.0),
        ("\\boxed{2\\sqrt{2}}", "\\sqrt{8}", 1.0),
    ],
)
def test_accuracy(completion, gold, expected):
    assert AccuracyReward().compute([completion], solution=gold) == [expected]


def test_accuracy_gold_forms_and_limits(caplog):
    reward = AccuracyReward()
    assert reward.compute(["\\boxed{1}", "\\boxed{2}"], solution=["1", "3"]) == [1.0, 0.0]
    assert reward.compute(["\\boxed{1}"], solution="9", ground_truth="1") == [1.0]  # ground_truth wins
    assert reward.compute(["\\boxed{1}", "\\boxed{1}"]) == [0.0, 0.0]
    assert "no solution or ground_truth" in caplog.text
    sprayed = "<think>x</think> " + " ".join(f"\\boxed{{{i}}}" for i in range(7))
    assert reward.compute([sprayed], solution="0") == [0.0]
    assert AccuracyReward(max_boxed_threshold=10).compute([sprayed], solution="0") == [1.0]
    assert reward.compute(["\\boxed{1}", "\\boxed{1}"], solution=["1"]) == [1.0, 0.0]  # short gold list
    assert AccuracyReward(split_on_think_tag=False).compute(["<think>\\boxed{3}</think>"], solution="3") == [
        1.0
    ]
    assert accuracy_reward(["\\boxed{72}"], solution=GSM8K_GOLD) == [1.0]
    assert registry.create("accuracy", weight=2.0)(["\\boxed{72}"], solution="72") == [2.0]


# -- r1 family -----------------------------------------------------------------------------------------


def test_parse_reasoning_response():
    assert parse_reasoning_response("<think> plan </think>  answer ") == {
        "thinking_content": "plan",
        "response": "answer",
        "multiple_thinking": False,
    }
    assert parse_reasoning_response("<think>a</think><think>b</think>x")["multiple_thinking"] is True
    assert parse_reasoning_response("just text")["response"] == "just text"
    assert parse_reasoning_response(None)["response"] == "None"


def test_format_reasoning():
    reward = FormatReasoningReward()
    texts = [
        "<think>plan</think> answer",
        "<think></think> answer",
        "<think>plan</think>",
        "no think",
        "<think>a</think><think>b</think> c",
    ]
    assert reward.compute(texts) == [0.5, 0.0, 0.0, 0.0, 0.0]
    assert FormatReasoningReward(require_thinking=False, reward_value=1.0).compute(texts[:2]) == [1.0, 1.0]
    assert FormatReasoningReward(allow_multiple_thinking=True, require_response=False).compute(
        [texts[4]]
    ) == [0.0]
    assert format_reasoning_reward(texts[:1]) == [0.5]


def test_accuracyx():
    reward = AccuracyXReward()
    texts = ["<think>Paris?</think> It is PARIS.", "<think>x</think> London", "Paris"]
    assert reward.compute(texts, solution="paris") == [1.0, 0.0, 1.0]
    assert AccuracyXReward(case_sensitive=True).compute(texts, solution="paris") == [0.0, 0.0, 0.0]
    assert AccuracyXReward(exact_match=True).compute(texts, solution="paris") == [0.0, 0.0, 1.0]
    assert reward.compute(texts[:2], solution=["paris", "london"]) == [1.0, 1.0]
    assert reward.compute(texts) == [0.0, 0.0, 0.0]
    assert accuracyx_reward(["<think>t</think> 42"], solution="42") == [1.0]


def test_r1_combines_format_and_accuracy():
    texts = ["<think>plan</think> the answer is 42", "the answer is 42", "<think>plan</think> 7"]
    assert R1Reward().compute(texts, solution="42") == [1.5, 1.0, 0.5]
    assert R1Reward(format_weight=1.0, accuracy_weight=2.0).compute(texts, solution="42") == [3.0, 2.0, 1.0]
    assert r1_reward(texts, solution="42") == [1.5, 1.0, 0.5]
    assert isinstance(registry.create("r1"), R1Reward)


# -- format --------------------------------------------------------------------------------------------


def test_format():
    texts = [
        "<think>a</think>",
        "<ANSWER>x</ANSWER>",
        "<think>a</think><answer>b</answer>",
        "none",
        "<think>open",
    ]
    assert FormatReward().compute(texts) == [1.0, 1.0, 1.0, 0.0, 0.0]
    assert FormatReward(require_all_tags=True).compute(texts) == [0.0, 0.0, 1.0, 0.0, 0.0]
    assert FormatReward(case_sensitive=True).compute(texts) == [1.0, 0.0, 1.0, 0.0, 0.0]
    assert format_reward(["<calc>1</calc>"], preferred_tags=["calc"]) == [1.0]
    assert FormatReward().compute(["<think>multi\nline</think>"]) == [1.0]


# -- reasoning steps -----------------------------------------------------------------------------------


def test_reasoning_steps():
    reward = ReasoningStepsReward()
    structured = "Step 1: add.\nStep 2: carry.\nStep 3: done.\n1. first\n2. second\n3. third\n- a\n- b\n- c\nFirst, Then, Finally"
    assert reward.compute([structured]) == [1.0]
    assert reward.compute(["42"]) == [0.0]
    two_steps = "Step 1: add the numbers. Step 2: report it."
    # 2/3 of numbered_steps (0.5); "report" etc. match nothing else; 8 words <= 10: no base score
    assert reward.compute([two_steps])[0] == pytest.approx(2 / 3 * 0.5)
    words = "word " * 11
    assert reward.compute([words]) == [pytest.approx(0.1)]
    custom = ReasoningStepsReward(pattern_weights={"numbered_steps": 0.9}, min_steps=1)
    assert custom.compute(["Step 1: go"]) == [pytest.approx(0.9)]
    assert reasoning_steps_reward([structured]) == [1.0]


# -- repetition penalty --------------------------------------------------------------------------------


def test_repetition_penalty():
    reward = RepetitionPenaltyReward()
    assert reward.compute(["too short."]) == [-0.1]
    varied = (
        "The quick brown fox jumps over a lazy dog. A bright morning sun rises above distant hills. "
        "Several children play football near the river bank."
    )
    assert reward.compute([varied]) == [0.0]
    repeated_sentence = (
        "The cat sat on the mat today. The cat sat on the mat today. Birds fly south in winter time."
    )
    # 1 repeated sentence of 3: -0.6 - 0.4 / 3
    assert reward.compute([repeated_sentence]) == [pytest.approx(-0.6 - 0.4 / 3)]
    stutter = (
        "we we we we need need need need more more more more time time time time now. " + "ok then fine. "
    )
    # 20 words: need/more/time seen 4x (9 extra, 0.45), four repeated 3-grams (0.2), 9 stutters (0.45)
    words = stutter.lower().replace(".", "").split()
    sentences = [
        "we we we we need need need need more more more more time time time time now",
        "ok then fine",
    ]
    assert reward.repetition_components(words, sentences) == pytest.approx(
        {
            "word_repetition": 0.45,
            "phrase_repetition": 0.2,
            "consecutive_repetition": 0.45,
            "beginning_repetition": 0.0,
        }
    )
    score = 0.45 * 0.3 + 0.2 * 0.4 + 0.45 * 0.6
    assert reward.compute([stutter]) == [pytest.approx(-(score - 0.05) / 0.95)]
    assert RepetitionPenaltyReward(threshold=0.99).compute([stutter]) == [0.0]
    # barely above the threshold still costs at least 0.1
    assert RepetitionPenaltyReward(threshold=score - 0.01).compute([stutter]) == [-0.1]
    assert repetition_penalty_reward([varied]) == [0.0]


def test_repetition_penalty_logs_without_formatting_errors(caplog):
    text = "alpha beta gamma delta alpha beta gamma delta alpha beta gamma delta. second sentence here ok."
    with caplog.at_level(logging.DEBUG, logger="atroposlib.envs.reward_fns.repetition_penalty_reward"):
        RepetitionPenaltyReward().compute([text])
    assert any("repetition: word=" in r.getMessage() for r in caplog.records)


# -- crossword -----------------------------------------------------------------------------------------


def test_crossword_format():
    reward = CrosswordFormatReward()
    assert reward.compute(["1-Across: CAT\n2-Down: DOG"]) == [1.0]
    assert reward.compute(["1-across: cat, 2-down: dog"]) == [1.0]
    assert reward.compute(["The answer is cat"]) == [0.0]
    assert reward.compute(["1-Across: CAT5"]) == [0.0]
    assert reward.compute(["1-Across: CAFÉ"]) == [0.0]
    assert CrosswordFormatReward(penalize_invalid_chars=False).compute(["1-Across: CAT5"]) == [1.0]
    assert CrosswordFormatReward(valid_chars="ACT").compute(["1-Across: CAT", "2-Down: DOG"]) == [1.0, 0.0]
    assert crossword_format_reward(["3-Down: TREE"]) == [1.0]


# -- cascading r1 math ---------------------------------------------------------------------------------


def test_cascading_r1_math():
    texts = [
        "<think>work</think> \\boxed{5}",
        "<think>work</think> \\boxed{6}",
        "no think \\boxed{5}",
        "<think>a<b</think> \\boxed{5}",
    ]
    assert cascading_r1_math_reward(texts, solution="5") == [1.5, 0.0, 1.0, 1.0]
    lazy = registry.create("cascading_r1_math")
    assert lazy(texts[:1], solution="5") == [1.5]
    assert get_completion_content({"message": {"content": "m"}}) == "m"
    assert get_completion_content([{"content": "first"}]) == "first"


# -- combined ------------------------------------------------------------------------------------------


class Recorder:
    def __init__(self):
        self.logged: list[dict] = []

    def log(self, metrics):
        self.logged.append(metrics)


def test_combined_applies_sub_weights():
    combined = CombinedReward(
        rewards=[
            {"type": "format", "weight": 2.0, "params": {"preferred_tags": ["answer"]}},
            {"type": "accuracyx", "weight": 0.5},
        ]
    )
    texts = ["<answer>x</answer> 42", "<answer>x</answer>", "42"]
    assert combined.compute(texts, solution="42") == [2.5, 2.0, 0.5]
    assert combined.name == "combined(formatreward,accuracyxreward)"


def test_combined_normalization():
    texts = ["<answer>x</answer> 42", "<answer>x</answer>", "42", "nothing"]
    subs = [
        {"type": "format", "weight": 3.0, "params": {"preferred_tags": ["answer"]}},
        {"type": "accuracyx", "weight": 1.0},
    ]
    assert CombinedReward(subs, normalization="sum").compute(texts, solution="42") == [1.0, 0.75, 0.25, 0.0]
    assert CombinedReward(subs, normalization="minmax").compute(texts, solution="42") == [
        1.0,
        0.75,
        0.25,
        0.0,
    ]
    flat = CombinedReward(subs, normalization="minmax").compute(["a", "b"], solution="42")
    assert flat == [0.0, 0.0]
    with pytest.raises(ValueError, match="normalization"):
        CombinedReward(subs, normalization="zscore")
    assert CombinedReward(subs).compute([]) == []


def test_combined_failing_sub_reward_contributes_zero_and_logger_propagates(caplog):
    class Exploding(RewardFunction):
        def compute(self, completions, **kwargs):
            raise RuntimeError("kaboom")

    registry.register(Exploding, name="exploding_test_reward")
    combined = CombinedReward(["exploding_test_reward", "format"], weight=2.0)
    recorder = Recorder()
    combined.set_wandb_logger(recorder)
    assert all(r.wandb_logger is recorder for r in combined.reward_functions)
    assert combined(["<think>x</think>", "plain"]) == [2.0, 0.0]
    assert "kaboom" in caplog.text
    keys = set().union(*recorder.logged)
    assert "reward/formatreward/mean_raw" in keys
    assert f"reward/{combined.name}/mean_weighted" in keys
    assert registry.create({"type": "combined", "rewards": ["format"]}).compute(["<answer>a</answer>"]) == [
        1.0
    ]
