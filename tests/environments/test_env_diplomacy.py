"""Diplomacy on the real engine: orders, rejected orders, invalid replies, the score, opponents, ``process``."""

from __future__ import annotations

import json

import pytest
from transformers import AutoTokenizer

from atroposlib.envs.base import APIServerConfig
from atroposlib.testing.scripted_server import launch_scripted_server
from environments.game_environments.diplomacy_environment.diplomacy_env_minimal import (
    RULES,
    DiplomacyEnvMinimal,
    DiplomacyEnvMinimalConfig,
    DiplomacySession,
)
from environments.game_environments.diplomacy_environment.diplomacy_game import (
    STARTING_SUPPLY_CENTERS,
    ScoreWeights,
    game_score,
    split_orders,
)
from environments.game_environments.diplomacy_environment.opponents import ModelOpponents
from tests.helpers.multi_turn_runs import episode_responder, take_action

OPENING = "A PAR - BUR; A MAR - SPA; F BRE - MAO"
FALL = "A SPA H\nF MAO - POR\nA BUR H"


def orders(text: str) -> str:
    return take_action(text, "orders")


def _config(**values) -> DiplomacyEnvMinimalConfig:
    return DiplomacyEnvMinimalConfig(max_game_turns=1, save_game_logs=False, **values)


async def _session(seed: int = 5, **values) -> DiplomacySession:
    session = DiplomacySession(_config(**values), seed, None)
    await session.start()
    return session


def test_orders_are_split_and_spelled_as_the_engine_does():
    assert split_orders(" a par -  bur ;\nF BRE - MAO;; ") == ["A PAR - BUR", "F BRE - MAO"]
    assert split_orders(" ; \n") == []


async def test_the_board_lists_every_power_and_the_possible_orders():
    session = await _session()
    system, board = session.messages[0]["content"], session.messages[1]["content"]
    assert "as FRANCE" in system and "take_action" in system
    assert board.startswith("Phase: S1901M (movement). You are FRANCE.")
    assert "FRANCE (you): 3 centres [BRE MAR PAR]" in board and "RUSSIA: 4 centres" in board
    assert "- PAR: A PAR - BRE | A PAR - BUR |" in board


async def test_a_year_of_orders_takes_iberia_and_scores_by_the_original_rule():
    session = await _session(opponent_policy="hold")
    feedback = await session.step(orders(OPENING), 0)
    assert not feedback.done and "Phase: F1901M" in feedback.messages[0]["content"]
    feedback = await session.step(orders(FALL), 1)
    assert "Phase: W1901A (adjustments)" in feedback.messages[0]["content"]
    assert "you may build 2 unit(s)" in feedback.messages[0]["content"]
    feedback = await session.step(orders("A PAR B; F MAR B"), 2)
    assert feedback.done and "game is over after 3 phases" in feedback.messages[0]["content"]
    assert session.metrics()["supply_centers"] == 5.0 and session.metrics()["rejected_order_rate"] == 0.0
    assert session.score(ScoreWeights()) == pytest.approx((5 - 3) * 1.0 + 0.1 * 3)
    assert session.score(ScoreWeights(2.0, 0.0, 5.0)) == pytest.approx(4.0)


async def test_orders_the_engine_cannot_carry_out_are_dropped_and_reported():
    session = await _session(opponent_policy="hold")
    feedback = await session.step(orders("A PAR - MOS; F BRE - MAO; A MAR H"), 0)
    text = feedback.messages[0]["content"]
    assert not feedback.done and "rejected (those units held): A PAR - MOS" in text
    assert "units: A MAR, A PAR, F MAO" in text  # the army stayed in Paris
    assert session.metrics()["rejected_order_rate"] == pytest.approx(1 / 3)


@pytest.mark.parametrize(
    "reply,reason",
    [
        ("I move to Burgundy.", "expected one take_action call, found 0"),
        (orders("A PAR H") + orders("A MAR H"), "found 2"),
        (orders(" ; "), "no orders given"),
        ("<think>" + orders(OPENING), "<think> block is malformed"),
        ('<tool_call>{"name": "take_action", "arguments": {"orders": </tool_call>', "malformed tool call"),
    ],
)
async def test_an_unreadable_reply_ends_the_game_with_the_penalty(reply, reason):
    session = await _session()
    feedback = await session.step(reply, 0)
    assert feedback.done and feedback.reward == -1.0 and reason in session.invalid_action
    assert session.game.get_current_phase() == "S1901M"


async def test_orders_inside_think_do_not_count():
    session = await _session()
    feedback = await session.step(f"<think>{orders(OPENING)}</think>I hold.", 0)
    assert feedback.done and session.invalid_action is not None


def test_a_solo_win_earns_the_win_bonus():
    weights = ScoreWeights()
    centres = {**STARTING_SUPPLY_CENTERS, "FRANCE": 18}
    assert game_score(centres, 20, "FRANCE", "FRANCE", weights) == pytest.approx(15 + 2.0 + 5.0)
    assert game_score(centres, 20, "ENGLAND", "FRANCE", weights) == pytest.approx(17.0)


async def test_random_opponents_depend_only_on_seed_and_board():
    first, second = await _session(seed=9), await _session(seed=9)
    for session in (first, second):
        await session.step(orders(OPENING), 0)
    assert first.game.get_state()["units"] == second.game.get_state()["units"]
    other = await _session(seed=10)
    await other.step(orders(OPENING), 0)
    assert other.game.get_state()["units"] != first.game.get_state()["units"]


