"""Multi-turn tool calling with turn-level advantages: per-turn rewards, MT-GRPO advantages on each turn's
tokens, the original's defaults, ``process`` and ``evaluate`` with the hub unreachable."""

from __future__ import annotations

import pytest
from transformers import AutoTokenizer

from atroposlib.envs.base import APIServerConfig
from atroposlib.envs.cli import parse_command
from atroposlib.envs.data_loading import DatasetError
from atroposlib.group import check_group
from atroposlib.testing.scripted_server import launch_scripted_server
from environments.tool_use_turnlevel_advantage_server import (
    MTGRPOEnvConfig,
    MultiTurnToolUseTurnLevelAdvantageEnv,
    mt_grpo_advantages,
)
from tests.helpers.cli_runs import FIXTURES, read_jsonl
from tests.helpers.multi_turn_runs import episode_responder, tool_call
from tests.helpers.single_turn_runs import offline_env
from tests.helpers.tool_replay import replayer

SAMPLE = FIXTURES / "tool_use_multiturn_sample.jsonl"
ROWS = read_jsonl(SAMPLE)
RIGHT = [
    tool_call("get_weather", city="Oslo"),
    tool_call("convert_temperature", celsius=12),
    "It is 53.6 F and cloudy in Oslo.",  # the narration turn after the last call
]
WRONG = [tool_call("get_weather", city="Bergen")]


def test_the_originals_defaults():
    config = MTGRPOEnvConfig()
    assert config.dataset_name == "interstellarninja/hermes_salesforce_apigen_tool_use"
    assert config.turn_level_advantages and config.validate_think_blocks and config.turn_reward == 1.0
    assert config.scenario_category == "multistep" and config.max_tool_call_turns_cap == 3
    assert config.generate_all_gpt_turns


async def _right_and_wrong_group(tiny_model_dir, **values):
    """The group of one right and one wrong episode of the two-call task: (right, wrong) rows of
    (score, advantages, masks), and the group."""
    values = {"tokenizer_name": str(tiny_model_dir), "use_wandb": False, "dataset_path": str(SAMPLE),
              "eval_dataset_path": str(SAMPLE), "group_size": 2, "max_tokens_per_turn": 256, **values}  # fmt: skip
    with launch_scripted_server(
        respond=episode_responder([RIGHT, WRONG]), tokenizer=tiny_model_dir
    ) as server:
        env = MultiTurnToolUseTurnLevelAdvantageEnv(
            MTGRPOEnvConfig(**values),
            APIServerConfig(base_url=server.base_url, model_name="m", server_type="vllm"),
        )
        await env.setup()
        task = next(t for t in env.test if "How warm" in t.messages[1]["content"])
        group, _ = await env.collect_trajectories(task)
    rows = sorted(zip(group["scores"], group["advantages"], group["masks"], strict=True), key=lambda r: r[0])
    return rows[1], rows[0], group


def _turn_values(advantages, masks) -> list[float]:
    """The advantage of each trained run of tokens (one per turn), in order."""
    runs, previous = [], -100
    for advantage, mask in zip(advantages, masks, strict=True):
        if mask != -100 and previous == -100:
            runs.append(advantage)
        previous = mask
    return runs


async def test_each_turn_gets_its_advantage_and_only_the_models_tokens_are_trained(tiny_model_dir):
    (
        (right_score, right_adv, right_masks),
        (wrong_score, wrong_adv, wrong_masks),
        group,
    ) = await _right_and_wrong_group(tiny_model_dir)
    assert check_group(group) == []
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    # right: turn rewards 1, 1, 1 (two calls and the narration) and outcome 1.5; wrong: 0 and 0 - 0.2
    assert right_score == pytest.approx(4.5) and wrong_score == pytest.approx(-0.2)
    # turns 0 and 1 rewards [1, 0] (the wrong episode never reached turn 1) -> [+1, -1]; outcomes -> [+1, -1];
    # lambda 0.5: non-final turns 1 + 0.5; the final (narration) turn the outcome alone
    assert _turn_values(right_adv, right_masks) == pytest.approx([1.5, 1.5, 1.0])
    assert _turn_values(wrong_adv, wrong_masks) == pytest.approx([-1.5])
    for adv, masks in ((right_adv, right_masks), (wrong_adv, wrong_masks)):
        assert all(a == 0.0 for a, m in zip(adv, masks, strict=True) if m == -100)
    for masks, messages in zip(group["masks"], group["messages"], strict=True):
        replies = [m["content"] for m in messages if m["role"] == "assistant"]
        trained = tokenizer.decode([m for m in masks if m != -100], skip_special_tokens=False)
        assert trained == "".join(r + "<|im_end|>" for r in replies)


