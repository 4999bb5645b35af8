"""Reading Hermes tool calls from replies and comparing them by JSON value."""

from __future__ import annotations

import pytest

from atroposlib.utils import tool_call_parser
from atroposlib.utils.tool_calls import (
    ToolCall,
    ToolCallError,
    call_from_object,
    canonical_json,
    decode_arguments,
    expected_tool_calls,
    extract_tool_call_blocks,
    json_values_equal,
    parse_call_block,
    reply_matches,
    reply_tool_calls,
    same_calls,
    split_tool_calls,
)

CONVERT = ToolCall("convert_currency", {"amount": 250, "from_currency": "USD", "to_currency": "EUR"})
PRIME_97 = ToolCall("is_prime", {"n": 97})
PRIME_91 = ToolCall("is_prime", {"n": 91})


def test_blocks_pair_up_or_the_text_is_malformed():
    assert extract_tool_call_blocks("a <tool_call> 1 </tool_call> b <tool_call>2</tool_call>") == ["1", "2"]
    assert extract_tool_call_blocks("no calls") == []
    assert extract_tool_call_blocks("<tool_call>1</tool_call><tool_call>2") is None  # unclosed
    assert extract_tool_call_blocks("1</tool_call>") is None  # closing without opening
    assert extract_tool_call_blocks("<tool_call><tool_call>1</tool_call></tool_call>") is None  # nested
    assert extract_tool_call_blocks("<fn>x</fn>", tag="fn") == ["x"]


@pytest.mark.parametrize(
    ("left", "right", "equal"),
    [
        ({"a": 1, "b": 2}, {"b": 2, "a": 1}, True),
        (250, 250.0, True),
        (0.5, 0.50, True),
        ({"x": [1, 2.0]}, {"x": [1.0, 2]}, True),
        ({"nested": {"k": [{"z": 1, "y": 2}]}}, {"nested": {"k": [{"y": 2.0, "z": 1}]}}, True),
        (True, 1, False),
        (False, 0, False),
        (None, 0, False),
        ("250", 250, False),
        ([1, 2], [2, 1], False),
        ({"a": 1}, {"a": 1, "b": None}, False),
        (0.1, 0.10000001, False),
    ],
)
def test_json_value_equality(left, right, equal):
    assert json_values_equal(left, right) is equal


def test_canonical_json_rejects_what_json_cannot_hold():
    for bad in (float("nan"), float("inf"), {1: "x"}, {1, 2}, b"x"):
        with pytest.raises(ToolCallError):
            canonical_json(bad)


def test_call_from_object_accepts_string_arguments_and_no_arguments():
    assert call_from_object({"name": "f", "arguments": '{"x": 2.0}'}) == ToolCall("f", {"x": 2})
    assert call_from_object({"name": "f"}) == ToolCall("f", {})
    assert call_from_object({"arguments": {"x": 1}, "name": "f", "id": "call_1"}) == ToolCall("f", {"x": 1})
    for bad in ([], {"arguments": {}}, {"name": "", "arguments": {}}, {"name": "f", "arguments": [1]}):
        with pytest.raises(ToolCallError):
            call_from_object(bad)
    with pytest.raises(ToolCallError):
        call_from_object({"name": "f", "arguments": "{not json"})


def test_same_calls_is_a_multiset_comparison():
    assert same_calls([PRIME_91, PRIME_97], [PRIME_97, PRIME_91])
    assert not same_calls([PRIME_97], [PRIME_97, PRIME_91])
    assert not same_calls([PRIME_97, PRIME_97], [PRIME_97, PRIME_91])  # a repeat is not the other call
    assert not same_calls([PRIME_97, PRIME_91, PRIME_91], [PRIME_97, PRIME_91])


