"""On-policy distillation: attach a teacher model's top-k prompt logprobs to every group before it is sent.

A ``TeacherDistillationEnv`` behaves like any ``BaseEnv``; when ``teacher_enabled`` is set, each accepted
sequence (the student's own tokens) is scored by the teacher and the group carries ``distill_token_ids`` /
``distill_logprobs`` shaped ``[sequence][position][entries]``: at position ``p``, the teacher's entries for the
distribution that predicts token ``p`` (aligned with ``tokens``, as vLLM's ``prompt_logprobs``). The trainer
(``atropos-grpo --distill-coef``) turns them into a distillation term. If the teacher fails or answers with the
wrong shape for any sequence, both fields are ``None`` for that group (the group itself is still sent).

How the teacher is asked (``teacher_logprob_route``):

* ``prompt_logprobs``: ``get_logprobs(input_ids=..., top_k=k)`` (teacher servers of type ``vllm`` or
  ``sglang``); the entries are the teacher's top ``k``.
* ``echo``: any OpenAI-compatible server that returns top-k logprobs: ``POST /v1/completions`` with the
  token ids as the prompt, ``echo: true``, ``logprobs: k``, ``max_tokens: 1`` (and vLLM's
  ``return_tokens_as_token_ids``); the entries at position ``p >= 1`` are the sampled token first, then the
  teacher's top ``k`` others; position 0 (nothing predicts it) has none.
* ``auto`` (default): ``prompt_logprobs`` for ``vllm``/``sglang`` teacher servers, else ``echo``.

Constructor: both the ``BaseEnv`` order ``(config, server_configs, slurm, testing)`` and the order of
atroposlib 0.4.0's teacher env ``(config, server_configs, teacher_server_configs, slurm, testing)`` work;
``teacher_server_configs`` can also be passed by keyword. Without explicit teacher configs,
``teacher_config_init()`` supplies them.
"""

from __future__ import annotations

import asyncio
import logging
from abc import ABC
from typing import Any, Literal, Optional, Union

from pydantic import Field

from atroposlib.envs.base import (
    APIServerConfig,
    BaseEnv,
    BaseEnvConfig,
    ServerBaseline,
    ServerManager,
    load_tokenizer,
)

logger = logging.getLogger(__name__)

TeacherConfigs = Union[ServerBaseline, APIServerConfig, list, None]
_UNSET: Any = object()


class TeacherDistillationConfig(BaseEnvConfig):
    """``BaseEnvConfig`` plus the teacher switches."""

    teacher_enabled: bool = Field(default=False, description="Attach teacher top-k logprobs to every group.")
    teacher_top_k: int = Field(
        default=0,
        ge=-1,
        description="Teacher logprobs per position: 0 = the sampled token only, -1 = disabled.",
    )
    teacher_logprob_route: Literal["auto", "prompt_logprobs", "echo"] = Field(
        default="auto",
        description="How the teacher is asked: prompt_logprobs (vLLM/SGLang get_logprobs), echo (any "
        "OpenAI-compatible /v1/completions with echo and logprobs), auto: by the teacher's server_type.",
    )


def _split_constructor_args(args: tuple, kwargs: dict) -> tuple[TeacherConfigs, bool, bool]:
    """Sort the positional arguments after ``server_configs`` into (teacher configs, slurm, testing).

    A bool in third position means the ``BaseEnv`` order; anything else (configs or ``None``) the 0.4.0
    teacher-env order. Keywords win over positions.
    """
    if len(args) > 3:
        raise TypeError(f"too many positional arguments ({len(args) + 2})")
    teacher: TeacherConfigs = None
    slurm, testing = False, False
    if args and isinstance(args[0], bool):
        slurm = args[0]
        if len(args) > 1:
            testing = bool(args[1])
        if len(args) > 2:
            raise TypeError("teacher_server_configs must be passed by keyword after slurm/testing")
    elif args:
        teacher = args[0]
        if len(args) > 1:
            slurm = bool(args[1])
        if len(args) > 2:
            testing = bool(args[2])
    if kwargs.get("teacher_server_configs", _UNSET) is not _UNSET:
        teacher = kwargs["teacher_server_configs"]
    if kwargs.get("slurm", _UNSET) is not _UNSET:
        slurm = bool(kwargs["slurm"])
    if kwargs.get("testing", _UNSET) is not _UNSET:
        testing = bool(kwargs["testing"])
    return teacher, slurm, testing


