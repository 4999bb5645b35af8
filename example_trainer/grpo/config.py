"""``TrainingConfig``: every setting of the GRPO trainer, validated in one place.

The command line uses the field names with dashes (see :mod:`example_trainer.grpo.cli`); YAML files and
keyword arguments use them as they are.

Batch sizes, in sequences: ``micro_batch_size`` rows go through one forward/backward pass;
``gradient_accumulation_steps`` micro-batches make one optimizer step, whose ``trainer_batch_size`` (their
product) is what the trainer registers with the API and what environments call their ``batch_size``.

compat: two fields also accept an older name, everywhere (flag, YAML key, keyword, attribute):
``batch_size`` for ``micro_batch_size`` and ``vllm_restart_interval`` for ``refresh_interval``.
"""

from __future__ import annotations

import dataclasses
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, field_validator, model_validator

if TYPE_CHECKING:
    from example_trainer.grpo.data import ScoreShaping
    from example_trainer.grpo.loss import LossSettings

OptimizerName = Literal["adamw", "adamw_8bit", "adafactor"]
WeightBridgeMode = Literal["shared_vllm", "lora_only", "lora_restart", "none"]
RefreshMode = Literal["restart", "reload", "broadcast"]
DistributedStrategy = Literal["ddp", "fsdp"]
LossTypeName = Literal["grpo", "dr_grpo", "dapo", "gspo", "cispo"]
AdvantageName = Literal["grpo", "rloo", "none"]

#: compat: older names accepted for a field (flags, YAML keys, keywords, attributes, ``model_copy``
#: updates), mapped to the field they set.
OLDER_NAMES = {"batch_size": "micro_batch_size", "vllm_restart_interval": "refresh_interval"}


def _default_device() -> str:
    try:
        import torch
    except ImportError:  # the config can be built (and validated) without torch
        return "cpu"
    return "cuda" if torch.cuda.is_available() else "cpu"


def parse_layer_indices(value: object) -> list[int] | None:
    """Parse ``"20-31"`` / ``"0-3,28-31"`` / ``"5"`` (or a list of ints) into sorted unique indices.

    Raises ``ValueError`` for negative indices, ranges with start > end, or text that is not
    a comma-separated list of integers and ``a-b`` ranges.
    """
    if value is None or value == "":
        return None
    if isinstance(value, int):
        items: list[int] = [value]
    elif isinstance(value, list | tuple):
        items = []
        for v in value:
            items.extend(parse_layer_indices(v) or [])
    elif isinstance(value, str):
        items = []
        for part in value.replace(" ", "").split(","):
            if not part:
                continue
            if re.fullmatch(r"-?\d+", part):
                items.append(int(part))
                continue
            match = re.fullmatch(r"(\d+)-(\d+)", part)
            if not match:
                raise ValueError(f"invalid layer indices {part!r} (expected e.g. 20-31 or 0-3,28-31)")
            start, end = int(match[1]), int(match[2])
            if start > end:
                raise ValueError(f"invalid layer range {part!r}: start > end")
            items.extend(range(start, end + 1))
    else:
        raise ValueError(f"invalid layer indices {value!r}")
    if any(i < 0 for i in items):
        raise ValueError(f"layer indices must be >= 0, got {sorted(set(items))}")
    return sorted(set(items))


def _older_name(field: str) -> property:
    """compat: an attribute that reads and sets (validated) the field ``field``."""

    def get(self: TrainingConfig) -> int:
        return getattr(self, field)

    def set_(self: TrainingConfig, value: int) -> None:
        setattr(self, field, value)

    return property(get, set_, doc=f"compat: another name for ``{field}``.")


