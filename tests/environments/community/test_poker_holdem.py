"""The poker environment: reading the decision, the action-match and bet-sizing reward, local data,
``process`` and ``evaluate``."""

from __future__ import annotations

import pytest

from environments.community.poker_holdem import reward_fns
from environments.community.poker_holdem.actions import PokerAction, parse_action, reply_action
from environments.community.poker_holdem.poker_env import PokerEnv, items_from_rows
from tests.environments.community.community_runs import bad_rows_error, evaluate_local, process_local
from tests.helpers.cli_runs import FIXTURES, read_jsonl
from tests.helpers.single_turn_runs import check_groups, offline_env, prompt_text, setup_failure

SAMPLE = FIXTURES / "community" / "poker_holdem" / "poker_sample.jsonl"
ROWS = read_jsonl(SAMPLE)
ITEMS = items_from_rows(ROWS, str(SAMPLE))
REWARD = reward_fns.PokerCombinedReward()


def _score(reply: str, winner: str) -> float:
    return REWARD([reply], winner_action=winner)[0]


@pytest.mark.parametrize(
    ("reply", "action"),
    [
        ("re-raise 9.00", PokerAction("re-raise", 9.0)),
        ("<think>Queens.</think>\nReraise to $9", PokerAction("re-raise", 9.0)),
        ("**RE RAISE 9**", PokerAction("re-raise", 9.0)),
        ("`Action: call`", PokerAction("call")),
        ("I fold.", PokerAction("fold")),
        ("Folding is weak here.\nI'll go all in", PokerAction("all-in")),
        ("call\ncall", PokerAction("call")),  # repeated, not hedged
    ],
)
def test_equivalent_spellings_state_one_action(reply, action):
    assert reply_action(reply) == action


@pytest.mark.parametrize(
    "reply",
    [
        "fold\nre-raise 9",  # two answers
        "re-raise 9 or call",
        "<think>re-raise 9</think>I'm not sure.",  # only inside the reasoning
        "<think>re-raise 9",  # reasoning never closes
        "re-raise 9 because queens are strong",  # prose around the action
        "fold 4",
        "",
    ],
)
def test_hedges_and_malformed_replies_state_nothing(reply):
    assert reply_action(reply) is None


@pytest.mark.parametrize(
    ("reply", "winner", "expected"),
    [
        ("re-raise 9.00", "re-raise 9.00", 1.0),
        ("<think>Queens.</think>\nReraise to $9", "re-raise 9.00", 1.0),
        ("re-raise 12", "re-raise 9.00", 0.6 * (0.7 + 0.3 * 0.75) + 0.4 * (1 - (1 / 3) / 0.5)),
        ("re-raise", "re-raise 9.00", 0.6 * 0.7),  # the type without an amount
        (
            "re-raise 20",
            "re-raise 9.00",
            0.6 * (0.7 + 0.3 * 9 / 20),
        ),  # beyond 50 % deviation: no sizing credit
        ("raise 9", "re-raise 9.00", 0.6 * 0.5 + 0.4),  # a related aggressive action, sized right
        ("call", "re-raise 9.00", 0.0),
        ("call", "call", 1.0),
        ("Call.", "call", 1.0),
        ("call 2.00", "call", 1.0),
        ("check", "call", 0.6 * 0.5),
        ("fold", "call", 0.0),
        ("bet 5", "bet 5.00", 1.0),
        ("all-in", "bet 5.00", 0.6 * 0.5),
        ("fold", "fold", 1.0),
        ("fold\ncall", "call", 0.0),  # hedges, hacks and malformed replies score nothing
        ("<think>call</think>", "call", 0.0),
        ("call or fold", "call", 0.0),
        ("The answer is call, because the pot odds are good", "call", 0.0),
    ],
)
def test_reward(reply, winner, expected):
    assert _score(reply, winner) == pytest.approx(expected)


def test_reward_settings_by_keyword_or_position():
    sizing = reward_fns.PokerBetSizingReward(0.9, 0.1, weight=2.0, name="sizing")
    assert (sizing.perfect_match_score, sizing.min_score, sizing.max_deviation_pct) == (0.9, 0.1, 0.5)
    assert sizing.weight == 2.0 and sizing.name == "sizing"
    assert sizing(["fold"], winner_action="no action") == [0.2]  # min_score, weighted, when unparsed
    match = reward_fns.PokerActionMatchReward(related_action_score=0.25)
    assert (match.exact_match_score, match.action_type_score, match.related_action_score) == (1.0, 0.7, 0.25)
    assert match(["check"], winner_action="call") == [0.25] and match.weight == 1.0
    assert reward_fns.PokerActionMatchReward(1.0, 0.7, 0.5, 3.0).weight == 3.0
    with pytest.raises(TypeError, match="multiple values for argument 'min_score'"):
        reward_fns.PokerBetSizingReward(1.0, 0.0, min_score=0.1)
    with pytest.raises(TypeError, match="at most 4 positional arguments"):
        reward_fns.PokerBetSizingReward(1.0, 0.0, 0.5, 1.0, 9.0)


