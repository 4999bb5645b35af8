"""Request bodies of the trajectory API (pydantic v2).

Unknown fields are ignored and dropped; ints are coerced in pydantic's lax mode (``1.0`` is
accepted, ``1.5`` is not), floats must be finite. The scored-group model is built from the field
table of :mod:`atroposlib.group`; the group's content rules are applied by
:func:`atroposlib.group.check_group`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, create_model, field_validator

from atroposlib.group import FIELD_NAMES, FIELDS

MESSAGE_FIELDS_ERROR = "Message must have 'role' and 'content' fields"


class Registration(BaseModel):
    """``POST /register``: the trainer's run configuration.

    Every field is required but the W&B names, which may be null or missing (third-party trainers
    such as Axolotl's plugin send ``wandb_project: null`` by default).
    """

    wandb_group: str | None = None
    wandb_project: str | None = None
    batch_size: int = Field(ge=1, description="Sequences per batch.")
    max_token_len: int = Field(ge=1, description="Longest sequence (tokens) the trainer accepts.")
    checkpoint_dir: str
    save_checkpoint_interval: int
    starting_step: int = Field(ge=0)
    num_steps: int
    max_staleness: int | None = Field(
        None,
        ge=0,
        description="Optional: the trainer trains no group generated more than this many steps before the "
        "step that trains it; served to environments by /info so that they wait instead of generating them.",
    )


class RegisterEnv(BaseModel):
    """``POST /register-env``: an environment announcing itself."""

    model_config = ConfigDict(allow_inf_nan=False)

    max_token_length: int = Field(ge=1)
    desired_name: str
    weight: float = Field(ge=0, description="Relative share of inference capacity.")
    group_size: int = Field(ge=1, description="Sequences per group this env sends.")
    min_batch_allocation: float | None = Field(
        None, ge=0, description="Minimum share (0-1) of every batch reserved for this env."
    )


class EnvIdentifier(BaseModel):
    """``POST /disconnect-env`` and ``GET /status-env`` (JSON body)."""

    env_id: int


class BatchAck(BaseModel):
    """``POST /batch/ack``."""

    batch_id: int


class _ScoredDataBase(BaseModel):
    model_config = ConfigDict(allow_inf_nan=False)

    @field_validator("messages", mode="before", check_fields=False)
    @classmethod
    def _messages_have_role_and_content(cls, value: Any) -> Any:
        # compat: checked before type coercion, as atroposlib 0.4.0 does: every message of every inner
        # list needs both keys (a membership test, so a string is searched as a substring).
        if value is None:
            return None
        try:
            for conversation in value:
                for message in conversation:
                    if "role" not in message or "content" not in message:
                        raise ValueError(MESSAGE_FIELDS_ERROR)
        except TypeError:
            raise ValueError(MESSAGE_FIELDS_ERROR) from None
        return value

    def to_group(self) -> dict[str, Any]:
        """The stored group dict: every field of the table, in order (missing optionals ``None``)."""
        data = self.__dict__
        return {name: data[name] for name in FIELD_NAMES}


ScoredData = create_model(
    "ScoredData",
    __base__=_ScoredDataBase,
    __doc__="One scored group: ``N`` sequences of one prompt (``POST /scored_data``).",
    **{f.name: (f.wire_type, ...) if f.required else (f.wire_type | None, None) for f in FIELDS},
)