# Right answers in other equivalent forms.
@pytest.mark.parametrize(
    "reply",
    [
        '<tool_call>{"name": "convert_currency", "arguments": '
        '{"amount": 250, "from_currency": "USD", "to_currency": "EUR"}}</tool_call>',
        '<tool_call>{"arguments": {"to_currency": "EUR", "amount": 250.0, "from_currency": "USD"}, '
        '"name": "convert_currency"}</tool_call>',
        '<tool_call>{"name": "convert_currency", "arguments": '
        '"{\\"amount\\": 2.5e2, \\"from_currency\\": \\"USD\\", \\"to_currency\\": \\"EUR\\"}"}</tool_call>',
        "<think>The user wants euros.</think>\nSure, converting now.\n<tool_call>\n"
        '{"name": "convert_currency", "arguments": {"amount": 250, "from_currency": "USD", '
        '"to_currency": "EUR"}}\n</tool_call>',
    ],
)
def test_equivalent_replies_match(reply):
    assert reply_matches(reply, [CONVERT])


# Wrong answers, hedges, malformed replies and the first hacks.
@pytest.mark.parametrize(
    "reply",
    [
        "",  # empty reply
        "I would convert 250 USD to EUR.",  # no call
        '<tool_call>{"name": "convert_money", "arguments": '
        '{"amount": 250, "from_currency": "USD", "to_currency": "EUR"}}</tool_call>',  # wrong name
        '<tool_call>{"name": "convert_currency", "arguments": '
        '{"amount": 205, "from_currency": "USD", "to_currency": "EUR"}}</tool_call>',  # wrong value
        '<tool_call>{"name": "convert_currency", "arguments": '
        '{"amount": "250", "from_currency": "USD", "to_currency": "EUR"}}</tool_call>',  # string, not number
        '<tool_call>{"name": "convert_currency", "arguments": {"amount": 250, "from_currency": "USD"}}'
        "</tool_call>",  # missing argument
        '<tool_call>{"name": "convert_currency", "arguments": {"amount": 250, "from_currency": "USD", '
        '"to_currency": "EUR", "round": true}}</tool_call>',  # extra argument
        '<tool_call>{"name": "convert_currency", "arguments": {"amount": 250, "from_currency": "USD", '
        '"to_currency": "EUR"}</tool_call>',  # malformed JSON (a brace short)
        "<tool_call>{'name': 'convert_currency', 'arguments': {'amount': 250, 'from_currency': 'USD', "
        "'to_currency': 'EUR'}}</tool_call>",  # not JSON (Python quotes)
        '<tool_call>{"name": "convert_currency", "arguments": {"amount": 250, "from_currency": "USD", '
        '"to_currency": "EUR"}}',  # unclosed tag
        '<think><tool_call>{"name": "convert_currency", "arguments": {"amount": 250, "from_currency": '
        '"USD", "to_currency": "EUR"}}</tool_call></think>The call is above.',  # call only inside think
        '<think>let me think <tool_call>{"name": "convert_currency", "arguments": {"amount": 250, '
        '"from_currency": "USD", "to_currency": "EUR"}}</tool_call>',  # think never closes
        # several conflicting answers (a hedge)
        '<tool_call>{"name": "convert_currency", "arguments": {"amount": 250, "from_currency": "USD", '
        '"to_currency": "EUR"}}</tool_call><tool_call>{"name": "convert_currency", "arguments": '
        '{"amount": 250, "from_currency": "USD", "to_currency": "GBP"}}</tool_call>',
        # the right call plus a malformed one
        '<tool_call>{"name": "convert_currency", "arguments": {"amount": 250, "from_currency": "USD", '
        '"to_currency": "EUR"}}</tool_call><tool_call>oops</tool_call>',
        # a repeated key hides a second value
        '<tool_call>{"name": "convert_currency", "arguments": {"amount": 1, "amount": 250, '
        '"from_currency": "USD", "to_currency": "EUR"}}</tool_call>',
    ],
)
def test_wrong_or_malformed_replies_do_not_match(reply):
    assert not reply_matches(reply, [CONVERT])


