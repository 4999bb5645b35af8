"""Schema following: the reply must be JSON that validates against the row's pydantic model (or JSON Schema).

Data: by default the original's hub set ``justus27/pydantic-adherance-test`` (``--env.dataset_name``,
``--env.dataset_split``). Local files (``--env.dataset_path``, ``--env.eval_dataset_path``) use the same
schema: ``prompt`` (the request, which states the model) and ``verification_info``, a JSON object (or its
JSON text) holding either

* ``pydantic_config`` (Python source declaring the models) and ``model_name`` (the target model), or
* ``json_schema`` (a JSON Schema, checked with ``jsonschema``).

The model source is never executed: :func:`atroposlib.utils.pydantic_source.model_from_source` rebuilds the
declared fields, types, constraints, enums and ``model_config`` from the syntax tree with
``pydantic.create_model``; custom validator functions in the source are not run (their bodies are code).
Rows whose source uses constructs outside that subset are skipped at start-up with one warning line; a set
left empty is an error. Without an evaluation file, ``eval_fraction`` of the rows (at least one) is held out.

Reply form: optional reasoning in ``<think>...</think>``, then the JSON in a ```json fenced block, in
``<json_output>...</json_output>`` tags (the original's form), or as the whole rest of the reply. Reward: 1.0
when that JSON validates against the model, 0.0 when it does not, is malformed, is missing, appears only inside
the reasoning, or when the reply gives several JSON answers that differ.

Error fixing (``--env.task_type editing``, atroposlib 0.4.0's editing task): each question shows a JSON
instance of the row's model, built from the model's schema, into which up to ``max_errors_per_item`` errors
of ``error_types_enabled`` (type, format, constraint, enum, missing required field, extra field, nested,
list) were put with probability ``error_introduction_probability`` (seeded by ``error_introduction_seed``,
else ``seed``, and the item's draw), and asks for the corrected JSON; the reward is the same validation.
Rows for whose model no instance can be built (a string ``pattern``, for one) stay generation questions.

``python environments/pydantic_schema_following_environment.py {serve,process,evaluate} --openai.base_url ...``
"""

from __future__ import annotations

import json
import logging
import random
import re
from dataclasses import dataclass, replace
from typing import Any, Literal, Optional

import jsonschema
from pydantic import BaseModel, Field, ValidationError, field_validator

from atroposlib.envs.config_defaults import LocalServerDefaults
from atroposlib.envs.data_loading import DatasetError, hub_split, load_rows
from atroposlib.envs.env_config import ORIGINAL_DUMP_AND_LOG_KEYS
from atroposlib.envs.single_turn import SingleTurnEnv, SingleTurnEnvConfig
from atroposlib.utils.pydantic_source import UnsupportedSource, model_from_source
from atroposlib.utils.replies import answer_section
from atroposlib.utils.schema_errors import ERROR_TYPES, introduce_errors, valid_instance

logger = logging.getLogger(__name__)

HUB_DATASET = "justus27/pydantic-adherance-test"
SYSTEM_PROMPT = (
    "You produce JSON objects that follow a given schema. You may think first: put your reasoning inside "
    "<think> </think> tags. After the reasoning, give exactly one JSON value in a ```json fenced code block. "
    "It must satisfy every field, type and constraint of the schema."
)
_JSON_OUTPUT = re.compile(r"<json_output>(.*?)</json_output>", re.DOTALL | re.IGNORECASE)
_FENCE = re.compile(r"```[ \t]*(json)?[ \t]*\n(.*?)```", re.DOTALL | re.IGNORECASE)


class JsonTarget:
    """What a reply's JSON must satisfy: a rebuilt pydantic model or a JSON Schema."""

    def __init__(self, model: Optional[type[BaseModel]] = None, schema: Optional[dict] = None) -> None:
        self.model = model
        self.validator = jsonschema.Draft202012Validator(schema) if schema is not None else None

    @property
    def schema(self) -> dict:
        """The JSON Schema of the target."""
        return self.model.model_json_schema() if self.model is not None else self.validator.schema

    def accepts_value(self, value: Any) -> bool:
        """Whether the JSON value ``value`` validates."""
        return self.accepts(json.dumps(value))

    def accepts(self, text: str) -> bool:
        """Whether the JSON ``text`` validates."""
        if self.model is not None:
            try:
                self.model.model_validate_json(text)
            except ValidationError:
                return False
            return True
        try:
            return self.validator.is_valid(json.loads(text))
        except ValueError:
            return False


