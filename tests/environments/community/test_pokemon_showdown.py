"""Pokémon Showdown battles: the protocol client, the battle view and legal choices, the built-in opponents,
moves and their penalties, and ``process`` / ``evaluate`` end to end against a stand-in Showdown server
(``showdown_standin.py``) and the scripted inference server."""

from __future__ import annotations

import asyncio
import importlib.util
import random
import sys

import pytest
from transformers import AutoTokenizer

from atroposlib.envs.episodes import EpisodeTrackingError
from tests.environments.community.showdown_standin import StandInShowdown
from tests.helpers.cli_runs import REPO_ROOT, run_env
from tests.helpers.multi_turn_runs import episode_responder, take_action
from tests.helpers.single_turn_runs import offline_env


def _load_env_module():
    path = REPO_ROOT / "environments" / "community" / "pokemon-showdown" / "pokemon_environment.py"
    spec = importlib.util.spec_from_file_location("pokemon_environment", path)
    module = importlib.util.module_from_spec(spec)
    sys.modules["pokemon_environment"] = module
    spec.loader.exec_module(module)
    return module


penv = _load_env_module()
from showdown_battle import BattleView, MoveTable, legal_choices, render  # noqa: E402
from showdown_players import max_damage_choice, random_choice  # noqa: E402
from showdown_protocol import split_chunk, to_id  # noqa: E402

#: the stand-in's battle: two Thunderbolts win; Splash every turn loses (Pikachu, then Snorlax, faint)
WIN = [take_action("thunderbolt", "move_id")]
LOSE = [take_action(m, "move_id") for m in ("splash", "Splash", "Switch Snorlax", "splash")]


#: the Showdown server the README command names
README_PORT = 8000


def readme_responder():
    """The README command's responder (one battle won, one lost) and the function that stops the stand-in
    Showdown server it starts on the port the README command names (127.0.0.1:8000)."""
    server = StandInShowdown(port=README_PORT).start()
    return episode_responder([WIN, LOSE]), server.stop


@pytest.fixture
def showdown():
    server = StandInShowdown().start()
    yield server
    server.stop()


def _request(**extra):
    side = {"id": "p1", "name": "me", "pokemon": [
        {"ident": "p1: Pikachu", "details": "Pikachu, L50", "condition": "40/100 par", "active": True},
        {"ident": "p1: Mr. Mime", "details": "Mr. Mime, L80", "condition": "90/90"},
        {"ident": "p1: Snorlax", "details": "Snorlax, L50", "condition": "0 fnt"},
    ]}  # fmt: skip
    moves = [{"move": "Thunderbolt", "id": "thunderbolt", "pp": 3, "maxpp": 24},
             {"move": "Volt Tackle", "id": "volttackle", "pp": 0, "maxpp": 24},
             {"move": "Hidden Power Fire 60", "id": "hiddenpowerfire60", "pp": 5, "maxpp": 24, "disabled": True}]  # fmt: skip
    return {"side": side, "active": [{"moves": moves, **extra.pop("active_extra", {})}], "rqid": 4, **extra}


def test_legal_choices_follow_the_request():
    assert [c.name for c in legal_choices(_request())] == ["thunderbolt", "switch mrmime"]
    assert [c.command for c in legal_choices(_request())] == ["move 1", "switch 2"]
    assert [c.name for c in legal_choices(_request(forceSwitch=[True]))] == ["switch mrmime"]
    assert [c.name for c in legal_choices(_request(active_extra={"trapped": True}))] == ["thunderbolt"]
    assert legal_choices(_request(wait=True)) == [] and legal_choices(_request(teamPreview=True)) == []


def test_move_table_and_opponents():
    table = MoveTable()
    assert table.base_power("thunderbolt") == 90 and table.base_power("splash") == 0
    assert table.base_power("hiddenpowerfire60") == 60 and table.base_power("return102") == 102
    assert table.base_power("nosuchmove") == 0 and "always hits" in table.describe("swift")
    choices = legal_choices(_request(active_extra={}))
    weak = [c for c in choices if c.name == "switch mrmime"] + choices[:1]
    assert max_damage_choice(weak, table, random.Random(0)).name == "thunderbolt"
    only_switches = legal_choices(_request(forceSwitch=[True]))
    assert max_damage_choice(only_switches, table, random.Random(0)).name == "switch mrmime"
    picks = {random_choice(choices, table, random.Random(seed)).name for seed in range(20)}
    assert picks == {"thunderbolt", "switch mrmime"}