def test_parallel_calls_in_any_order():
    right = (
        '<tool_call>{"name": "is_prime", "arguments": {"n": 91}}</tool_call>\n'
        '<tool_call>{"name": "is_prime", "arguments": {"n": 97.0}}</tool_call>'
    )
    assert reply_matches(right, [PRIME_97, PRIME_91])
    only_one = '<tool_call>{"name": "is_prime", "arguments": {"n": 97}}</tool_call>'
    assert not reply_matches(only_one, [PRIME_97, PRIME_91])
    assert not reply_matches(right + "\n" + only_one, [PRIME_97, PRIME_91])


def test_booleans_are_not_numbers():
    expected = [ToolCall("set_timer", {"minutes": 15, "silent": True})]
    assert reply_matches(
        '<tool_call>{"name": "set_timer", "arguments": {"minutes": 15, "silent": true}}</tool_call>', expected
    )
    assert not reply_matches(
        '<tool_call>{"name": "set_timer", "arguments": {"minutes": 15, "silent": 1}}</tool_call>', expected
    )


def test_reply_tool_calls_reports_malformed_as_none():
    assert reply_tool_calls("no calls") == []
    assert reply_tool_calls('<tool_call>{"name": "f", "arguments": {}}</tool_call>') == [ToolCall("f", {})]
    assert reply_tool_calls("<tool_call>[]</tool_call>") is None
    assert reply_tool_calls('<tool_call>{"name": "f", "arguments": {"x": NaN}}</tool_call>') is None
    assert not reply_matches("anything", [])  # no expected calls: nothing can match


def test_expected_calls_accept_python_literals():
    text = "<tool_call>\n{'name': 'set_timer', 'arguments': {'minutes': 15, 'label': 'tea', 'silent': True}}\n</tool_call>"
    assert expected_tool_calls(text) == [
        ToolCall("set_timer", {"minutes": 15, "label": "tea", "silent": True})
    ]
    both = '<tool_call>{"name": "is_prime", "arguments": {"n": 97}}</tool_call><tool_call>{"name": "is_prime", "arguments": {"n": 91}}</tool_call>'
    assert expected_tool_calls(both) == [PRIME_97, PRIME_91]
    for bad in (
        "no call",
        "<tool_call>not a call</tool_call>",
        "<tool_call>{'name': 'f'}",
        "<tool_call>[1]</tool_call>",
    ):
        with pytest.raises(ToolCallError):
            expected_tool_calls(bad)


def test_to_text_round_trips():
    assert reply_tool_calls(CONVERT.to_text() + PRIME_97.to_text()) == [CONVERT, PRIME_97]


def test_the_compat_module_re_exports_the_one_reader():
    from atroposlib.utils import tool_calls

    for name in ("extract_tool_call", "extract_tool_call_blocks", "parse_tool_call", "ERROR_TOOL_NAME"):
        assert getattr(tool_call_parser, name) is getattr(tool_calls, name)


def test_a_block_is_one_call_in_strict_json():
    assert parse_call_block('{"name": "f", "arguments": "{\\"x\\": 1.0}"}') == ToolCall("f", {"x": 1})
    for bad in ('{"name": "f", "name": "g"}', "{'name': 'f'}", '{"name": "f", "arguments": NaN}', "[1]"):
        with pytest.raises(ToolCallError):
            parse_call_block(bad)


def test_arguments_are_decoded_as_written():
    assert decode_arguments('{"x": 1.0}') == {"x": 1.0}
    assert decode_arguments("  ") == {}
    assert decode_arguments([1]) == [1]
    with pytest.raises(ToolCallError):
        decode_arguments("{oops")


def test_text_splits_into_content_and_calls():
    text = (
        'Checking.\n<tool_call>{"name": "f", "arguments": {}}</tool_call><tool_call>{"name": "g"}</tool_call>'
    )
    assert split_tool_calls(text) == ("Checking.\n", [ToolCall("f", {}), ToolCall("g", {})])
    assert split_tool_calls("no calls") == ("no calls", [])
    assert split_tool_calls('<tool_call>{"name": "f"}') is None
    assert split_tool_calls("<tool_call>{}</tool_call>") is None
