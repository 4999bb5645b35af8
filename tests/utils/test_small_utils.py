"""best-of-n selection, tool-call parsing, metric summaries and the eval metrics table."""

from __future__ import annotations

import numpy as np
import pytest

from atroposlib.utils.best_of_n_selection import select_best_index
from atroposlib.utils.display import display_metrics_table, format_metrics_table
from atroposlib.utils.metrics import get_std_min_max_avg
from atroposlib.utils.tool_call_parser import extract_tool_call, parse_tool_call

# -- select_best_index ---------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("primary", "secondary", "kwargs", "expected"),
    [
        ([1, 3, 2], [0, 0, 0], {}, 1),
        ([1, 3, 3], [5, 4, 2], {}, 2),  # tie on primary: lower secondary wins
        ([1, 3, 3], [5, 2, 4], {}, 1),
        ([3, 3, 3], [1, 1, 1], {}, 0),  # full tie: first index
        ([1, 3, 3], [5, 2, 4], {"secondary_lower_is_better": False}, 2),
        ([1, 3, 0], [0, 0, 0], {"primary_higher_is_better": False}, 2),
        ([0, 0, 1], [9, 7, 8], {"primary_higher_is_better": False}, 1),
        ([0.5], [10], {}, 0),
        ([-1.0, -0.5, -0.5], [3, 2, 2], {}, 1),
    ],
)
def test_select_best_index(primary, secondary, kwargs, expected):
    assert select_best_index(primary, secondary, **kwargs) == expected


def test_select_best_index_rejects_bad_input():
    with pytest.raises(ValueError, match="empty"):
        select_best_index([], [])
    with pytest.raises(ValueError, match="2 primary scores but 1 secondary"):
        select_best_index([1, 2], [1])


# -- tool calls ----------------------------------------------------------------------------------------

TOOLS_PLAIN = [{"name": "search"}, {"name": "calc"}]
TOOLS_OPENAI = [{"type": "function", "function": {"name": "calc", "parameters": {}}}]


def test_extract_tool_call():
    assert extract_tool_call('a <tool_call>\n {"x": 1} \n</tool_call> b') == '{"x": 1}'
    assert extract_tool_call("<tool_call>first</tool_call><tool_call>second</tool_call>") == "first"
    assert extract_tool_call("no call here") is None
    assert extract_tool_call("<call>x</call>", preferred_tags=["tool_call", "call"]) == "x"
    assert extract_tool_call("<tool_call>a\nb</tool_call>") == "a\nb"
    assert extract_tool_call(None) is None


def test_parse_tool_call_valid():
    text = 'I will call it. <tool_call>{"name": "calc", "arguments": {"x": 2, "y": [1, 2]}}</tool_call>'
    assert parse_tool_call(text) == ("calc", {"x": 2, "y": [1, 2]}, False)
    assert parse_tool_call(text, TOOLS_PLAIN) == ("calc", {"x": 2, "y": [1, 2]}, False)
    assert parse_tool_call(text, TOOLS_OPENAI) == ("calc", {"x": 2, "y": [1, 2]}, False)


def test_parse_tool_call_single_quotes_and_apostrophes():
    text = "<tool_call>{'name': 'search', 'arguments': {'query': 'Paris'}}</tool_call>"
    assert parse_tool_call(text) == ("search", {"query": "Paris"}, False)
    # Valid JSON is parsed as it is, so apostrophes inside strings survive.
    text = '<tool_call>{"name": "search", "arguments": {"query": "Lou\'s cafe"}}</tool_call>'
    assert parse_tool_call(text) == ("search", {"query": "Lou's cafe"}, False)


def test_parse_tool_call_string_arguments_are_decoded():
    text = '<tool_call>{"name": "calc", "arguments": "{\\"x\\": 1}"}</tool_call>'
    assert parse_tool_call(text) == ("calc", {"x": 1}, False)


def test_parse_tool_call_errors():
    assert parse_tool_call("plain text") == ("-ERROR-", {}, True)
    assert parse_tool_call("<tool_call>not json</tool_call>") == ("-ERROR-", {}, True)
    assert parse_tool_call("<tool_call>[1, 2]</tool_call>") == ("-ERROR-", {}, True)
    unknown = '<tool_call>{"name": "delete", "arguments": {"id": 3}}</tool_call>'
    assert parse_tool_call(unknown, TOOLS_PLAIN) == ("-ERROR-", {"id": 3}, True)
    nameless = '<tool_call>{"arguments": {"id": 3}}</tool_call>'
    assert parse_tool_call(nameless, TOOLS_PLAIN) == ("-ERROR-", {"id": 3}, True)
    assert parse_tool_call(nameless) == ("", {"id": 3}, False)


def test_parse_tool_call_preferred_tags():
    text = '<function>{"name": "calc", "arguments": {}}</function>'
    assert parse_tool_call(text)[2] is True
    assert parse_tool_call(text, preferred_tags=["function"]) == ("calc", {}, False)


# -- metrics -------------------------------------------------------------------------------------------


def test_get_std_min_max_avg():
    metrics = {"other": 1}
    out = get_std_min_max_avg("train/x", [1, 2, 3, 4], metrics)
    assert out is metrics
    assert out == {
        "other": 1,
        "train/x_mean": 2.5,
        "train/x_std": pytest.approx(float(np.std([1, 2, 3, 4]))),
        "train/x_max": 4.0,
        "train/x_min": 1.0,
    }
    assert all(type(out[k]) is float for k in out if k.startswith("train/x"))


def test_get_std_min_max_avg_empty_is_a_clear_error():
    with pytest.raises(ValueError, match="no data for metric 'x'"):
        get_std_min_max_avg("x", [], {})


# -- display -------------------------------------------------------------------------------------------


def test_metrics_table_layout():
    table = format_metrics_table("gsm8k@1", {"eval/percent_correct": 0.5, "eval/avg_len": 123.456789})
    assert table.splitlines() == [
        "|Groups |Version|Filter|n-shot|Metric         |   |   Value|   |Stderr|",
        "|-------|-------|------|------|---------------|---|-------:|---|-----:|",
        "|gsm8k@1|1      |none  |      |percent correct| ↑ |  0.5000| ± |0.0000|",
        "|gsm8k@1|1      |none  |      |avg len        |   |123.4568| ± |0.0000|",
    ]


def test_metrics_table_puts_a_stderr_key_in_the_stderr_column():
    table = format_metrics_table(
        "mmlu", {"eval/accuracy": 0.375, "eval/accuracy_stderr": 0.18298, "eval/num_items": 8}
    )
    assert table.splitlines()[2:] == [
        "|mmlu  |1      |none  |      |accuracy | ↑ |0.3750| ± |0.1830|",
        "|mmlu  |1      |none  |      |num items|   |8.0000| ± |0.0000|",
    ]


def test_display_metrics_table_prints_title_table_and_time(capsys):
    display_metrics_table("task", {"eval/acc": 1.0}, 100.0, 102.5)
    out = capsys.readouterr().out
    assert "Evaluation Results: task" in out
    assert "|task  |1      |none  |      |acc   | ↑ |1.0000| ± |0.0000|" in out
    assert out.rstrip().endswith("Evaluation completed in 2.50 seconds")


def test_display_metrics_table_without_metrics(capsys):
    display_metrics_table("task", {}, 0.0, 1.0)
    assert "(no metrics)" in capsys.readouterr().out
