"""RewardFunction base behaviour and the registry (decorators, factory, lazy loading)."""

from __future__ import annotations

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest

from atroposlib.envs.reward_fns import CombinedReward, RewardFunction, registry
from atroposlib.envs.reward_fns.registry import LegacyFunctionWrapper, RewardRegistry


class Recorder:
    def __init__(self):
        self.logged: list[dict] = []

    def log(self, metrics):
        self.logged.append(metrics)


class LengthReward(RewardFunction):
    def compute(self, completions, **kwargs):
        return [len(self.get_content(c)) for c in completions]


def test_package_exports():
    import atroposlib.envs.reward_fns as pkg

    assert pkg.__all__ == ["RewardFunction", "registry", "CombinedReward"]
    assert isinstance(registry, RewardRegistry)


def test_call_applies_weight_and_logs_metrics():
    reward = LengthReward(weight=0.5, name="len", extra=3)
    assert reward.name == "len" and reward.config == {"extra": 3}
    assert LengthReward().name == "lengthreward"
    recorder = Recorder()
    reward.set_wandb_logger(recorder)
    assert reward(["ab", "abcd"]) == [1.0, 2.0]
    assert recorder.logged == [
        {
            "reward/len/mean_raw": 3.0,
            "reward/len/mean_weighted": 1.5,
            "reward/len/min": 2.0,
            "reward/len/max": 4.0,
        }
    ]


def test_call_turns_errors_and_bad_lengths_into_zeros(caplog):
    class Broken(RewardFunction):
        def compute(self, completions, **kwargs):
            raise KeyError("solution")

    class Short(RewardFunction):
        def compute(self, completions, **kwargs):
            return [1.0]

    assert Broken()(["a", "b"]) == [0.0, 0.0]
    assert "broken failed" in caplog.text
    assert Short()(["a", "b", "c"]) == [0.0, 0.0, 0.0]
    assert "returned 1 rewards for 3 completions" in caplog.text


@pytest.mark.parametrize(
    ("completion", "expected"),
    [
        ("plain", "plain"),
        ({"role": "assistant", "content": "msg"}, "msg"),
        ({"message": {"role": "assistant", "content": "choice"}}, "choice"),
        (
            [
                {"role": "user", "content": "q"},
                {"role": "assistant", "content": "a1"},
                {"role": "assistant", "content": "a2"},
            ],
            "a1",
        ),
        ({"role": "user", "content": "not assistant"}, ""),
        ([{"role": "user", "content": "q"}], ""),
        (42, ""),
        ({"role": "assistant", "content": None}, ""),
    ],
)
def test_get_content(completion, expected):
    assert RewardFunction.get_content(completion) == expected


def test_register_keys_and_type_check():
    reg = RewardRegistry()

    @reg.register
    class BrevityReward(RewardFunction):
        def compute(self, completions, **kwargs):
            return [1.0 for _ in completions]

    @reg.register(name="custom_key")
    class Other(RewardFunction):
        def compute(self, completions, **kwargs):
            return [0.0 for _ in completions]

    assert reg.get("brevity") is BrevityReward
    assert reg.get("custom_key") is Other
    assert set(reg.list_registered()) == {"brevity", "custom_key"}
    with pytest.raises(TypeError, match="not a subclass of RewardFunction"):
        reg.register(dict)
    with pytest.raises(TypeError):
        reg.register(lambda c: c)


def test_create_from_name_and_config():
    reg = RewardRegistry()
    reg.register(LengthReward, name="length")
    r = reg.create("length", weight=2.0)
    assert isinstance(r, LengthReward) and r.weight == 2.0
    r = reg.create({"type": "length", "weight": 3.0, "params": {"name": "L", "k": 1}}, weight=2.0, k=0)
    assert r.weight == 3.0 and r.name == "L" and r.config == {"k": 1}
    with pytest.raises(ValueError, match="'type'"):
        reg.create({"weight": 1.0})
    with pytest.raises(TypeError):
        reg.create(3)


