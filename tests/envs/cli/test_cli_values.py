"""String -> typed value conversion behind every CLI flag."""

from __future__ import annotations

import argparse
from typing import Any, Literal, Optional

import pytest

from atroposlib.envs.cli.values import describe_type, format_default, is_bool_annotation, make_value_parser
from atroposlib.envs.groups import EvalHandlingEnum


@pytest.mark.parametrize(
    ("annotation", "text", "expected"),
    [
        (int, "-1", -1),
        (int, "42", 42),
        (float, "-0.5", -0.5),
        (float, "3", 3.0),
        (str, "hello world", "hello world"),
        (Optional[str], "None", None),
        (Optional[int], "null", None),
        (Optional[int], "7", 7),
        (bool, "true", True),
        (bool, "False", False),
        (bool, "yes", True),
        (bool, "0", False),
        (Optional[bool], "none", None),
        (EvalHandlingEnum, "LIMIT_TRAIN", EvalHandlingEnum.LIMIT_TRAIN),
        (Literal["openai", "vllm"], "vllm", "vllm"),
        (list[str], '["+", "-"]', ["+", "-"]),
        (list[int], "[1, 2, 3]", [1, 2, 3]),
        (dict[str, int], "{a: 1}", {"a": 1}),
        (Any, "3", 3),
        (Any, "text", "text"),
    ],
)
def test_values_are_parsed_to_the_field_type(annotation, text, expected):
    assert make_value_parser(annotation)(text) == expected


@pytest.mark.parametrize(
    ("annotation", "text", "needle"),
    [
        (int, "abc", "valid integer"),
        (int, "1.5", "integer"),
        (bool, "maybe", "expected true or false"),
        (int, "None", "valid integer"),
        (EvalHandlingEnum, "SOMETIMES", "STOP_TRAIN"),
        (Literal["openai", "vllm"], "tgi", "openai"),
        (list[int], "[1, x]", "integer"),
        (list[int], "[1, 2", "not valid JSON/YAML"),
    ],
)
def test_invalid_values_raise_argparse_type_errors(annotation, text, needle):
    with pytest.raises(argparse.ArgumentTypeError) as err:
        make_value_parser(annotation)(text)
    assert needle in str(err.value)
    assert "\n" not in str(err.value)


def test_type_descriptions_and_default_rendering():
    assert describe_type(int) == "INT"
    assert describe_type(Optional[str]) == "STR|NONE"
    assert describe_type(bool) == "BOOL"
    assert describe_type(EvalHandlingEnum) == "{STOP_TRAIN,LIMIT_TRAIN,NONE}"
    assert describe_type(Literal["a", "b"]) == "{a,b}"
    assert describe_type(list[str]) == "LIST"
    assert is_bool_annotation(Optional[bool]) and not is_bool_annotation(int)
    assert format_default(None) == "None"
    assert format_default(True) == "true"
    assert format_default(EvalHandlingEnum.NONE) == "NONE"
    assert format_default(["+", "-"]) == '["+", "-"]'
    assert format_default(-1) == "-1"