class TrainingConfig(BaseModel):
    """Configuration of the GRPO trainer (``atropos-grpo``).

    Unknown fields are rejected, so a misspelt YAML key or keyword is an error, not a silent default.
    """

    model_config = ConfigDict(extra="forbid", validate_assignment=True, protected_namespaces=())

    # --- model -------------------------------------------------------------------------------
    model_name: str = Field(description="Hugging Face model id or local directory to train")

    # --- training ----------------------------------------------------------------------------
    lr: float = Field(1e-5, gt=0, description="peak learning rate")
    training_steps: int = Field(10, ge=1, description="optimizer steps (one per API batch)")
    micro_batch_size: int = Field(
        2,
        ge=1,
        validation_alias=AliasChoices("micro_batch_size", "batch_size"),
        description="sequences per forward/backward pass (one micro-batch); the older name batch_size is "
        "accepted for the same setting",
    )
    seq_len: int = Field(2048, ge=1, description="max token length, sent to the API (no truncation)")
    gradient_accumulation_steps: int = Field(
        32, ge=1, description="micro-batches per optimizer step (sequences per step: their product)"
    )
    warmup_steps: int = Field(0, ge=0, description="linear LR warmup steps")
    optimizer: OptimizerName = Field(
        "adamw_8bit", description="adamw_8bit falls back to adamw without bitsandbytes"
    )
    adafactor_scale_parameter: bool = False
    adafactor_relative_step: bool = False
    device: str = Field(default_factory=_default_device, description="torch device")
    save_path: str = Field("trained_model_checkpoints", description="checkpoint directory")
    checkpoint_interval: int = Field(3, ge=0, description="save step_N every N steps (0: final only)")

    # --- GRPO --------------------------------------------------------------------------------
    clip_eps: float = Field(0.2, gt=0, lt=1, description="PPO clip range epsilon")

    # --- vLLM --------------------------------------------------------------------------------
    refresh_interval: int = Field(
        3,
        ge=1,
        validation_alias=AliasChoices("refresh_interval", "vllm_restart_interval"),
        description="bring the inference server up to date every N steps (and after the last), by restart, "
        "in-place reload or broadcast (--refresh-mode); the older name vllm_restart_interval is accepted "
        "for the same setting",
    )
    vllm_port: int = Field(9001, ge=1, le=65535)
    vllm_gpu: int | None = Field(None, ge=0, description="GPU index for the vLLM process")
    vllm_gpu_memory_utilization: float = Field(0.45, gt=0, le=1)
    max_model_len: int = Field(4096, ge=1)
    dtype: Literal["bfloat16", "float16", "float32", "auto"] = Field(
        "bfloat16", description="vLLM dtype (float32 is used on CPU)"
    )
    vllm_enforce_eager: bool = Field(False, description="start vLLM with --enforce-eager (faster start)")
    vllm_startup_timeout: float = Field(600.0, gt=0, description="seconds to wait for vLLM's /health")
    vllm_max_restarts: int = Field(1, ge=0, description="automatic restarts of a local server that dies")
    inference_servers_file: str | None = Field(
        None,
        description="file the local server's base URL is written to at each (re)start, for environments' "
        "--openai.servers_file (default <log_dir>/inference_servers.txt)",
    )

    # --- wandb -------------------------------------------------------------------------------
    use_wandb: bool = False
    wandb_project: str | None = None
    wandb_group: str | None = None

    # --- mode / layers / LoRA ------------------------------------------------------------------
    weight_bridge_mode: WeightBridgeMode = Field("none", description="how new weights reach vLLM")
    train_layer_indices: list[int] | None = Field(None, description='train only these layers, e.g. "20-31"')
    trainer_rank: int = Field(0, ge=0, description="rank of this trainer process ($RANK wins when set)")
    world_size: int = Field(
        1, ge=1, description="trainer processes in the data-parallel group ($WORLD_SIZE wins when set)"
    )
    init_method: str = Field(
        "env://", description="torch.distributed init method (env:// reads MASTER_ADDR/MASTER_PORT)"
    )
    num_inference_nodes: int = Field(
        0,
        ge=0,
        description="refresh the inference servers on the last N nodes of the SLURM allocation "
        "(discovered like the environments' --slurm) instead of starting a local vLLM; 0: off",
    )
    lora_r: int = Field(16, ge=1)
    lora_alpha: int = Field(32, ge=1)
    lora_dropout: float = Field(0.05, ge=0, lt=1)
    lora_target_modules: list[str] | None = Field(None, description="default: q_proj v_proj")
    lora_layer_indices: list[int] | None = None
    single_copy: bool = Field(False, description="unused (kept for compatibility)")
    vllm_config_path: str | None = None

    # --- debug / atropos -----------------------------------------------------------------------
    debug_loading: bool = False
    benchmark: bool = False
    atropos_url: str = Field("http://localhost:8000", description="trajectory API base URL")
    log_dir: str = "./logs"

    # --- added by atroposlib 0.5 ---------------------------------------------------------------
    kl_coef: float = Field(0.0, ge=0, description="weight of the KL penalty to the frozen initial model")
    resume: str | None = Field(None, description='"latest" or a checkpoint directory to resume from')
    refresh_mode: RefreshMode = Field(
        "restart",
        description="vLLM refresh in mode none: restart, reload (in place, from the checkpoint) or broadcast "
        "(in place, weights sent straight to the servers' workers over torch.distributed; no checkpoint "
        "is written for it, only every --checkpoint-interval steps)",
    )
    weight_broadcast_backend: Literal["auto", "gloo", "nccl"] = Field(
        "auto",
        description="process group of --refresh-mode broadcast: gloo (CPU memory), nccl (trainer and servers "
        "on different GPUs); auto: nccl for remote servers of a CUDA trainer, else gloo",
    )
    weight_broadcast_async: bool = Field(
        False,
        description="--refresh-mode broadcast: the trainer goes on with its next step at once; the weights are "
        "sent while it computes that step's gradients, and its optimizer step waits until they are sent "
        "(rollouts of that moment come from the previous weights, as their policy step records)",
    )
    weight_broadcast_host: str | None = Field(
        None,
        description="address the inference servers reach the trainer at for --refresh-mode broadcast "
        "(default: 127.0.0.1 for the local server, this host's name for remote servers)",
    )
    max_staleness: int | None = Field(
        None,
        ge=0,
        description="train no group generated more than N steps before the step that trains it (older ones "
        "are dropped and counted); give environments the same bound (--env.max_staleness) so that they "
        "wait instead of generating them",
    )
    api_key: str | None = Field(
        default_factory=lambda: os.environ.get("ATROPOS_API_KEY") or None,
        description="bearer token for the API (default $ATROPOS_API_KEY)",
    )
    use_vllm: bool = Field(True, description="start/refresh vLLM (False: train against the API only)")
    inference_backend: Literal["vllm", "hf"] = Field(
        "vllm",
        description="local inference server: vllm, or hf (example_trainer.inference.hf_generation: Hugging Face "
        "generate in one light process, for small models on a CPU or where vLLM is not installed; LoRA "
        "adapters are merged into a copy of the base weights)",
    )
    inference_threads: int = Field(1, ge=1, description="torch threads of the hf inference server")
    seed: int = Field(0, description="seed of python, numpy and torch RNGs")
    train_dtype: Literal["auto", "float32", "bfloat16", "float16"] = Field(
        "auto", description="trainer weights dtype (auto: float32 on CPU, bfloat16 on CUDA)"
    )
    gradient_checkpointing: bool | None = Field(None, description="default: on for CUDA, off on CPU")
    max_grad_norm: float = Field(1.0, gt=0)
    micro_batch_tokens: int | None = Field(
        None,
        ge=1,
        description="form micro-batches by a token budget instead of --micro-batch-size sequences: at most this many "
        "tokens through the model per micro-batch (packed: their sum; padded: rows x longest row, rows sorted "
        "by length); a longer sequence gets a micro-batch of its own",
    )
    sequence_packing: Literal["auto", "on", "off"] = Field(
        "auto",
        description="run each micro-batch as one row without padding, position ids restarting per sequence; "
        "auto: on with flash-attention (variable-length kernels), off with SDPA/eager, which would compute "
        "the packed row's whole square",
    )
    logprob_chunk_tokens: int | None = Field(
        None,
        ge=1,
        description="positions per chunk of the output head when computing log-probabilities, so the "
        "[batch, length, vocab] logits never exist at once (default: 2^25 logits per chunk)",
    )
    api_retries: int = Field(5, ge=1, description="attempts per API request before giving up")
    api_timeout: float = Field(30.0, gt=0, description="seconds to wait for the API to become reachable")
    plot_path: str | None = Field(
        None, description="PNG of reward/accuracy (default <save_path>/training_curves.png)"
    )
    inference_server_urls: list[str] | None = Field(
        None,
        description="inference servers (base URLs) refreshed from each checkpoint instead of starting a local "
        "vLLM: full weights via /bridge/update_weights, adapters via LoRA hot-swap; checkpoints must be on a "
        "filesystem the servers can read",
    )
    distributed_backend: Literal["auto", "nccl", "gloo"] = Field(
        "auto", description="process-group backend (auto: nccl on CUDA, gloo on CPU)"
    )
    distributed_timeout: float = Field(
        1800.0, gt=0, description="seconds a collective may wait (checkpoint writes, slow batches)"
    )
    # --- losses (example_trainer.grpo.loss, example_trainer.grpo.advantages) --------------------------------
    loss_type: LossTypeName = Field(
        "grpo",
        description="grpo (per-sequence token mean), dr_grpo (constant length normaliser, no std scaling), "
        "dapo (token mean over the step, clip-higher), gspo (sequence-level ratio), cispo (clipped, "
        "detached importance weights, gradient through every token)",
    )
    clip_eps_low: float | None = Field(
        None, gt=0, lt=1, description="lower clip range: ratio >= 1 - clip_eps_low (default: --clip-eps)"
    )
    clip_eps_high: float | None = Field(
        None, gt=0, description="upper clip range: ratio <= 1 + clip_eps_high (default: --clip-eps)"
    )
    advantage: AdvantageName = Field(
        "grpo",
        description="group baseline: grpo (mean, divided by the std except for dr_grpo), rloo "
        "(leave-one-out mean), none (raw scores)",
    )
    max_completion_tokens: int | None = Field(
        None,
        ge=1,
        description="the environments' generation budget: dr_grpo's length normaliser (default: the "
        "step's longest completion) and the overlong penalty's limit",
    )
    overlong_buffer: int | None = Field(
        None,
        ge=0,
        description="DAPO's overlong penalty: completions within this many tokens of "
        "--max-completion-tokens lose reward linearly, down to -1 beyond it (None: off)",
    )
    tis_cap: float | None = Field(
        None,
        ge=1,
        description="truncated importance sampling between the inference engine's and the trainer's "
        "logprobs: each token's loss is weighted by min(pi_trainer / pi_inference, cap) (None: off; the "
        "ratio is then taken against the inference logprobs)",
    )
    rl_coef: float = Field(1.0, ge=0, description="weight of the policy-gradient loss (0: pure distillation)")
    distill_coef: float = Field(
        0.0, ge=0, description="weight of the distillation term where groups carry teacher logprobs"
    )
    distill_kind: Literal["reverse", "forward"] = Field(
        "reverse",
        description="reverse: KL(student || teacher) on the student's own tokens; forward: KL(teacher || "
        "student) over the teacher's top-k",
    )
    distributed_strategy: DistributedStrategy = Field(
        "ddp",
        description="ddp: every rank holds the whole model; fsdp: parameters, gradients and optimizer "
        "state sharded over the ranks (FSDP2), for models that do not fit one device; full-model "
        "training with --optimizer adamw only; one process trains unsharded",
    )

    @field_validator("train_layer_indices", "lora_layer_indices", mode="before")
    @classmethod
    def _parse_indices(cls, value: object) -> list[int] | None:
        return parse_layer_indices(value)

    @field_validator("atropos_url")
    @classmethod
    def _strip_url(cls, value: str) -> str:
        if not value.startswith(("http://", "https://")):
            raise ValueError(f"must start with http:// or https://, got {value!r}")
        return value.rstrip("/")

    @field_validator("device")
    @classmethod
    def _check_device(cls, value: str) -> str:
        if value != "cpu" and not value.startswith(("cuda", "mps", "xpu")):
            raise ValueError(f"unknown device {value!r} (expected cpu, cuda or cuda:N)")
        return value

    @field_validator("inference_server_urls", mode="before")
    @classmethod
    def _split_urls(cls, value: object) -> object:
        if isinstance(value, str):
            value = [part for part in value.replace(",", " ").split() if part]
        if isinstance(value, list | tuple):
            for url in value:
                if not isinstance(url, str) or not url.startswith(("http://", "https://")):
                    raise ValueError(
                        f"inference server URLs must start with http:// or https://, got {url!r}"
                    )
            return [url.rstrip("/") for url in value] or None
        return value

    @model_validator(mode="after")
    def _check_modes(self) -> TrainingConfig:
        if self.overlong_buffer is not None and self.max_completion_tokens is None:
            raise ValueError("overlong_buffer needs max_completion_tokens (the generation budget)")
        if self.rl_coef == 0 and self.distill_coef == 0:
            raise ValueError("rl_coef and distill_coef are both 0: nothing to train")
        if self.weight_bridge_mode not in ("lora_only", "lora_restart") and self.lora_layer_indices:
            raise ValueError("lora_layer_indices needs --weight-bridge-mode lora_only or lora_restart")
        if self.inference_server_urls and self.num_inference_nodes > 0:
            raise ValueError("give either inference_server_urls or num_inference_nodes, not both")
        if self.distributed_strategy == "fsdp":
            if self.is_lora:
                raise ValueError(
                    "distributed_strategy fsdp trains full models; LoRA modes run with ddp "
                    "(the adapters fit every device)"
                )
            if self.optimizer != "adamw":
                raise ValueError(
                    f"distributed_strategy fsdp needs optimizer adamw ({self.optimizer} does not run on "
                    "sharded parameters)"
                )
            if self.refresh_mode == "broadcast":
                raise ValueError("refresh_mode broadcast sends one process's full weights; use ddp with it")
        if self.weight_bridge_mode == "shared_vllm":
            if self.distributed_strategy == "fsdp" or self.world_size > 1:
                raise ValueError("shared_vllm trains the one local server's weights in one trainer process")
            if self.inference_server_urls or self.num_inference_nodes > 0:
                raise ValueError(
                    "shared_vllm shares memory with a local server; remote servers cannot share it"
                )
            if self.vllm_gpu is not None or self.device.startswith("cuda:") and self.device != "cuda:0":
                raise ValueError(
                    "shared_vllm runs the server on the trainer's GPU, the first visible one: choose it with "
                    "CUDA_VISIBLE_DEVICES (and --device cuda), not --vllm-gpu or --device cuda:N"
                )
        return self

    # --- derived values ------------------------------------------------------------------------
    @property
    def is_lora(self) -> bool:
        return self.weight_bridge_mode in ("lora_only", "lora_restart")

    @property
    def loss_settings(self) -> LossSettings:
        """What the loss computes (:class:`example_trainer.grpo.loss.LossSettings`)."""
        from example_trainer.grpo.loss import LossSettings

        clips = {
            "clip_eps_low": self.clip_eps if self.clip_eps_low is None else self.clip_eps_low,
            "clip_eps_high": self.clip_eps if self.clip_eps_high is None else self.clip_eps_high,
        }
        # every other loss setting is the option of the same name
        same_named = {
            f.name: getattr(self, f.name) for f in dataclasses.fields(LossSettings) if f.name not in clips
        }
        return LossSettings(**clips, **same_named)

    @property
    def score_shaping(self) -> ScoreShaping:
        """How scores become advantages (:class:`example_trainer.grpo.data.ScoreShaping`)."""
        from example_trainer.grpo.data import ScoreShaping

        overlong = None
        if self.overlong_buffer is not None and self.max_completion_tokens is not None:
            overlong = (self.max_completion_tokens, self.overlong_buffer)
        return ScoreShaping(
            advantage=self.advantage, scale_by_std=self.loss_type != "dr_grpo", overlong=overlong
        )

    @property
    def trainer_batch_size(self) -> int:
        """Sequences per optimizer step (= per API batch, registered with the API as its ``batch_size``):
        ``micro_batch_size * gradient_accumulation_steps``."""
        return self.micro_batch_size * self.gradient_accumulation_steps

    # --- compat: older attribute names, the same settings ----------------------------------------
    def model_copy(self, *, update: Mapping[str, Any] | None = None, deep: bool = False) -> TrainingConfig:
        """A copy with ``update`` applied (not validated, as for any pydantic model); older field names in
        ``update`` set the field they name now."""
        if update:
            update = {OLDER_NAMES.get(key, key): value for key, value in update.items()}
        return super().model_copy(update=update, deep=deep)

    @property
    def api_batch_size(self) -> int:
        """compat: :attr:`trainer_batch_size`."""
        return self.trainer_batch_size

    batch_size = _older_name("micro_batch_size")
    vllm_restart_interval = _older_name("refresh_interval")

    @property
    def resolved_plot_path(self) -> Path:
        return Path(self.plot_path) if self.plot_path else Path(self.save_path) / "training_curves.png"
