"""Reading a game move from a reply (both action formats) and the invalid-action rule."""

from __future__ import annotations

import pytest

from atroposlib.envs.games import ACTION_TOOL, GameSession, InvalidAction, action_instructions, parse_action
from tests.helpers.multi_turn_runs import take_action, tool_call


@pytest.mark.parametrize(
    "reply, move",
    [
        (take_action("hit"), "hit"),
        ("<think>hit or stick? " + take_action("stick") + "</think>" + take_action(" hit "), "hit"),
        ("I will go north.\n" + take_action("go north", "command"), "go north"),
        ('<tool_call>{"name": "take_action", "arguments": "{\\"action\\": \\"hit\\"}"}</tool_call>', "hit"),
    ],
)
def test_tool_call_moves(reply, move):
    argument = "command" if "command" in reply else "action"
    assert parse_action(reply, "tool_call", argument) == move


@pytest.mark.parametrize(
    "reply, why",
    [
        ("hit", "found 0"),
        (take_action("hit") + take_action("stick"), "found 2"),
        (
            '<tool_call>{"name": "take_action", "arguments": {"action": "hit"}</tool_call>',
            "malformed tool call",
        ),
        (tool_call("search", action="hit"), "unknown tool 'search'"),
        (tool_call(ACTION_TOOL, move="hit"), "needs a string argument 'action'"),
        (tool_call(ACTION_TOOL, action=1), "needs a string argument 'action'"),
        (tool_call(ACTION_TOOL, action="  "), "needs a string argument 'action'"),
        ("<tool_call>" + take_action("hit"), "do not pair up"),
        ("<think>unfinished " + take_action("hit"), "<think> block is malformed"),
        ("<think>" + take_action("hit") + "</think>", "found 0"),
    ],
)
def test_tool_call_non_moves(reply, why):
    with pytest.raises(InvalidAction, match=why):
        parse_action(reply, "tool_call")


def test_tag_moves():
    assert parse_action("<think>hmm</think>I hit. <action> hit </action>", "tag") == "hit"
    with pytest.raises(InvalidAction, match="found 2"):
        parse_action("<action>hit</action><action>stick</action>", "tag")
    with pytest.raises(InvalidAction, match="found 0"):
        parse_action(take_action("hit"), "tag")


def test_instructions_name_the_format():
    assert "<tool_call>" in action_instructions("tool_call", "action", "hit", {"x": 1})
    assert "<action>hit</action>" in action_instructions("tag", "action", "hit", {})


class Counting(GameSession):
    """A game that ends after three moves, each worth 1."""

    def parse_move(self, text):
        if text not in ("a", "b"):
            raise InvalidAction(f"{text!r} is not a move")
        return text

    async def apply(self, move):
        over = len(self.moves) >= 3
        self.won = over
        return 1.0, over, f"moved {move}"


async def test_a_session_plays_moves_and_stops_at_an_invalid_one():
    game = Counting("tag", invalid_action_penalty=-5.0)
    first = await game.step("<action>a</action>", 0)
    assert (first.done, first.reward, first.messages) == (
        False,
        1.0,
        [{"role": "user", "content": "moved a"}],
    )
    bad = await game.step("<action>c</action>", 1)
    assert bad.done and bad.reward == -5.0 and "'c' is not a move" in bad.info["invalid_action"]
    assert game.metrics() == {"won": 0.0, "invalid_action": 1.0, "moves": 1.0}
    game = Counting("tag", invalid_action_penalty=-5.0)
    for turn in range(3):
        feedback = await game.step("<action>b</action>", turn)
    assert feedback.done and game.won and game.metrics()["won"] == 1.0