def test_legacy_functions_are_wrapped():
    reg = RewardRegistry()

    def always_half(completions, bonus=0.0, **kwargs):
        return 0.5 + bonus

    def per_item(completions, **kwargs):
        return [float(len(c)) for c in completions]

    reg.register_function("half", always_half)
    reg.register_function("per_item", per_item)
    half = reg.create("half", weight=2.0, bonus=0.25)
    assert isinstance(half, LegacyFunctionWrapper) and half.name == "always_half"
    assert half(["a", "b", "c"]) == [1.5, 1.5, 1.5]  # scalar broadcast, constructor kwargs passed, weighted
    assert half(["a"], bonus=0.0) == [1.0]  # call-time keywords win
    assert reg.create({"type": "per_item"})(["ab", "c"]) == [2.0, 1.0]


def test_unknown_name_is_an_import_error():
    with pytest.raises(ImportError, match="unknown reward function 'no_such_reward'"):
        registry.get("no_such_reward")


def test_load_required_functions():
    config = SimpleNamespace(
        datasets=[
            SimpleNamespace(
                dataset_reward_funcs=["format"], reward_funcs=None, types=[{"reward_funcs": ["r1"]}]
            ),
            SimpleNamespace(reward_funcs=["accuracyx"]),
        ],
        reward_functions=["reasoningsteps", {"type": "combined", "rewards": []}],
        reward_funcs=None,
    )
    loaded = registry.load_required_functions(config)
    assert loaded == {"format", "r1", "accuracyx", "reasoningsteps", "combined"}
    for name in loaded:
        assert name in registry.list_registered()


LAZY_SCRIPT = """
import json, sys
from atroposlib.envs.reward_fns import registry
before = registry.list_registered()
names = ["accuracy", "accuracyx", "formatreasoning", "r1", "format", "reasoningsteps", "repetitionpenalty",
         "crosswordformat", "chandasmeter", "cascading_r1_math", "reasoning_steps", "repetition_penalty_reward",
         "crossword_format"]
out = {}
for n in names:
    r = registry.create(n)
    out[n] = [type(r).__name__, r.name]
print(json.dumps({"before": before, "importlib_util_loaded": "importlib.util" in sys.modules, "created": out}))
"""


def test_lazy_loading_in_a_fresh_interpreter():
    # A fresh process: nothing but the package has been imported, as in an environment file.
    proc = subprocess.run([sys.executable, "-c", LAZY_SCRIPT], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    result = json.loads(proc.stdout.strip().splitlines()[-1])
    assert result["before"] == ["combined"]
    created = result["created"]
    assert created["r1"][0] == "R1Reward"  # not the alphabetically-first class of r1_reward.py
    assert created["accuracy"][0] == "AccuracyReward"
    assert created["accuracyx"][0] == "AccuracyXReward"
    assert created["formatreasoning"][0] == "FormatReasoningReward"
    assert created["format"][0] == "FormatReward"
    assert created["reasoningsteps"][0] == created["reasoning_steps"][0] == "ReasoningStepsReward"
    assert (
        created["repetitionpenalty"][0]
        == created["repetition_penalty_reward"][0]
        == "RepetitionPenaltyReward"
    )
    assert created["crosswordformat"][0] == created["crossword_format"][0] == "CrosswordFormatReward"
    assert created["chandasmeter"][0] == "ChandasMeterReward"
    assert created["cascading_r1_math"] == ["LegacyFunctionWrapper", "cascading_r1_math_reward"]


def test_classes_keep_their_identity_across_lazy_and_direct_imports():
    from atroposlib.envs.reward_fns.r1_reward import R1Reward

    assert registry.get("r1") is R1Reward
    assert isinstance(registry.create("r1"), R1Reward)
    assert registry.get("combined") is CombinedReward