def test_winning_actions_parse():
    assert [str(parse_action(i.winner_action)) for i in ITEMS] == [
        "re-raise 9.00", "call", "bet 5.00", "call", "bet 12.00", "fold",
    ]  # fmt: skip
    assert [i.stage for i in ITEMS] == ["PREFLOP", "FLOP", "FLOP", "TURN", "RIVER", "PREFLOP"]


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ({"game_stage": "FLOP", "winning_action": "call"}, "row 1: missing field 'pokergpt_prompt'"),
        ({"pokergpt_prompt": "p", "game_stage": "FLOP"}, "row 1: missing field 'winning_action'"),
        ({"pokergpt_prompt": "p", "game_stage": "FLOP", "winning_action": "limp"}, "row 1: field 'winning_action' is 'limp'"),
        ({"pokergpt_prompt": "p", "game_stage": "SHOWDOWN", "winning_action": "call"}, "row 1: field 'game_stage' is 'SHOWDOWN'"),
        ({"pokergpt_prompt": "p", "game_stage": "FLOP", "winning_action": "call", "bb_won": "lots"}, "row 1: field 'bb_won'"),
    ],
)  # fmt: skip
async def test_bad_local_rows(tiny_model_dir, tmp_path, row, message):
    await bad_rows_error(PokerEnv, tiny_model_dir, tmp_path, [ROWS[0], row], message)


async def test_local_data_hub_default_and_original_settings(tiny_model_dir, hub_offline):
    env = offline_env(PokerEnv, tiny_model_dir, dataset_path=str(SAMPLE))
    await env.setup()
    assert len(env.train) == 5 and len(env.test) == 1
    assert {i.hand_id for i in env.train + env.test} == {r["hand_id"] for r in ROWS}
    formatted = dict(ROWS[1], formatted_winning_action="raise 8.00")
    assert items_from_rows([formatted], "f")[0].winner_action == "raise 8.00"  # preferred when present
    await setup_failure(offline_env(PokerEnv, tiny_model_dir), "yoniebans/6max-nlh-poker: cannot load")
    config, server = PokerEnv.config_init()
    assert (config.group_size, config.max_token_length, config.max_tokens, config.temperature) == (
        8,
        256,
        50,
        0.7,
    )
    assert (config.eval_sample_size, config.eval_temperature, config.correctness_threshold) == (200, 0.2, 0.9)
    assert server.model_name == "Qwen/Qwen3-1.7B" and server.base_url == "http://localhost:9002/v1"


async def test_training_groups_feed_stage_and_action_metrics(tiny_model_dir):
    env = offline_env(PokerEnv, tiny_model_dir, dataset_path=str(SAMPLE))
    scores = env.score_replies(["re-raise 9", "call", "maybe"], ITEMS[0])
    assert scores == [1.0, 0.0, 0.0]
    assert env.stage_scores["PREFLOP"] == scores and env.actions == {"re-raise": 1, "call": 1, "unknown": 1}


def _answer(item_text: str, right: bool) -> str:
    row = next(r for r in ROWS if r["pokergpt_prompt"] in item_text)
    action = row["winning_action"] if right else "fold" if row["winning_action"] != "fold" else "call"
    return f"<think>Reading the table.</think>\n{action}"


def _responder(prompt, index):
    """The winning action for choice 0, another one for the others."""
    return _answer(prompt_text(prompt), index == 0)


def _eval_responder(prompt, index):
    """The winning action except where it is a call."""
    text = prompt_text(prompt)
    row = next(r for r in ROWS if r["pokergpt_prompt"] in text)
    return _answer(text, row["winning_action"] != "call")


def test_process_with_a_local_file(scripted):
    groups = process_local(scripted, PokerEnv, SAMPLE, _responder, group_size=2, total_steps=3)
    check_groups(groups, 3, [0.0, 1.0])
    for group in groups:
        assert group["messages"][0][1]["content"].startswith("You are an experienced gambler.")


def test_evaluate_reports_exact_metrics(scripted):
    evaluation = evaluate_local(scripted, PokerEnv, SAMPLE, _eval_responder, max_tokens=64)
    metrics, samples = evaluation.metrics, evaluation.samples
    assert len(samples) == 6 and metrics["eval/percent_correct"] == pytest.approx(4 / 6)
    assert metrics["eval/accuracy_preflop"] == 1.0 and metrics["eval/accuracy_flop"] == 0.5
    assert metrics["eval/accuracy_turn"] == 0.0 and metrics["eval/accuracy_river"] == 1.0
    assert metrics["eval/avg_score_turn"] == 0.0
    assert {s["decision"] for s in samples if s["winner_action"] == "call"} == {"fold"}
    budgets = {r["body"]["max_tokens"] for r in evaluation.requests if "max_tokens" in r["body"]}
    assert budgets == {50}  # eval_max_tokens, not the training budget
