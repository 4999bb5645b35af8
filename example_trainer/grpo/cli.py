"""Command line of the trainer: argparse groups mapping one-to-one onto :class:`TrainingConfig` fields.

Every flag's ``dest`` is the config field name, and its default is read from the config model, so the
two can never disagree. A few settings have a second flag for the same field (``--model``/``--model-name``,
``--gpu-memory-utilization``/``--vllm-gpu-memory-utilization``, ``--batch-size`` for
``--micro-batch-size``, ``--vllm-restart-interval`` for ``--refresh-interval``).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError
from pydantic_core import PydanticUndefined

from example_trainer.grpo.config import OLDER_NAMES, TrainingConfig

#: Fields whose default is computed at run time (shown as "auto" in --help, never as a value).
_RUNTIME_DEFAULTS = {"device", "api_key"}


def _default(field: str) -> Any:
    info = TrainingConfig.model_fields[field]
    if field in _RUNTIME_DEFAULTS or info.default is PydanticUndefined:
        return None
    return info.default


def _flag_name(field: str) -> str:
    return "--" + field.replace("_", "-")


def _add(group: argparse._ArgumentGroup, field: str, *flags: str, **kwargs: Any) -> None:
    """Add a flag for ``field`` with the config's default and description."""
    info = TrainingConfig.model_fields[field]
    kwargs.setdefault("default", _default(field))
    kwargs.setdefault("help", info.description or " ")
    group.add_argument(*(flags or (_flag_name(field),)), dest=field, **kwargs)


