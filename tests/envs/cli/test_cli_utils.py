"""``atroposlib.utils.cli``: the namespaced-model helpers environment authors can import."""

from __future__ import annotations

from pydantic import BaseModel, Field

from atroposlib.utils.cli import (
    adjust_model_defaults,
    extract_namespace,
    get_double_dash_flags,
    get_prefixed_pydantic_model,
    merge_dicts,
)


class Sample(BaseModel):
    size: int = Field(4, description="how many")
    tags: list[str] = Field(default_factory=list)
    name: str


def test_prefixed_model_renames_fields_and_keeps_defaults():
    prefixed = get_prefixed_pydantic_model(Sample, "env.")
    fields = prefixed.model_fields
    assert set(fields) == {"env.size", "env.tags", "env.name"}
    assert fields["env.size"].default == 4
    assert fields["env.size"].description == "how many"
    assert fields["env.tags"].default_factory is list
    assert fields["env.name"].is_required()
    made = prefixed(**{"env.name": "x"})
    assert getattr(made, "env.size") == 4


def test_merge_dicts_is_recursive_right_biased_and_pure():
    base = {"a": 1, "nested": {"x": 1, "y": 2}}
    override = {"nested": {"y": 3}, "b": 2}
    merged = merge_dicts(base, None, override)
    assert merged == {"a": 1, "b": 2, "nested": {"x": 1, "y": 3}}
    assert base == {"a": 1, "nested": {"x": 1, "y": 2}}
    merged["nested"]["x"] = 99
    assert base["nested"]["x"] == 1


def test_extract_namespace_accepts_models_objects_and_dicts():
    prefixed = get_prefixed_pydantic_model(Sample, "env.")(**{"env.name": "n", "env.size": 2})
    assert extract_namespace(prefixed, "env.") == {"size": 2, "tags": [], "name": "n"}
    assert extract_namespace({"openai.base_url": "u", "slurm": True}, "openai.") == {"base_url": "u"}

    class WithToDict:
        def to_dict(self):
            return {"env.a": 1, "b": 2}

    assert extract_namespace(WithToDict(), "env.") == {"a": 1}


def test_adjust_model_defaults_makes_a_subclass_with_new_defaults():
    adjusted = adjust_model_defaults(Sample, {"size": 9, "unknown": 1, "tags": ["t"]})
    assert adjusted.__name__ == "SampleWithDefaults"
    assert issubclass(adjusted, Sample)
    first = adjusted(name="a")
    second = adjusted(name="b")
    assert first.size == 9 and first.tags == ["t"]
    first.tags.append("changed")
    assert second.tags == ["t"]
    from_model = adjust_model_defaults(Sample, Sample(name="z", size=7))
    assert from_model().name == "z" and from_model().size == 7


def test_double_dash_flags_keeps_the_documented_reading():
    argv = ["process", "--env.a=1", "--env.b", "two", "--slurm", "--env.c", "None", "--env.d", "-1"]
    flags = get_double_dash_flags(argv)
    assert flags == {"env.a": "1", "env.b": "two", "slurm": True, "env.c": None, "env.d": True}
