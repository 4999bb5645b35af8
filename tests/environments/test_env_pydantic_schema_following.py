"""The schema-following environment: models rebuilt without running their source, JSON extraction, scoring,
data loading, ``process`` and ``evaluate``."""

from __future__ import annotations

import json

import pytest
from pydantic import ValidationError

from atroposlib.utils.pydantic_source import UnsupportedSource, model_from_source
from environments.pydantic_schema_following_environment import (
    PydanticEnvConfig,
    PydanticSchemaFollowingEnv,
    extract_json,
    score_reply,
    target_for,
)
from tests.helpers.cli_runs import FIXTURES, read_jsonl
from tests.helpers.single_turn_runs import (
    check_groups,
    offline_env,
    prompt_text,
    setup_failure,
    write_jsonl,
)

SAMPLE = FIXTURES / "pydantic_schema_sample.jsonl"
ROWS = {row["problem_id"]: row for row in read_jsonl(SAMPLE)}
TARGETS = {pid: target_for(row["verification_info"]) for pid, row in ROWS.items()}

VALID = {
    "schema-1": {"title": "Moby-Dick", "author": "Herman Melville", "year": 1851},
    "schema-2": {
        "order_id": 7,
        "email": "ana@example.com",
        "placed": "2024-03-05",
        "lines": [{"sku": "ABC-123", "quantity": 2}],
    },  # fmt: skip
    "schema-3": {"x": 3, "y": 4.0},
    "schema-4": {"city": "Paris", "population": 2102650},
    "schema-5": {"username": "dev_kim", "age": 29},
}
INVALID = {
    "schema-1": {"title": "Moby-Dick", "author": "Herman Melville", "year": 1200},
    "schema-2": {"order_id": 7, "email": "ana@example.com", "placed": "2024-03-05", "lines": [], "x": 1},
    "schema-3": {"x": 3, "y": 4, "unit": "miles"},
    "schema-4": {"city": "Paris", "population": -1},
    "schema-5": {"username": "Dev Kim!", "age": 29},
}


def _fenced(value) -> str:
    return f"```json\n{json.dumps(value)}\n```"


# ------------------------------------------------------------------------------------------- model source
def test_model_source_is_rebuilt_not_executed(tmp_path):
    marker = tmp_path / "ran"
    source = f"""
from pydantic import BaseModel, Field, field_validator
class Note(BaseModel):
    text: str = Field(max_length=5)

    @field_validator("text")
    def touch(cls, value):
        open({str(marker)!r}, "w").write("code ran")
        return value
"""
    model = model_from_source(source, "Note")
    assert model.model_validate_json('{"text": "hi"}').text == "hi"
    assert not marker.exists()  # validator bodies are code: never run
    with pytest.raises(ValidationError):
        model.model_validate_json('{"text": "far too long"}')


@pytest.mark.parametrize(
    ("source", "message"),
    [
        ("import os\nos.system('touch /tmp/x')", "unsupported top-level statement"),
        ("from pydantic import BaseModel\nclass A(BaseModel):\n    x: int = compute()", "not a literal"),
        (
            "from pydantic import BaseModel\nclass A(BaseModel):\n    x: 'B'\nclass B(BaseModel):\n    y: int",
            "unknown type B",
        ),
        ("class A:\n    x = 1", "neither a BaseModel nor an Enum"),
        (
            "from pydantic import BaseModel\nclass A(BaseModel):\n    x: int\n    print('hi')",
            "unsupported statement",
        ),
        ("class A(BaseModel)\n", "not valid Python"),
        ("from pydantic import BaseModel\nclass B(BaseModel):\n    x: int", "no model named 'A'"),
        (
            "from pydantic import BaseModel, Field\nclass A(BaseModel):\n    x: int = Field(default_factory=make)",
            "default_factory",
        ),
    ],
)
def test_unsupported_source(source, message):
    with pytest.raises(UnsupportedSource, match=message):
        model_from_source(source, "A")


def test_rebuilt_models_keep_types_constraints_and_config():
    order = TARGETS["schema-2"].model
    parsed = order.model_validate_json(json.dumps(VALID["schema-2"]))
    assert parsed.status.value == "pending" and str(parsed.placed) == "2024-03-05"
    assert not TARGETS["schema-2"].accepts(json.dumps({**VALID["schema-2"], "extra": 1}))  # extra="forbid"
    assert not TARGETS["schema-2"].accepts(json.dumps({**VALID["schema-2"], "email": "not-an-email"}))
    assert not TARGETS["schema-2"].accepts(
        json.dumps({**VALID["schema-2"], "lines": [{"sku": "abc", "quantity": 1}]})
    )