def test_protocol_lines_and_battle_view():
    room, lines = split_chunk(
        ">battle-gen9randombattle-7\n|init|battle\n|switch|p2a: Gyarados|Gyarados, L80|100/100"
    )
    assert room == "battle-gen9randombattle-7" and lines[1] == [
        "switch",
        "p2a: Gyarados",
        "Gyarados, L80",
        "100/100",
    ]
    assert (
        split_chunk("|challstr|4|a|b") == ("", [["challstr", "4", "a", "b"]])
        and to_id("Mr. Mime") == "mrmime"
    )
    view = BattleView()
    view.set_request(_request())
    for line in ["|switch|p2a: Gyarados|Gyarados, L80|100/100", "|-damage|p2a: Gyarados|45/100 par",
                 "|-status|p2a: Gyarados|par", "|-boost|p1a: Pikachu|spa|2", "|-weather|RainDance",
                 "|-sidestart|p2: foe|move: Stealth Rock", "|turn|3"]:  # fmt: skip
        view.apply(line.split("|")[1:])
    text = render(view, MoveTable(), legal_choices(_request()))
    assert "Turn 3. Weather: RainDance." in text and "Opposing side: Stealth Rock." in text
    assert "Opposing active Pokémon: Gyarados, L80, HP 45%, status par" in text
    assert "Your active Pokémon: Pikachu, L50 (id pikachu), HP 40/100, status par, boosts spa +2" in text
    assert "- thunderbolt: Electric, Special, power 90, accuracy 100%, PP 3/24" in text
    assert "- hiddenpowerfire60: Normal, Special, power 60, accuracy 100%, PP 5/24, disabled" in text
    assert text.endswith("Legal choices: thunderbolt, switch mrmime")
    view.apply(["win", "someone"])
    assert view.over


async def _session(tiny_model_dir, showdown, **values):
    env = offline_env(
        penv.PokemonEnv, tiny_model_dir, showdown_url=showdown.url, **{"server_timeout": 20, **values}
    )
    await env.setup()
    return await env.make_session(0)


@pytest.mark.parametrize(
    "reply",
    [
        take_action("Thunderbolt", "move_id"),  # names as written in the battle
        f"<think>{take_action('splash', 'move_id')} is weak</think>{take_action('thunderbolt', 'move_id')}",
    ],
)
async def test_a_battle_is_played_over_the_socket(tiny_model_dir, showdown, reply):
    session = await _session(tiny_model_dir, showdown)
    try:
        assert "Legal choices: thunderbolt, splash, switch snorlax" in session.messages[1]["content"]
        first = await session.step(reply, 0)
        assert (
            not first.done
            and first.reward == 0.0
            and "Gyarados was hurt (25% left)" in first.messages[0]["content"]
        )
        last = await session.step(reply, 1)
        assert last.done and last.reward == 1.0 and session.won and session.finished
    finally:
        await session.close()
    agent = session.agent.client.name
    assert [c for user, c in showdown.choices if user == agent] == ["move 1", "move 1"]
    assert [c for user, c in showdown.choices if user != agent] == [
        "move 1",
        "move 1",
    ]  # max damage: Waterfall


async def test_a_lost_battle_earns_the_loss_reward(tiny_model_dir, showdown):
    session = await _session(tiny_model_dir, showdown, loss_reward=-0.5)
    try:
        rewards = [(await session.step(LOSE[min(t, 3)], t)).reward for t in range(5)]
    finally:
        await session.close()
    assert rewards == [0.0, 0.0, 0.0, 0.0, -0.5] and session.finished and not session.won
    assert ("switch 2" in [c for _, c in showdown.choices]) and session.moves[2] == "Switch Snorlax"