def target_for(verification_info: Any) -> JsonTarget:
    """The :class:`JsonTarget` a row's ``verification_info`` describes.

    Raises :class:`ValueError` (one line) for info that is not a JSON object with ``pydantic_config`` and
    ``model_name`` or with a valid ``json_schema``, and :class:`UnsupportedSource` for model source outside
    the supported subset.
    """
    info = verification_info
    if isinstance(info, str):
        try:
            info = json.loads(info)
        except json.JSONDecodeError as exc:
            raise ValueError(f"verification_info is not JSON ({exc.msg})") from None
    if not isinstance(info, dict):
        raise ValueError("verification_info must be a JSON object")
    if "json_schema" in info:
        schema = info["json_schema"]
        try:
            jsonschema.Draft202012Validator.check_schema(schema)
        except jsonschema.SchemaError as exc:
            raise ValueError(f"json_schema is not a valid JSON Schema ({exc.message})") from None
        return JsonTarget(schema=schema)
    if not (isinstance(info.get("pydantic_config"), str) and isinstance(info.get("model_name"), str)):
        raise ValueError("verification_info needs pydantic_config and model_name, or json_schema")
    return JsonTarget(model=model_from_source(info["pydantic_config"], info["model_name"]))


def extract_json(reply: str) -> Optional[str]:
    """The JSON text a reply answers with (see the module docstring), or None.

    None when the reasoning is malformed, no candidate is found, a candidate is not valid JSON, or candidates
    hold different values.
    """
    section = answer_section(reply)
    if section is None:
        return None
    candidates = [m.strip() for m in _JSON_OUTPUT.findall(section)]
    candidates += [body.strip() for _tag, body in _FENCE.findall(section)]
    if not candidates:
        stripped = section.strip()
        if not stripped.startswith(("{", "[")):
            return None
        candidates = [stripped]
    values = []
    for candidate in candidates:
        try:
            values.append(json.loads(candidate))
        except json.JSONDecodeError:
            return None
    if any(value != values[0] for value in values[1:]):
        return None
    return candidates[0]


def score_reply(reply: str, target: JsonTarget) -> float:
    """1.0 when the reply's JSON validates against ``target``, else 0.0."""
    text = extract_json(reply)
    return 1.0 if text is not None and target.accepts(text) else 0.0


@dataclass
class SchemaItem:
    """One row: the ``prompt``, its :class:`JsonTarget` and an identifier for logs."""

    prompt: str
    target: JsonTarget
    problem_id: str
    #: editing task: the JSON shown to be corrected and the errors put into it
    shown_json: Optional[str] = None
    errors: tuple[str, ...] = ()

    @property
    def question(self) -> str:
        if self.shown_json is None:
            return self.prompt
        return (
            f"{self.prompt}\n\nThis JSON was written for the model above but may not validate against it:\n"
            f"```json\n{self.shown_json}\n```\nCorrect it and give the fixed JSON."
        )


class PydanticEnvConfig(SingleTurnEnvConfig):
    """SingleTurnEnvConfig plus the data source."""

    dataset_name: str = Field(HUB_DATASET, description="hub set with prompt / verification_info rows")
    dataset_split: str = Field("train", description="hub split")
    dataset_path: Optional[str] = Field(
        None, description="local rows (prompt, verification_info) for training"
    )
    eval_dataset_path: Optional[str] = Field(None, description="local rows for evaluation")
    eval_fraction: float = Field(
        0.1,
        gt=0.0,
        lt=1.0,
        description="share of rows held out for evaluation when no evaluation file is given",
    )
    seed: int = Field(42, description="seed of the shuffle and the held-out split")
    task_type: Literal["generation", "editing"] = Field(
        "generation",
        description="generation: write JSON for the request; editing: correct a broken JSON instance",
    )
    error_types_enabled: list[str] = Field(
        default_factory=lambda: list(ERROR_TYPES[:5]),
        description=f"editing: kinds of errors put into the shown JSON, of {', '.join(ERROR_TYPES)}",
    )
    error_introduction_probability: float = Field(
        1.0, ge=0.0, le=1.0, description="editing: probability that the shown JSON gets errors at all"
    )
    max_errors_per_item: int = Field(1, ge=1, description="editing: most errors put into one shown JSON")
    error_introduction_seed: Optional[int] = Field(
        None, description="editing: seed of the errors (unset: seed)"
    )

    original_key_aliases = {"eval_set_percentage": "eval_fraction"}
    unsupported_original_keys = {
        **ORIGINAL_DUMP_AND_LOG_KEYS,
        "allowed_structured_formats": "replies are checked as JSON only (0.4.0 also asked for YAML, TOML, XML)",
        "allowed_container_formats": "a reply may use any container (```json fence, <json_output> tags or "
        "none); none is asked for",
    }

    @field_validator("error_types_enabled")
    @classmethod
    def _known_error_types(cls, kinds: list[str]) -> list[str]:
        unknown = [k for k in kinds if k not in ERROR_TYPES]
        if unknown or not kinds:
            raise ValueError(f"error types must be some of {', '.join(ERROR_TYPES)}; got {kinds}")
        return kinds


