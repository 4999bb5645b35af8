"""``BaseEnvConfig``: the typed configuration every environment shares.

The same field names are used in code (``BaseEnvConfig(group_size=8)``), in YAML (``env: {group_size: 8}``) and
on the command line (``--env.group_size 8``). Subclasses add fields and may re-declare base fields with new
defaults.

Unknown keys: ``serve``, ``process`` and ``evaluate`` refuse a ``--config`` key or flag that the config class does
not declare (``atroposlib.envs.cli.config.check_known_keys``), except the few keys of :data:`COMPAT_ENV_KEYS` and
:data:`COMPAT_SERVER_KEYS` that files written for atroposlib 0.4.0 set without effect there either. Built in code
(``BaseEnvConfig(score_buffer_size=4)`` in an environment written for 0.4.0), an unknown key is still dropped, and
reported once in the log unless it is a compatibility key.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping
from typing import Any, ClassVar, Optional

from pydantic import BaseModel, ConfigDict, Field, model_validator

from atroposlib.envs.groups import EvalHandlingEnum

logger = logging.getLogger(__name__)

_reported_unknown: set[tuple[str, str]] = set()

#: Environment-config keys accepted and ignored for compatibility with atroposlib 0.4.0, each with its reason.
#: These are the only unknown keys ``serve``/``process``/``evaluate`` accept in ``--config`` files.
COMPAT_ENV_KEYS: dict[str, str] = {
    "score_buffer_size": "set by 0.4.0's rlaif_server.py config_init(); no code of 0.4.0 or of this release reads it",
}

#: Inference-server keys (``openai:`` / ``teacher:`` entries) accepted and ignored for compatibility, with reasons.
COMPAT_SERVER_KEYS: dict[str, str] = {
    "weight": "0.4.0's example configs give each openai entry a weight; neither 0.4.0 nor this release weights "
    "servers (requests go to the least busy healthy server)",
}


#: Reasons for refusing the rollout-dump and logging settings that several of 0.4.0's environments defined
#: (for their configs' ``unsupported_original_keys``).
ORIGINAL_DUMP_AND_LOG_KEYS: dict[str, str] = {
    "dump_rollouts": "use --env.data_path_to_save_groups (every accepted group is written to a JSONL file)",
    "dump_failed_rollouts": "see dump_rollouts (groups dropped for equal scores are counted in the wandb rollout stats)",
    "dump_batch_size": "see dump_rollouts",
    "rollout_save_score_threshold": "see dump_rollouts",
    "debug_logging": "logging is configured by the logging module (e.g. logging.basicConfig), not per environment",
    "suppress_base_env_logs": "see debug_logging",
}


def warn_unknown_keys(model_cls: type[BaseModel], data: Any) -> list[str]:
    """Log (once per class and key) the keys of ``data`` that ``model_cls`` does not declare.

    Returns the unknown keys. ``data`` that is not a mapping is ignored. Keys of :data:`COMPAT_ENV_KEYS` are
    dropped without a log line.
    """
    if not isinstance(data, dict):
        return []
    unknown = [k for k in data if isinstance(k, str) and k not in known_config_keys(model_cls)]
    for key in unknown:
        if key in COMPAT_ENV_KEYS or key in getattr(model_cls, "ignored_original_keys", {}):
            continue
        marker = (model_cls.__qualname__, key)
        if marker not in _reported_unknown:
            _reported_unknown.add(marker)
            logger.warning("%s: ignoring unknown config key %r", model_cls.__name__, key)
    return unknown


def known_config_keys(model_cls: type[BaseModel]) -> set[str]:
    """Field names and aliases of ``model_cls``, and the 0.4.0 names it accepts (``original_key_aliases``)."""
    known = set(model_cls.model_fields)
    known.update(f.alias for f in model_cls.model_fields.values() if f.alias)
    known.update(getattr(model_cls, "original_key_aliases", {}))
    return known


def rename_original_keys(model_cls: type[BaseModel], data: Any) -> Any:
    """``data`` with the 0.4.0 names of ``model_cls.original_key_aliases`` renamed to this release's field
    names. Raises ValueError when both names are given with different values."""
    aliases = getattr(model_cls, "original_key_aliases", {})
    if not isinstance(data, dict) or not any(k in data for k in aliases):
        return data
    data = dict(data)
    for old, new in aliases.items():
        if old in data:
            value = data.pop(old)
            if new in data and data[new] != value:
                raise ValueError(
                    f"{old} (0.4.0's name of {new}) and {new} are both given, with different values"
                )
            data[new] = value
    return data


class BaseEnvConfig(BaseModel):
    """Settings shared by all environments (rollout fan-out, scheduling, logging, output files)."""

    model_config = ConfigDict(extra="ignore")

    #: 0.4.0 key names this config accepts for its own fields: ``{0.4.0 name: field name}``.
    original_key_aliases: ClassVar[dict[str, str]] = {}
    #: Keys the 0.4.0 version of this environment's config defined without an effect there, accepted here
    #: and dropped, each with why (the per-environment counterpart of :data:`COMPAT_ENV_KEYS`).
    ignored_original_keys: ClassVar[dict[str, str]] = {}
    #: Keys the 0.4.0 version of this environment's config defined that are refused here, each with why;
    #: ``serve``/``process``/``evaluate`` name the reason instead of "unknown key".
    unsupported_original_keys: ClassVar[dict[str, str]] = {}

    group_size: int = Field(default=4, description="Rollouts per group (sequences per prompt).")
    max_num_workers: int = Field(
        default=-1,
        description="Maximum concurrent item workers; -1 = max_num_workers_per_node * number of inference servers.",
    )
    max_eval_workers: int = Field(
        default=16, description="Maximum concurrent evaluation workers (for env code)."
    )
    max_num_workers_per_node: int = Field(
        default=8, description="Workers per inference server when max_num_workers is -1."
    )
    steps_per_eval: int = Field(
        default=100, description="Run evaluate() every this many trainer steps; <= 0 disables."
    )
    max_token_length: int = Field(
        default=2048, description="Generation budget (tokens) for env code; sent to the API at registration."
    )
    eval_handling: EvalHandlingEnum = Field(
        default=EvalHandlingEnum.STOP_TRAIN,
        description="Training workers during eval: STOP_TRAIN, LIMIT_TRAIN or NONE.",
    )
    eval_limit_ratio: float = Field(
        default=0.5, description="LIMIT_TRAIN: fraction of max_num_workers kept during eval."
    )
    inference_weight: float = Field(
        default=1.0, description="Weight of this env in the API's share computation."
    )
    batch_size: int = Field(
        default=-1, description="Trainer batch size in sequences; -1 = take it from the API."
    )
    max_batches_offpolicy: int = Field(
        default=3,
        description="Stop generating while this many batches are already queued; <= 0 disables the limit.",
    )
    max_staleness: Optional[int] = Field(
        default=None,
        ge=0,
        description="Start no rollout that would be trained more than this many trainer steps after it "
        "starts: at most max_staleness + 1 batches are queued or being generated, and the env waits for the "
        "trainer beyond that. Unset: the bound the trainer registered (its max_staleness, served by GET /info), "
        "else none.",
    )
    tokenizer_name: Optional[str] = Field(
        default=None,
        description="Hugging Face tokenizer name or local directory (self.tokenizer); unset: the served "
        "model's name (--openai.model_name, or the first server's model_name).",
    )
    use_wandb: bool = Field(
        default=True, description="Log to Weights & Biases (offline mode when no API key is set)."
    )
    rollout_server_url: str = Field(
        default="http://localhost:8000", description="Base URL of the trajectory API."
    )
    total_steps: int = Field(
        default=1000,
        description="Stop after this many trainer steps (-1 = the trainer's num_steps); in process mode: groups to write.",
    )
    wandb_name: Optional[str] = Field(
        default=None, description="Name sent to the API and used for wandb runs; defaults to the env's name."
    )
    num_rollouts_to_keep: int = Field(default=32, description="Rollout groups kept for the wandb table.")
    num_rollouts_per_group_for_logging: int = Field(
        default=1, description="Sequences per group kept for the wandb table; -1 = the whole group."
    )
    ensure_scores_are_not_same: bool = Field(
        default=True,
        description=(
            "Discard groups whose scores are all equal and that carry no advantages of their own (no learning"
            " signal); when off, they are kept and marked scores_all_equal."
        ),
    )
    data_path_to_save_groups: Optional[str] = Field(
        default=None,
        description="Also append every accepted group to this JSONL file (suffixed _1, _2... if it exists).",
    )
    data_dir_to_save_evals: Optional[str] = Field(
        default=None, description="Directory for evaluation results (metrics.json, samples.jsonl)."
    )
    min_items_sent_before_logging: int = Field(
        default=2,
        description="At a step change, log to wandb only if this many groups were sent since the last log.",
    )
    include_messages: bool = Field(
        default=False, description="Fill missing 'messages' of a group from its decoded tokens."
    )
    min_batch_allocation: Optional[float] = Field(
        default=None, description="Guaranteed fraction (0..1) of every trainer batch for this env."
    )
    worker_timeout: float = Field(
        default=600, description="Seconds before a running item is cancelled and re-queued; <= 0 disables."
    )
    thinking_mode: bool = Field(
        default=False, description="Enable reasoning parameters in inference requests."
    )
    reasoning_effort: Optional[str] = Field(
        default=None, description="Reasoning effort: none, minimal, low, medium, high or xhigh."
    )
    max_reasoning_tokens: Optional[int] = Field(
        default=None, ge=1024, le=32000, description="Reasoning token budget (1024..32000)."
    )
    custom_thinking_prompt: Optional[str] = Field(
        default=None, description="Free-form thinking prompt for env code."
    )
    # Added in this release: robustness of the serve loop.
    max_item_retries: int = Field(
        default=3, ge=0, description="Times an item is retried after its worker timed out or raised."
    )
    unsent_groups_path: Optional[str] = Field(
        default=None,
        description="JSONL file for groups the API could not accept (default: ./atropos_unsent/<name>-<pid>.jsonl).",
    )
    shutdown_timeout: float = Field(
        default=30.0, ge=0, description="Seconds to wait on shutdown for groups still being sent."
    )
    server_unavailable_timeout: float = Field(
        default=60.0,
        gt=0,
        description="process and evaluate: stop with an error once no inference server has answered for this "
        "many seconds (serve keeps waiting and logs the wait every 15 s).",
    )
    process_max_consecutive_failures: int = Field(
        default=100,
        ge=1,
        description="process mode: stop after this many items in a row yield no accepted group.",
    )

    @model_validator(mode="before")
    @classmethod
    def _report_unknown_keys(cls, data: Any) -> Any:
        data = rename_original_keys(cls, data)
        warn_unknown_keys(cls, data)
        return data


class EvalSampleSettings(BaseModel):
    """Config fields for a seeded random subset of an environment's evaluation set (0.4.0's names)."""

    max_eval_samples: Optional[int] = Field(
        default=None, ge=1, description="evaluate on a random subset of this many items (seeded); unset: all"
    )
    eval_sample_seed: int = Field(default=42, description="seed of the max_eval_samples subset")

    def sample_eval(self, items: list[Any]) -> list[Any]:
        """``items`` when ``max_eval_samples`` is unset or not below their count, else a subset of that many
        drawn with ``eval_sample_seed`` (the same items on every run)."""
        if self.max_eval_samples is None or len(items) <= self.max_eval_samples:
            return items
        return random.Random(self.eval_sample_seed).sample(items, self.max_eval_samples)


#: The tokenizer used when neither ``tokenizer_name`` nor a served model's name is known (the
#: ``ServerBaseline`` default ``model_name`` "default" names no model).
FALLBACK_TOKENIZER = "NousResearch/DeepHermes-3-Llama-3-3B-Preview"


def served_model_name(server_configs: Any) -> Optional[str]:
    """The ``model_name`` of the first server config (a config, a list of them, or mappings), if any."""
    first = (
        server_configs[0] if isinstance(server_configs, (list, tuple)) and server_configs else server_configs
    )
    name = first.get("model_name") if isinstance(first, Mapping) else getattr(first, "model_name", None)
    return str(name) if name else None


def resolve_tokenizer_name(tokenizer_name: Optional[str], server_configs: Any) -> str:
    """``tokenizer_name`` when set, else the served model's name (:func:`served_model_name`), else
    :data:`FALLBACK_TOKENIZER` (no servers, or the placeholder model name "default")."""
    if tokenizer_name:
        return tokenizer_name
    model = served_model_name(server_configs)
    return model if model and model != "default" else FALLBACK_TOKENIZER


__all__ = [
    "COMPAT_ENV_KEYS",
    "COMPAT_SERVER_KEYS",
    "ORIGINAL_DUMP_AND_LOG_KEYS",
    "FALLBACK_TOKENIZER",
    "BaseEnvConfig",
    "EvalSampleSettings",
    "known_config_keys",
    "resolve_tokenizer_name",
    "served_model_name",
    "warn_unknown_keys",
]