class TeacherDistillationEnv(BaseEnv, ABC):
    """An environment whose groups carry teacher logprobs for distillation."""

    env_config_cls = TeacherDistillationConfig
    teacher_namespace = "teacher"

    def __init__(
        self,
        config: TeacherDistillationConfig,
        server_configs: Any,
        *args: Any,
        teacher_server_configs: TeacherConfigs = _UNSET,
        slurm: bool = _UNSET,
        testing: bool = _UNSET,
    ):
        teacher, slurm_value, testing_value = _split_constructor_args(
            args, {"teacher_server_configs": teacher_server_configs, "slurm": slurm, "testing": testing}
        )
        super().__init__(config, server_configs, slurm_value, testing_value)
        self.teacher_server: Optional[ServerManager] = None
        self.teacher_tokenizer: Any = None
        if not getattr(config, "teacher_enabled", False):
            return
        if teacher is None:
            teacher = type(self).teacher_config_init()
        if teacher is None:
            raise ValueError(
                "teacher_enabled is set but no teacher server is configured: pass teacher_server_configs, "
                "override teacher_config_init() or set --teacher.* flags"
            )
        if isinstance(teacher, APIServerConfig):
            teacher = [teacher]
        self.teacher_server = ServerManager(teacher, slurm=False, testing=testing_value)
        self._teacher_route = self._resolve_route(teacher)
        self._check_teacher_vocab(teacher)

    @classmethod
    def teacher_config_init(cls) -> TeacherConfigs:
        """Default teacher server configs (``None``: none)."""
        return None

    def _check_teacher_vocab(self, teacher: TeacherConfigs) -> None:
        first = teacher[0] if isinstance(teacher, list) and teacher else teacher
        name = getattr(first, "tokenizer_name", "none")
        if not name or name == "none":
            name = getattr(first, "model_name", None)
        if not name or name == self.config.tokenizer_name:
            self.teacher_tokenizer = self.tokenizer
            return
        self.teacher_tokenizer = load_tokenizer(name)
        if self.teacher_tokenizer.get_vocab() != self.tokenizer.get_vocab():
            raise ValueError(
                f"the teacher tokenizer {name!r} has a different vocabulary from the env tokenizer "
                f"{self.config.tokenizer_name!r}; token-level distillation needs identical vocabularies"
            )

    async def _close_inference_clients(self) -> None:
        """Close the teacher servers' connections too (after ``serve``, ``process`` and ``evaluate``)."""
        await super()._close_inference_clients()
        if self.teacher_server is not None:
            try:
                await self.teacher_server.close()
            except Exception as exc:
                logger.debug("closing the teacher servers failed: %s", exc)

    def _teacher_top_k(self, group: dict[str, Any]) -> Optional[int]:
        overrides = group.get("group_overrides") or {}
        if overrides.get("skip_teacher_top_k"):
            return None
        top_k = overrides.get("teacher_top_k", self.config.teacher_top_k)
        top_k = int(top_k)
        return None if top_k <= -1 else top_k

    def _resolve_route(self, teacher: TeacherConfigs) -> str:
        route = getattr(self.config, "teacher_logprob_route", "auto")
        if route != "auto":
            return route
        first = teacher[0] if isinstance(teacher, list) and teacher else teacher
        return "prompt_logprobs" if getattr(first, "server_type", None) in ("vllm", "sglang") else "echo"

    async def _teacher_logprobs(self, tokens: list[int], top_k: int) -> tuple[list, list]:
        if getattr(self, "_teacher_route", "prompt_logprobs") == "echo":
            completion = await self.teacher_server.completion(
                prompt=tokens, max_tokens=1, echo=True, logprobs=max(top_k, 1), temperature=0.0,
                extra_body={"return_tokens_as_token_ids": True}, split="train",
            )  # fmt: skip
            ids, logprobs = echo_prompt_topk(completion, tokens, top_k, self.teacher_tokenizer)
        else:
            result = await self.teacher_server.get_logprobs(
                input_ids=tokens, top_k=top_k, max_tokens=1, split="train"
            )
            ids, logprobs = result["prompt_topk_token_ids"], result["prompt_topk_logprobs"]
        if len(ids) != len(tokens) or len(logprobs) != len(tokens):
            raise ValueError(f"teacher returned {len(ids)} positions for {len(tokens)} tokens")
        return ids, logprobs

    async def attach_teacher_logprobs(self, group: dict[str, Any]) -> None:
        """Set ``distill_token_ids``/``distill_logprobs`` of ``group`` in place (both ``None`` on any failure)."""
        top_k = self._teacher_top_k(group)
        if top_k is None or self.teacher_server is None:
            return
        try:
            results = await asyncio.gather(
                *(self._teacher_logprobs(list(seq), top_k) for seq in group["tokens"])
            )
        except Exception as exc:
            logger.warning("[%s] teacher logprobs unavailable for a group: %s", self.env_label, exc)
            group["distill_token_ids"] = None
            group["distill_logprobs"] = None
            return
        group["distill_token_ids"] = [ids for ids, _ in results]
        group["distill_logprobs"] = [lps for _, lps in results]

    async def handle_send_to_api(
        self,
        scored_data: Any,
        item: Any = None,
        do_send_to_api: bool = True,
        abort_on_any_max_length_exceeded: bool = True,
    ) -> int:
        """Attach teacher logprobs to every group (when enabled), then check and send as ``BaseEnv`` does."""
        if self.teacher_server is not None and getattr(self.config, "teacher_enabled", False):
            groups = scored_data if isinstance(scored_data, (list, tuple)) else [scored_data]
            await asyncio.gather(
                *(self.attach_teacher_logprobs(g) for g in groups if isinstance(g, dict) and g.get("tokens"))
            )
        return await super().handle_send_to_api(
            scored_data, item, do_send_to_api, abort_on_any_max_length_exceeded
        )