@pytest.mark.parametrize(
    "reply",
    [
        take_action("waterfall", "move_id"),  # the opponent's move
        take_action("switch gyarados", "move_id"),  # not on this team
        take_action("bodyslam", "move_id"),  # a benched Pokémon's move
        take_action("thunderbolt", "move_id") + take_action("splash", "move_id"),  # a hedge
        take_action("thunderbolt, splash, switch snorlax", "move_id"),  # the legal choices echoed
        f"<think>{take_action('thunderbolt', 'move_id')}</think>",  # only in the reasoning
        "thunderbolt",  # no call
        '<tool_call>{"name": "take_action", "arguments": {"move_id": "thunderbolt"</tool_call>',  # malformed
        take_action("thunderbolt"),  # the wrong argument
    ],
)
async def test_invalid_choices_end_the_battle_with_the_penalty(tiny_model_dir, showdown, reply):
    session = await _session(tiny_model_dir, showdown)
    feedback = await session.step(reply, 0)
    await session.close()
    assert feedback.done and feedback.reward == -1.0 and session.invalid_action and not session.won
    battle = next(iter(showdown.battles.values()))
    agent = session.agent.client.name
    assert battle.over and not [c for user, c in showdown.choices if user == agent]  # forfeited unplayed


async def test_slow_decisions_and_an_interrupted_battle(tiny_model_dir, showdown):
    session = await _session(tiny_model_dir, showdown, server_timeout=1)
    try:
        await asyncio.sleep(1.5)  # a decision slower than the server timeout: the opponent still waits for it
        assert not (await session.step(WIN[0], 0)).done
        showdown.stop()  # the server goes away mid-battle: no outcome, the episode is left out
        with pytest.raises(EpisodeTrackingError, match="the battle was interrupted"):
            await session.step(WIN[0], 1)
        assert not session.won
    finally:
        await session.close()


async def test_server_errors_are_one_clear_line(tiny_model_dir, showdown):
    closed = offline_env(penv.PokemonEnv, tiny_model_dir, showdown_url="ws://127.0.0.1:9/showdown/websocket")
    with pytest.raises(
        RuntimeError, match=r"cannot connect to the Showdown server at ws://127.0.0.1:9/.*--no-security"
    ):
        await closed.setup()
    env = offline_env(penv.PokemonEnv, tiny_model_dir, showdown_url=showdown.url, battle_format="gen9ou")
    await env.setup()
    with pytest.raises(Exception, match="refused the battle: Your team was rejected"):
        await env.make_session(0)


def _unmasked_text(group, index, tokenizer):
    tokens, masks = group["tokens"][index], group["masks"][index]
    return tokenizer.decode([t for t, m in zip(tokens, masks, strict=True) if m != -100])


def test_process_plays_battles_against_the_stand_in(scripted, showdown, tiny_model_dir):
    args = ["--env.showdown_url", showdown.url, "--env.group_size", "2", "--env.total_steps", "1",
            "--env.max_num_workers", "1", "--env.max_tokens_per_turn", "128"]  # fmt: skip
    groups = scripted.process(penv.PokemonEnv, args, episode_responder([WIN, LOSE]))
    assert len(groups) == 1 and sorted(groups[0]["scores"]) == [0.0, 1.0]
    tokenizer = AutoTokenizer.from_pretrained(tiny_model_dir)
    for index in range(2):
        trained = _unmasked_text(groups[0], index, tokenizer)
        assert (
            "take_action" in trained and "Legal choices" not in trained and "Pokémon Showdown" not in trained
        )
        assert groups[0]["masks"][index][0] == -100
    agent_choices = [c for user, c in showdown.choices if user.startswith("atroposa")]
    assert sorted(agent_choices) == sorted(
        ["move 1", "move 1", "move 2", "move 2", "switch 2", "move 1", "move 1"]
    )


def test_evaluate_reports_the_win_rate(scripted, showdown):
    evaluation = scripted.evaluation(
        penv.PokemonEnv,
        ["--env.showdown_url", showdown.url, "--env.eval_episodes", "2", "--env.max_tokens_per_turn", "128",
         "--env.opponent", "random"],
        episode_responder([WIN]),
    )  # fmt: skip
    metrics = evaluation.metrics
    assert (
        metrics["eval/percent_correct"] == 1.0
        and metrics["eval/won"] == 1.0
        and metrics["eval/finished"] == 1.0
    )
    assert len(evaluation.samples) == 2 and all(s["moves"][:1] == ["thunderbolt"] for s in evaluation.samples)


def test_serve_help_lists_the_settings(tmp_path):
    result = run_env(
        REPO_ROOT / "environments/community/pokemon-showdown/pokemon_environment.py",
        ["serve", "--help"],
        cwd=tmp_path,
    )
    assert result.returncode == 0
    for option in ("--env.showdown_url", "--env.battle_format", "--env.opponent", "--env.win_reward"):
        assert option in result.stdout