class PydanticSchemaFollowingEnv(LocalServerDefaults, SingleTurnEnv):
    """Rewards JSON replies that validate against each row's schema."""

    name = "pydantic_schema_following"
    env_config_cls = PydanticEnvConfig
    config: PydanticEnvConfig

    def __init__(self, config: PydanticEnvConfig, server_configs, slurm=False, testing=False):
        super().__init__(config, server_configs, slurm, testing)
        self.train_items: list[SchemaItem] = []
        self.test_items: list[SchemaItem] = []

    @classmethod
    def default_env_config(cls) -> PydanticEnvConfig:
        return PydanticEnvConfig(
            group_size=16,
            total_steps=2000,
            batch_size=256,
            steps_per_eval=20,
            max_token_length=4096,
            temperature=0.9,
        )

    def _items(self, path: Optional[str]) -> list[SchemaItem]:
        cfg = self.config
        rows = load_rows(
            path,
            hub_split(cfg.dataset_name, cfg.dataset_split),
            required=["prompt", "verification_info"],
            hub_name=cfg.dataset_name,
        )
        source = path or cfg.dataset_name
        items, skipped = [], []
        for index, row in enumerate(rows):
            try:
                target = target_for(row["verification_info"])
            except UnsupportedSource as exc:
                skipped.append(f"row {index}: {exc}")
                continue
            except ValueError as exc:
                raise DatasetError(f"{source}: row {index}: field 'verification_info': {exc}") from None
            items.append(SchemaItem(str(row["prompt"]), target, str(row.get("problem_id", index))))
        if skipped:
            logger.warning(
                "%s: skipped %d of %d rows whose model cannot be rebuilt without running its source (first: %s)",
                source,
                len(skipped),
                len(rows),
                skipped[0],
            )
        if not items:
            raise DatasetError(f"{source}: no usable rows (every model source uses unsupported constructs)")
        return items

    async def setup(self) -> None:
        cfg = self.config
        items = self._items(cfg.dataset_path)
        random.Random(cfg.seed).shuffle(items)
        if cfg.eval_dataset_path:
            self.train_items, self.test_items = items, self._items(cfg.eval_dataset_path)
        elif len(items) == 1:
            self.train_items = self.test_items = items
        else:
            held_out = min(max(1, int(len(items) * cfg.eval_fraction)), len(items) - 1)
            self.test_items, self.train_items = items[:held_out], items[held_out:]

    async def get_next_item(self) -> SchemaItem:
        draw = self.iter
        return self.task_item(self.next_in_turn(self.train_items), f"train:{draw}")

    def task_item(self, item: SchemaItem, draw: str) -> SchemaItem:
        """``item`` as this config's task: unchanged for generation; for editing, with a shown JSON instance
        and (with ``error_introduction_probability``) errors put into it, seeded by the draw."""
        cfg = self.config
        if cfg.task_type != "editing":
            return item
        instance = valid_instance(item.target.schema, item.target.accepts_value)
        if instance is None:
            return item
        seed = cfg.seed if cfg.error_introduction_seed is None else cfg.error_introduction_seed
        rng = random.Random(f"schema-errors:{seed}:{item.problem_id}:{draw}")
        errors: list[str] = []
        if rng.random() < cfg.error_introduction_probability:
            instance, errors = introduce_errors(
                instance,
                item.target.schema,
                item.target.accepts_value,
                error_types=cfg.error_types_enabled,
                max_errors=cfg.max_errors_per_item,
                rng=rng,
            )
        return replace(item, shown_json=json.dumps(instance, indent=2), errors=tuple(errors))

    def prompt_messages(self, item: SchemaItem) -> list[dict[str, str]]:
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": item.question}]

    def score_reply(self, reply: str, item: SchemaItem) -> float:
        return score_reply(reply, item.target)

    def eval_items(self) -> list[SchemaItem]:
        return [self.task_item(item, f"eval:{i}") for i, item in enumerate(self.test_items)]

    def eval_sample_fields(self, item: SchemaItem) -> dict:
        fields = {"problem_id": item.problem_id, "prompt": item.prompt}
        if item.shown_json is not None:
            fields.update(shown_json=item.shown_json, errors=list(item.errors))
        return fields


if __name__ == "__main__":
    PydanticSchemaFollowingEnv.cli()