def build_parser() -> argparse.ArgumentParser:
    """The ``atropos-grpo`` argument parser (defaults shown by ``--help``)."""
    parser = argparse.ArgumentParser(
        prog="atropos-grpo",
        description="GRPO trainer for Atropos: pulls scored groups from the trajectory API, trains, "
        "checkpoints and refreshes the vLLM inference server.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    g = parser.add_argument_group("model")
    _add(g, "model_name", "--model", "--model-name", required=True)
    _training_flags(parser.add_argument_group("training"))
    _loss_flags(parser)
    _inference_flags(parser)
    _distributed_flags(parser)
    _service_flags(parser)
    return parser


def _training_flags(g: argparse._ArgumentGroup) -> None:
    """Optimizer, batch shape, device, checkpoints."""
    _add(g, "lr", type=float)
    _add(g, "training_steps", type=int)
    _add(
        g,
        "micro_batch_size",
        "--micro-batch-size",
        "--batch-size",
        type=int,
        help="sequences per forward/backward pass (one micro-batch); --batch-size is another name for "
        "this same setting",
    )
    _add(g, "seq_len", type=int)
    _add(g, "gradient_accumulation_steps", type=int)
    _add(g, "warmup_steps", type=int)
    _add(g, "optimizer", choices=["adamw", "adamw_8bit", "adafactor"])
    _add(g, "adafactor_scale_parameter", action="store_true")
    _add(g, "adafactor_relative_step", action="store_true")
    _add(g, "device", help="torch device (default: cuda if available, else cpu)")
    _add(g, "save_path")
    _add(g, "checkpoint_interval", type=int)
    _add(g, "train_layer_indices")
    _add(g, "train_dtype", choices=["auto", "float32", "bfloat16", "float16"])
    _add(g, "gradient_checkpointing", action=argparse.BooleanOptionalAction)
    _add(g, "max_grad_norm", type=float)
    _add(g, "micro_batch_tokens", type=int)
    _add(g, "sequence_packing", choices=["auto", "on", "off"])
    _add(g, "logprob_chunk_tokens", type=int)
    _add(g, "seed", type=int)
    _add(
        g,
        "resume",
        nargs="?",
        const="latest",
        help="resume from the newest checkpoint under --save-path (or from the given checkpoint directory)",
    )


def _loss_flags(parser: argparse.ArgumentParser) -> None:
    """The GRPO clip/KL/staleness settings and the loss family."""
    g = parser.add_argument_group("grpo")
    _add(g, "clip_eps", type=float)
    _add(g, "kl_coef", type=float)
    _add(g, "max_staleness", type=int)

    g = parser.add_argument_group("losses (see CONFIG.md: the GRPO family, TIS, distillation)")
    _add(g, "loss_type", choices=["grpo", "dr_grpo", "dapo", "gspo", "cispo"])
    _add(g, "clip_eps_low", type=float)
    _add(g, "clip_eps_high", type=float)
    _add(g, "advantage", choices=["grpo", "rloo", "none"])
    _add(g, "max_completion_tokens", type=int)
    _add(g, "overlong_buffer", type=int)
    _add(g, "tis_cap", type=float)
    _add(g, "rl_coef", type=float)
    _add(g, "distill_coef", type=float)
    _add(g, "distill_kind", choices=["reverse", "forward"])


def _inference_flags(parser: argparse.ArgumentParser) -> None:
    """The inference server, how it is refreshed, the weight-bridge mode and LoRA."""
    g = parser.add_argument_group("vllm")
    _add(
        g,
        "refresh_interval",
        "--refresh-interval",
        "--vllm-restart-interval",
        type=int,
        help="bring the inference server up to date every N steps (and after the last), as --refresh-mode "
        "says; --vllm-restart-interval is another name for this same setting",
    )
    _add(g, "vllm_port", type=int)
    _add(g, "vllm_gpu", type=int)
    _add(
        g,
        "vllm_gpu_memory_utilization",
        "--gpu-memory-utilization",
        "--vllm-gpu-memory-utilization",
        type=float,
    )
    _add(g, "max_model_len", type=int)
    _add(g, "dtype", choices=["bfloat16", "float16", "float32", "auto"])
    _add(g, "refresh_mode", choices=["restart", "reload", "broadcast"])
    _add(g, "weight_broadcast_backend", choices=["auto", "gloo", "nccl"])
    _add(g, "weight_broadcast_host")
    _add(g, "weight_broadcast_async", action="store_true")
    _add(g, "vllm_enforce_eager", action="store_true")
    _add(g, "vllm_startup_timeout", type=float)
    _add(g, "vllm_max_restarts", type=int)
    _add(g, "inference_servers_file")
    _add(g, "vllm_config_path")
    _add(g, "use_vllm", "--no-vllm", action="store_false", help="do not start or refresh vLLM (train only)")
    _add(g, "inference_backend", choices=["vllm", "hf"])
    _add(g, "inference_threads", type=int)

    g = parser.add_argument_group("mode")
    _add(g, "weight_bridge_mode", choices=["shared_vllm", "lora_only", "lora_restart", "none"])

    g = parser.add_argument_group("lora")
    _add(g, "lora_r", type=int)
    _add(g, "lora_alpha", type=int)
    _add(g, "lora_dropout", type=float)
    _add(g, "lora_target_modules", nargs="+")
    _add(g, "lora_layer_indices")


def _distributed_flags(parser: argparse.ArgumentParser) -> None:
    g = parser.add_argument_group("distributed (torchrun sets RANK/WORLD_SIZE/LOCAL_RANK; see SLURM.md)")
    _add(g, "trainer_rank", type=int)
    _add(g, "world_size", type=int)
    _add(g, "init_method")
    _add(g, "distributed_backend", choices=["auto", "nccl", "gloo"])
    _add(g, "distributed_timeout", type=float)
    _add(g, "distributed_strategy", choices=["ddp", "fsdp"])
    _add(g, "num_inference_nodes", type=int)
    _add(g, "inference_server_urls", nargs="+", metavar="URL")


def _service_flags(parser: argparse.ArgumentParser) -> None:
    """The trajectory API, wandb and debugging."""
    g = parser.add_argument_group("atropos")
    _add(g, "atropos_url")
    _add(g, "api_key", help="bearer token for the API (default: $ATROPOS_API_KEY)")
    _add(g, "api_retries", type=int)
    _add(g, "api_timeout", type=float)

    g = parser.add_argument_group("wandb")
    _add(g, "use_wandb", action="store_true")
    _add(g, "wandb_project")
    _add(g, "wandb_group")

    g = parser.add_argument_group("debug")
    _add(g, "debug_loading", action="store_true")
    _add(g, "benchmark", action="store_true")
    _add(g, "log_dir")
    _add(g, "plot_path")


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """Parse the command line (``sys.argv[1:]`` when ``argv`` is None); exits 2 on unknown flags."""
    return build_parser().parse_args(argv)


def config_from_args(args: argparse.Namespace) -> TrainingConfig:
    """Build the validated config; raises ``pydantic.ValidationError`` for bad values.

    Flags left at ``None`` whose field has a run-time default (device, api_key) take that default.
    """
    values = {k: v for k, v in vars(args).items() if k in TrainingConfig.model_fields}
    for field in _RUNTIME_DEFAULTS:
        if values.get(field) is None:
            values.pop(field, None)
    return TrainingConfig(**values)


def describe_validation_error(exc: ValidationError) -> str:
    """One line naming the offending flag, e.g. ``--lr: Input should be greater than 0 (got -1.0)``."""
    parts = []
    for err in exc.errors():
        loc = [str(p) for p in err.get("loc", ()) if not isinstance(p, int)]
        field = loc[0] if loc else ""
        known = field in TrainingConfig.model_fields or field in OLDER_NAMES
        name = _flag_name(field) if known else (field or "config")
        msg = err.get("msg", "invalid value").removeprefix("Value error, ")
        if "input" in err and not isinstance(err["input"], dict):
            msg += f" (got {err['input']!r})"
        parts.append(f"{name}: {msg}")
    return "; ".join(parts) or str(exc)
