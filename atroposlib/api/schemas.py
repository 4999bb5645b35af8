"""Request bodies of the trajectory API (pydantic v2).

Field names, types and optionality are those of atroposlib 0.4.0: unknown fields are ignored and
dropped, ints are coerced in pydantic's lax mode (``1.0`` is accepted, ``1.5`` is not). Beyond the
original, sizes must be positive and floats finite; cross-field checks of a scored group live in
:mod:`atroposlib.api.validation`.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator

#: The keys of a stored group, in the order ``/batch`` and ``/latest_example`` return them.
GROUP_FIELDS: tuple[str, ...] = (
    "tokens",
    "masks",
    "scores",
    "advantages",
    "ref_logprobs",
    "messages",
    "generation_params",
    "inference_logprobs",
    "overrides",
    "group_overrides",
    "images",
    "env_id",
    "distill_token_ids",
    "distill_logprobs",
)

#: Free-form fields: any JSON is stored as sent.
FREE_FORM_FIELDS: tuple[str, ...] = (
    "messages",
    "generation_params",
    "overrides",
    "group_overrides",
    "images",
)

MESSAGE_FIELDS_ERROR = "Message must have 'role' and 'content' fields"


class Registration(BaseModel):
    """``POST /register``: the trainer's run configuration. Every field is required."""

    wandb_group: str
    wandb_project: str
    batch_size: int = Field(ge=1, description="Sequences per batch.")
    max_token_len: int = Field(ge=1, description="Longest sequence (tokens) the trainer accepts.")
    checkpoint_dir: str
    save_checkpoint_interval: int
    starting_step: int = Field(ge=0)
    num_steps: int


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


class ScoredData(BaseModel):
    """One scored group: ``N`` sequences of one prompt (``POST /scored_data``)."""

    model_config = ConfigDict(allow_inf_nan=False)

    tokens: list[list[int]]
    masks: list[list[int]]
    scores: list[float]
    advantages: list[list[float]] | None = None
    ref_logprobs: list[list[float]] | None = None
    messages: list[list[dict[str, Any]]] | None = None
    generation_params: dict[str, Any] | None = None
    inference_logprobs: list[list[float]] | None = None
    overrides: list[dict] | None = None
    group_overrides: dict | None = None
    images: Any | None = None
    env_id: int | None = None
    distill_token_ids: list[list[list[int]]] | None = None
    distill_logprobs: list[list[list[float]]] | None = None

    @field_validator("messages", mode="before")
    @classmethod
    def _messages_have_role_and_content(cls, value: Any) -> Any:
        # Runs before type coercion, like the original: every message of every inner list needs
        # both keys (membership test, so strings are searched as substrings).
        if value is None:
            return None
        try:
            for conversation in value:
                for message in conversation:
                    if "role" not in message or "content" not in message:
                        raise ValueError(MESSAGE_FIELDS_ERROR)
        except TypeError:
            # Not iterable / not a container: the original crashed with a 500 here.
            raise ValueError(MESSAGE_FIELDS_ERROR) from None
        return value

    def to_group(self) -> dict[str, Any]:
        """The stored 14-key group dict (missing optionals are ``None``)."""
        data = self.__dict__
        return {key: data[key] for key in GROUP_FIELDS}