# ------------------------------------------------------------------------------------------- scoring
@pytest.mark.parametrize("pid", sorted(VALID))
def test_valid_and_invalid_json_per_row(pid):
    assert score_reply(_fenced(VALID[pid]), TARGETS[pid]) == 1.0
    assert score_reply(_fenced(INVALID[pid]), TARGETS[pid]) == 0.0


@pytest.mark.parametrize(
    ("reply", "expected"),
    [
        ('```json\n{"x": 3, "y": 4}\n```', 1.0),
        ('<think>east is x</think>Here it is:\n```json\n{"y": 4, "x": 3.0}\n```', 1.0),  # key order, 3 = 3.0
        ('```\n{"x": 3, "y": 4}\n```', 1.0),  # an untagged fence
        ('<json_output>{"x": 3, "y": 4, "unit": "km"}</json_output>', 1.0),  # the original's tags
        ('{"x": 3, "y": 4}', 1.0),  # the whole answer is JSON
        ('```json\n{"x": 3, "y": 4}\n```\nSame again: ```json\n{"y": 4, "x": 3}\n```', 1.0),
        ('```json\n{"x": "three", "y": 4}\n```', 0.0),  # wrong type
        ('```json\n{"x": 3}\n```', 0.0),  # missing field
        ('```json\n{"x": 3, "y": 4,}\n```', 0.0),  # malformed JSON
        ('<think>```json\n{"x": 3, "y": 4}\n```</think>I cannot say.', 0.0),  # only inside the reasoning
        ('```json\n{"x": 3, "y": 4}\n```\nor ```json\n{"x": 4, "y": 3}\n```', 0.0),  # several answers
        ('The point is {"x": 3, "y": 4}.', 0.0),  # prose around bare JSON
        ('<think>open ```json\n{"x": 3, "y": 4}\n```', 0.0),  # unclosed reasoning
        ("", 0.0),
    ],
)
def test_reply_forms(reply, expected):
    assert score_reply(reply, TARGETS["schema-3"]) == expected


def test_extract_json():
    assert extract_json('<think>x</think>\n{"a": 1}\n') == '{"a": 1}'
    assert extract_json("```json\n[1, 2]\n```") == "[1, 2]"
    assert extract_json("no json here") is None


# ------------------------------------------------------------------------------------------- data
def _env(tiny_model_dir, **overrides) -> PydanticSchemaFollowingEnv:
    return offline_env(PydanticSchemaFollowingEnv, tiny_model_dir, **overrides)


async def test_local_rows_and_held_out_split(tiny_model_dir):
    env = _env(tiny_model_dir, dataset_path=str(SAMPLE), eval_fraction=0.2)
    await env.setup()
    assert len(env.test_items) == 1 and len(env.train_items) == 4
    ids = {i.problem_id for i in env.train_items + env.test_items}
    assert ids == set(ROWS)


async def test_unsupported_rows_are_skipped_with_a_warning(tiny_model_dir, tmp_path, caplog):
    bad = {
        "prompt": "p",
        "verification_info": json.dumps({"pydantic_config": "import os\nos.remove('x')", "model_name": "A"}),
    }
    env = _env(tiny_model_dir, dataset_path=write_jsonl(tmp_path / "rows.jsonl", [bad, *ROWS.values()]))
    await env.setup()
    assert len(env.train_items) + len(env.test_items) == 5
    assert "skipped 1 of 6 rows" in caplog.text and "row 0" in caplog.text
    only_bad = _env(tiny_model_dir, dataset_path=write_jsonl(tmp_path / "rows.jsonl", [bad]))
    await setup_failure(only_bad, "no usable rows")


@pytest.mark.parametrize(
    ("rows", "message"),
    [
        ([{"prompt": "p"}], "row 0: missing field 'verification_info'"),
        ([{"prompt": "p", "verification_info": "{not json"}], "row 0: field 'verification_info': .*not JSON"),
        ([{"prompt": "p", "verification_info": {"model_name": "A"}}], "needs pydantic_config and model_name"),
        ([{"prompt": "p", "verification_info": {"json_schema": {"type": 5}}}], "not a valid JSON Schema"),
        ([], "no rows"),
    ],
)
async def test_bad_local_files(tiny_model_dir, tmp_path, rows, message):
    path = write_jsonl(tmp_path / "rows.jsonl", rows)
    assert path in str(await setup_failure(_env(tiny_model_dir, dataset_path=path), message))


async def test_hub_is_the_default(tiny_model_dir, hub_offline):
    await setup_failure(_env(tiny_model_dir), "justus27/pydantic-adherance-test: cannot load from the hub")