@pytest.mark.parametrize(("lam", "weight", "right", "wrong"),
                         [(0.0, 1.0, [1.0, 1.0, 1.0], [-1.0]), (1.0, 1.0, [2.0, 2.0, 1.0], [-2.0]),
                          (2.0, 0.5, [2.5, 2.5, 1.0], [-2.5])])  # fmt: skip
async def test_lambda_weighs_the_outcome_in_the_non_final_turns(tiny_model_dir, lam, weight, right, wrong):
    (_, right_adv, right_masks), (_, wrong_adv, wrong_masks), _ = await _right_and_wrong_group(
        tiny_model_dir, turn_level_advantage_lambda=lam, turn_advantage_weight=weight
    )
    assert _turn_values(right_adv, right_masks) == pytest.approx(right)
    assert _turn_values(wrong_adv, wrong_masks) == pytest.approx(wrong)


def test_mt_grpo_advantages():
    # three episodes of a three-turn task: turn rewards standardised per turn (unreached turns count 0)
    advantages = mt_grpo_advantages([[1.0, 1.0, 1.0], [1.0, 0.0], [0.0]], [2.0, 0.0, 0.0], 3, lam=0.5)
    turn0, outcome = [2**0.5 / 2, 2**0.5 / 2, -(2**0.5)], [2**0.5, -(2**0.5) / 2, -(2**0.5) / 2]
    turn1 = [2**0.5, -(2**0.5) / 2, -(2**0.5) / 2]
    assert advantages[0] == pytest.approx(
        [turn0[0] + 0.5 * outcome[0], turn1[0] + 0.5 * outcome[0], outcome[0]]
    )
    assert advantages[1] == pytest.approx([turn0[1] + 0.5 * outcome[1], turn1[1] + 0.5 * outcome[1]])
    assert advantages[2] == pytest.approx([turn0[2] + 0.5 * outcome[2]])
    assert mt_grpo_advantages([[1.0], [1.0]], [1.0, 1.0], 1, lam=0.5) == [[0.0], [0.0]]  # nothing to prefer
    with pytest.raises(ValueError):
        mt_grpo_advantages([[1.0]], [1.0, 2.0], 1, lam=0.5)


def test_lambda_from_an_original_config_file(tmp_path):
    path = tmp_path / "mtgrpo.yaml"
    path.write_text("env:\n  turn_level_advantage_lambda: 1.0\n  use_parallel_requests: false\n")
    config = parse_command(
        MultiTurnToolUseTurnLevelAdvantageEnv, ["process", "--config", str(path)]
    ).resolve()
    assert (
        config.env_config.turn_level_advantage_lambda == 1.0
        and MTGRPOEnvConfig().turn_level_advantage_lambda == 0.5
    )


async def test_the_hub_set_is_the_default(tiny_model_dir, hub_offline):
    env = offline_env(MultiTurnToolUseTurnLevelAdvantageEnv, tiny_model_dir)
    with pytest.raises(
        DatasetError, match=r"interstellarninja/hermes_salesforce_apigen_tool_use: cannot load"
    ):
        await env.setup()


def test_process_sends_advantages(scripted):
    args = ["--env.dataset_path", SAMPLE, "--env.group_size", "4", "--env.total_steps", "2",
            "--env.max_tokens_per_turn", "256"]  # fmt: skip
    groups = scripted.process(MultiTurnToolUseTurnLevelAdvantageEnv, args, replayer(ROWS[:2]))
    assert len(groups) == 2
    for group in groups:
        assert sorted(group["scores"]) == pytest.approx([-0.2, -0.2, 4.5, 4.5])
        assert len(group["advantages"]) == 4
        assert all(len(a) == len(t) for a, t in zip(group["advantages"], group["tokens"], strict=True))


def test_evaluate_reports_exact_metrics(scripted):
    args = [
        "--env.dataset_path",
        SAMPLE,
        "--env.eval_dataset_path",
        SAMPLE,
        "--env.max_tokens_per_turn",
        "256",
    ]
    metrics, samples, _ = scripted.evaluate(MultiTurnToolUseTurnLevelAdvantageEnv, args, replayer(ROWS[:2]))
    assert len(samples) == 2 and metrics["eval/percent_correct"] == 0.5
    assert metrics["eval/mean_turns"] == 2.0  # three turns (two calls and the narration), and one
    assert (
        metrics["eval/mean_score"] == pytest.approx((4.5 - 0.2) / 2) and metrics["eval/call_accuracy"] == 0.5
    )