def _token_id(key: str, tokenizer: Any) -> Optional[int]:
    """The id of a top-logprobs key: ``token_id:N`` (vLLM's ``return_tokens_as_token_ids``), else the token
    string looked up in the tokenizer's vocabulary (None when it is not a single known token)."""
    if key.startswith("token_id:"):
        return int(key.removeprefix("token_id:"))
    if tokenizer is None:
        return None
    vocab_id = tokenizer.convert_tokens_to_ids(key)
    if vocab_id is not None and vocab_id != getattr(tokenizer, "unk_token_id", None):
        return int(vocab_id)
    encoded = tokenizer.encode(key, add_special_tokens=False)
    return int(encoded[0]) if len(encoded) == 1 else None


def echo_prompt_topk(
    completion: Any, tokens: list[int], top_k: int, tokenizer: Any = None
) -> tuple[list[list[int]], list[list[float]]]:
    """Per-position teacher entries of ``tokens`` from an echoed ``/v1/completions`` answer.

    Position 0 has none; position ``p >= 1`` has the token ``tokens[p]`` first (its logprob from
    ``token_logprobs``), then up to ``top_k`` other ids from ``top_logprobs``, most likely first. Raises
    ``ValueError`` when the answer has no logprobs or fewer positions than ``tokens``.
    """
    choices = getattr(completion, "choices", None) or []
    logprobs = getattr(choices[0], "logprobs", None) if choices else None
    token_lps = list(getattr(logprobs, "token_logprobs", None) or [])
    top = list(getattr(logprobs, "top_logprobs", None) or [])
    if len(token_lps) < len(tokens) or len(top) < len(tokens):
        raise ValueError(
            f"the teacher's echoed answer has {min(len(token_lps), len(top))} positions for {len(tokens)} tokens "
            "(does the server return logprobs with echo?)"
        )
    ids: list[list[int]] = [[]]
    lps: list[list[float]] = [[]]
    for p in range(1, len(tokens)):
        if token_lps[p] is None:
            raise ValueError(f"the teacher's echoed answer has no logprob at position {p}")
        row_ids, row_lps = [int(tokens[p])], [float(token_lps[p])]
        entries = sorted((top[p] or {}).items(), key=lambda kv: kv[1], reverse=True)
        for key, value in entries:
            if len(row_ids) > top_k:
                break
            tid = _token_id(str(key), tokenizer)
            if tid is not None and tid not in row_ids:
                row_ids.append(tid)
                row_lps.append(float(value))
        ids.append(row_ids)
        lps.append(row_lps)
    return ids, lps


__all__ = ["TeacherDistillationConfig", "TeacherDistillationEnv", "echo_prompt_topk"]