# ------------------------------------------------------------------------------------------- runs
def _responder():
    """Valid JSON for even choice indices, JSON breaking the schema for odd ones."""
    prompts = {row["prompt"].split("\n")[0]: pid for pid, row in ROWS.items()}

    def respond(prompt, index):
        text = prompt_text(prompt)
        pid = next((p for first_line, p in prompts.items() if first_line in text), None)
        if pid is None:
            return "no idea"
        value = VALID[pid] if index % 2 == 0 else INVALID[pid]
        return f"<think>Filling in every field.</think>{_fenced(value)}"

    return respond


def test_process_with_a_local_file(scripted):
    args = ["--env.dataset_path", SAMPLE, "--env.group_size", "2", "--env.total_steps", "3",
            "--env.max_tokens", "200"]  # fmt: skip
    groups = scripted.process(PydanticSchemaFollowingEnv, args, _responder())
    check_groups(groups, 3, [0.0, 1.0])


def test_evaluate_reports_accuracy(scripted):
    metrics, samples, out = scripted.evaluate(
        PydanticSchemaFollowingEnv,
        ["--env.dataset_path", SAMPLE, "--env.eval_dataset_path", SAMPLE, "--env.max_tokens", "200"],
        _responder(),
    )
    assert metrics["eval/percent_correct"] == 1.0
    assert len(samples) == 5 and {s["problem_id"] for s in samples} == set(ROWS)
    assert "pydantic_schema_following evaluation: percent_correct=1.0000" in out


# ------------------------------------------------------------------------------ 0.4.0's editing task
async def _editing_items(tiny_model_dir, **settings):
    env = _env(tiny_model_dir, dataset_path=str(SAMPLE), eval_dataset_path=str(SAMPLE), **settings)
    await env.setup()
    return env, env.eval_items()


def _shown(item):
    return json.loads(item.shown_json)


async def test_editing_shows_a_broken_instance_of_the_model(tiny_model_dir):
    env, items = await _editing_items(tiny_model_dir, task_type="editing", error_introduction_seed=5)
    editable = [item for item in items if item.shown_json is not None]
    assert {item.problem_id for item in editable} == {"schema-1", "schema-3", "schema-4"}  # no pattern fields
    for item in editable:
        assert len(item.errors) == 1 and item.errors[0] in env.config.error_types_enabled
        assert not item.target.accepts(item.shown_json)  # the shown JSON breaks the model
        messages = env.prompt_messages(item)
        assert item.prompt in messages[1]["content"] and item.shown_json in messages[1]["content"]
        assert "Correct it" in messages[1]["content"]
    generation = [item for item in items if item.shown_json is None]
    assert all(env.prompt_messages(item)[1]["content"] == item.prompt for item in generation)
    again = (await _editing_items(tiny_model_dir, task_type="editing", error_introduction_seed=5))[1]
    assert [i.shown_json for i in again] == [i.shown_json for i in items]  # seeded
    _, plain = await _editing_items(tiny_model_dir)
    assert all(item.shown_json is None for item in plain)  # task_type generation (the default)


async def test_error_settings_shape_the_shown_json(tiny_model_dir):
    _, clean = await _editing_items(tiny_model_dir, task_type="editing", error_introduction_probability=0.0)
    for item in (i for i in clean if i.shown_json is not None):
        assert item.errors == () and item.target.accepts(item.shown_json)
    _, missing = await _editing_items(
        tiny_model_dir, task_type="editing", error_types_enabled=["required_field_missing"]
    )
    book = next(i for i in missing if i.problem_id == "schema-1")
    assert book.errors == ("required_field_missing",) and len(_shown(book)) == 2
    _, two = await _editing_items(
        tiny_model_dir, task_type="editing", max_errors_per_item=2, error_types_enabled=["constraint_error"]
    )
    book = next(i for i in two if i.problem_id == "schema-1")
    assert book.errors == ("constraint_error", "constraint_error")
    with pytest.raises(ValidationError, match="error types must be some of"):
        PydanticEnvConfig(error_types_enabled=["typo_error"])
    assert PydanticEnvConfig(eval_set_percentage=0.3).eval_fraction == 0.3


def test_process_runs_the_editing_task_from_a_config_in_0_4_0_form(scripted, tmp_path):
    config = tmp_path / "editing.yaml"
    config.write_text(
        f"env:\n  dataset_path: {SAMPLE}\n  group_size: 2\n  total_steps: 4\n  max_tokens: 200\n"
        "  task_type: editing\n  error_types_enabled: [type_error]\n  error_introduction_seed: 1\n"
    )
    scripted.command(PydanticSchemaFollowingEnv, "process", ["--config", config], _responder())
    groups = read_jsonl(tmp_path / "data" / "pydantic_schema_following.jsonl")
    check_groups(groups, 4, [0.0, 1.0])
    edited = [g for g in groups if "may not validate" in g["messages"][0][1]["content"]]
    assert edited  # editing questions were asked (rows with pattern fields stay generation questions)
