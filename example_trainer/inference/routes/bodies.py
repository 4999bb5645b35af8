"""The JSON bodies of the weight and adapter routes (unknown keys: see each model's ``extra``)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field


class UpdateWeightsBody(BaseModel):
    """``POST /bridge/update_weights``: the checkpoint directory to serve and how to pause the engine."""

    model_config = ConfigDict(extra="forbid")
    checkpoint_dir: str
    pause_mode: str = "wait"


class WeightGroupBody(BaseModel):
    """``POST /bridge/init_weight_group``: where the trainer hosts the weight group's rendezvous."""

    model_config = ConfigDict(extra="forbid")
    host: str
    port: int = Field(ge=1, le=65535)
    world_size: int = Field(ge=2)
    rank: int = Field(ge=1)
    backend: Literal["gloo", "nccl"] = "gloo"
    timeout: float = Field(600.0, gt=0)


class ReceiveWeightsBody(BaseModel):
    """``POST /bridge/receive_weights``: the tensors of the broadcast that follows, in order."""

    model_config = ConfigDict(extra="forbid")
    tensors: list[dict[str, Any]] = Field(min_length=1)
    pause_mode: str = "wait"


class LoraLoadBody(BaseModel):
    """``POST /lora/load``: the adapter directory to serve, under an optional name."""

    model_config = ConfigDict(extra="ignore")
    adapter_path: str
    adapter_name: str | None = None


class LoadAdapterBody(BaseModel):
    """``POST /v1/load_lora_adapter`` (vLLM's route, on the hf server): an adapter to check."""

    model_config = ConfigDict(extra="ignore")
    lora_name: str
    lora_path: str