async def test_model_opponents_play_through_a_chat_endpoint(tiny_model_dir):
    def respond(prompt, index):
        text = json.dumps(prompt)
        return orders("A BER - KIE; A MUN - RUH; F KIE - DEN") if "as GERMANY" in text else "no idea"

    with launch_scripted_server(respond=respond, tokenizer=tiny_model_dir) as server:
        opponents = ModelOpponents(server.base_url, "m", "x", 0.0, "tool_call", RULES)
        session = DiplomacySession(_config(opponent_policy="model"), 1, opponents)
        await session.start()
        await session.step(orders(OPENING), 0)
        asked = len(server.requests)
    units = session.game.get_state()["units"]
    assert {"A RUH", "F DEN", "A KIE"} <= set(units["GERMANY"])
    assert set(units["ENGLAND"]) == {"F EDI", "F LON", "A LVP"}  # unreadable reply: its units held
    assert asked == 6


def test_unknown_power_and_missing_opponent_server_are_refused(tiny_model_dir):
    server = APIServerConfig(base_url="http://127.0.0.1:9/v1", model_name="m", server_type="vllm")
    with pytest.raises(ValueError, match="not one of"):
        DiplomacyEnvMinimal(
            _config(tokenizer_name=str(tiny_model_dir), use_wandb=False, training_power="SPAIN"), server
        )
    with pytest.raises(ValueError, match="opponent_base_url"):
        DiplomacyEnvMinimal(
            _config(tokenizer_name=str(tiny_model_dir), use_wandb=False, opponent_policy="model"), server
        )


ORIGINAL_KEYS = ["env_name", "max_game_turns", "training_power", "total_steps", "supply_center_weight",
                 "survival_bonus", "win_bonus", "diplomacy_server_port", "start_diplomacy_server", "save_game_logs",
                 "game_logs_dir", "eval_episodes"]  # fmt: skip


def test_every_original_key_is_declared_or_ignored_with_a_reason():
    cls = DiplomacyEnvMinimalConfig
    for key in ORIGINAL_KEYS:
        assert (key in cls.model_fields) != bool(cls.ignored_original_keys.get(key)), key
    defaults = cls()
    assert (defaults.max_game_turns, defaults.training_power, defaults.group_size) == (10, "FRANCE", 4)
    assert (defaults.supply_center_weight, defaults.survival_bonus, defaults.win_bonus) == (1.0, 0.1, 5.0)


def test_the_original_server_keys_are_accepted_and_ignored():
    config = DiplomacyEnvMinimalConfig(diplomacy_server_port=8432, start_diplomacy_server=True)
    assert "diplomacy_server_port" not in config.model_dump()
    assert set(DiplomacyEnvMinimalConfig.ignored_original_keys) == {
        "diplomacy_server_port",
        "start_diplomacy_server",
    }


def test_process_plays_real_games_and_trains_only_the_replies(scripted, tiny_model_dir):
    respond = episode_responder([[orders(OPENING), orders(FALL), orders("A PAR B")], ["I wait."]])
    args = ["--env.group_size", "4", "--env.total_steps", "1", "--env.max_game_turns", "1",
            "--env.max_tokens_per_turn", "256", "--env.max_token_length", "16384",
            "--env.game_logs_dir", "logs"]  # fmt: skip
    groups = scripted.process(DiplomacyEnvMinimal, args, respond)
    assert len(groups) == 1
    group = groups[0]
    scores = sorted(group["scores"])
    assert scores[:2] == [-1.0, -1.0] and all(s > 0 for s in scores[2:])  # invalid replies vs. a played year
    tokenizer = AutoTokenizer.from_pretrained(str(tiny_model_dir))
    for masks, messages in zip(group["masks"], group["messages"], strict=True):
        replies = [m["content"] for m in messages if m["role"] == "assistant"]
        trained = tokenizer.decode([m for m in masks if m != -100], skip_special_tokens=False)
        assert trained == "".join(r + "<|im_end|>" for r in replies) and "Phase:" not in trained
    saved = list((scripted.tmp_path / "logs").glob("*.json"))
    assert len(saved) == 4 and json.loads(saved[0].read_text())["map"] == "standard"


def test_evaluate_reports_games_centres_and_rejected_orders(scripted):
    respond = episode_responder(
        [[orders("A PAR - MOS; A MAR - SPA; F BRE - MAO"), orders(FALL), orders("A PAR B")]]
    )
    args = ["--env.eval_episodes", "2", "--env.max_game_turns", "1", "--env.max_tokens_per_turn", "256",
            "--env.max_token_length", "16384", "--env.game_logs_dir", scripted.tmp_path / "logs"]  # fmt: skip
    metrics, samples, _ = scripted.evaluate(DiplomacyEnvMinimal, args, respond)
    assert len(samples) == 2 and {s["seed"] for s in samples} == {1_000_000, 1_000_001}
    assert metrics["eval/invalid_action"] == 0.0 and metrics["eval/won"] == 0.0
    assert metrics["eval/supply_centers"] >= 4.0 and 0.0 < metrics["eval/rejected_order_rate"] < 0.5
    assert all(s["moves"][0].startswith("A PAR - MOS") for s in samples)
