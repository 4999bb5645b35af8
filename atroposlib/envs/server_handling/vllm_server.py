"""``VLLMServer``: a vLLM inference server with token ids and logprobs (``server_type: vllm``).

Chat and text completions use vLLM's OpenAI routes. Token-level calls
(``tokens_and_logprobs_completion``, ``get_logprobs``, hence ``ManagedServer``) work against both
kinds of vLLM server:

* the trainer's server (``example_trainer.inference.vllm_api_server``) through its ``POST
  /generate`` contract: ``{"prompt": {"prompt_token_ids": ids}, "logprobs": 0, ...sampling params}``
  answered by ``{"logprobs": [[[{id: lp}], ...] per choice], "finish_reasons": [...], ...}``;
* a plain ``vllm serve`` OpenAI server (no ``/generate``) through ``POST /v1/completions`` with the
  prompt as token ids, ``logprobs: 0`` and ``return_token_ids: true`` (vLLM >= 0.10), and
  ``prompt_logprobs`` for :meth:`get_logprobs`.

The route is detected on the first token-level call (a 404/405 from ``/generate`` switches to the
OpenAI route) and remembered in :attr:`VLLMServer.token_api`; set it to ``"generate"`` or
``"openai"`` to skip detection. The tokenizer is only loaded when a text prompt must be tokenised
for ``/generate``.
"""

from __future__ import annotations

import logging
from typing import Any, Optional

from atroposlib.envs.server_handling.errors import BackendHTTPError, BackendProtocolError
from atroposlib.envs.server_handling.logprob_parsing import (
    normalize_finish_reason,
    normalize_prompt_logprobs,
    sampled_logprobs_from_generate,
)
from atroposlib.envs.server_handling.openai_compat import OpenAICompatibleServer
from atroposlib.envs.server_handling.openai_server import resolve_openai_configs  # noqa: F401  (re-exported)
from atroposlib.envs.server_handling.server_baseline import APIServerConfig, ReasoningConfig, require_base_url
from atroposlib.envs.server_handling.tokenizer_util import ConfigTokenizerMixin, encode_prompt

logger = logging.getLogger(__name__)

# Request keys that only make sense for the OpenAI client (or that we set ourselves).
_CLIENT_ONLY_KEYS = (
    "model",
    "logprobs",
    "top_logprobs",
    "echo",
    "stream",
    "stream_options",
    "skip_reasoning",
    "extra_headers",
    "extra_query",
    "user",
    "return_token_ids",
)


def sampling_params_from_kwargs(kwargs: dict[str, Any]) -> tuple[dict[str, Any], Optional[float]]:
    """Turn OpenAI-style kwargs into sampling parameters for a token-level request.

    ``extra_body`` is flattened in, ``max_new_tokens``/``max_completion_tokens`` become ``max_tokens``,
    client-only keys are dropped. Returns ``(params, timeout)`` where ``timeout`` is the per-request
    ``timeout`` kwarg (seconds) if one was given.
    """
    params = dict(kwargs)
    timeout = params.pop("timeout", None)
    extra = params.pop("extra_body", None)
    if isinstance(extra, dict):
        params.update(extra)
    for alias in ("max_new_tokens", "max_completion_tokens"):
        if alias in params:
            value = params.pop(alias)
            if value is not None:
                params["max_tokens"] = value
    for key in _CLIENT_ONLY_KEYS:
        params.pop(key, None)
    return params, (float(timeout) if isinstance(timeout, (int, float)) else None)


class VLLMServer(ConfigTokenizerMixin, OpenAICompatibleServer):
    """Client for a vLLM server (the trainer's ``/generate`` server or a plain ``vllm serve``)."""

    def __init__(self, config: APIServerConfig, reasoning_config: Optional[ReasoningConfig] = None):
        require_base_url(config, "vllm")
        super().__init__(config, reasoning_config=reasoning_config)
        self._init_tokenizer(config)
        #: "generate", "openai", or None until detected on the first token-level call.
        self.token_api: Optional[str] = None

    async def _probe_health(self) -> bool:
        """``GET {root}/health`` (vLLM answers 200 when its engine is alive)."""
        status = await self.http.get_status(f"{self.root_url}/health", timeout=self.health_probe_timeout)
        return status < 500

    # -- prompt handling ---------------------------------------------------------------------------
    @staticmethod
    def _split_prompt(kwargs: dict[str, Any]) -> tuple[Optional[list[int]], Optional[str], dict[str, Any]]:
        kwargs = dict(kwargs)
        input_ids = kwargs.pop("input_ids", None)
        prompt = kwargs.pop("prompt", None)
        if input_ids is None and prompt is None:
            raise ValueError("prompt or input_ids is required")
        if input_ids is None and isinstance(prompt, list) and all(isinstance(t, int) for t in prompt):
            input_ids = prompt
        if input_ids is not None:
            return [int(t) for t in input_ids], None, kwargs
        return None, str(prompt), kwargs

    def _prompt_tokens(self, input_ids: Optional[list[int]], prompt: Optional[str]) -> list[int]:
        return input_ids if input_ids is not None else encode_prompt(self.tokenizer, prompt or "")

    async def _with_detection(self, native, openai_route):
        """Run ``native()`` unless the server is known to lack ``/generate``; fall back on 404/405."""
        if self.token_api != "openai":
            try:
                result = await native()
            except BackendHTTPError as exc:
                if exc.status in (404, 405) and self.token_api is None:
                    logger.info(
                        "%s has no /generate route; using /v1/completions for token ids", self._describe()
                    )
                    self.token_api = "openai"
                else:
                    raise
            else:
                self.token_api = "generate"
                return result
        return await openai_route()

    # -- tokens and logprobs -------------------------------------------------------------------------
    async def _tokens_and_logprobs_completion_wrapper(self, **kwargs) -> tuple[list, list, list, list]:
        input_ids, prompt, rest = self._split_prompt(kwargs)
        params, timeout = sampling_params_from_kwargs(rest)

        async def native():
            prompt_tokens = self._prompt_tokens(input_ids, prompt)
            payload = {"prompt": {"prompt_token_ids": prompt_tokens}, **params, "logprobs": 0}
            result = await self.http.post_json(f"{self.root_url}/generate", payload, timeout=timeout)
            return (prompt_tokens, *self._parse_generate(result))

        async def openai_route():
            return await self._completions_tokens(input_ids, prompt, params, timeout)

        return await self._with_detection(native, openai_route)

    @staticmethod
    def _parse_generate(result: Any) -> tuple[list, list, list]:
        if not isinstance(result, dict) or "logprobs" not in result or "finish_reasons" not in result:
            raise BackendProtocolError(
                "/generate did not answer with 'logprobs' and 'finish_reasons'; the server must implement the "
                "token-level /generate contract (example_trainer.inference.vllm_api_server) or be a plain vLLM OpenAI server"
            )
        token_ids = result.get("token_ids")
        outputs, logprobs = [], []
        for i, positions in enumerate(result["logprobs"]):
            ids, lps = sampled_logprobs_from_generate(positions, token_ids[i] if token_ids else None)
            outputs.append(ids)
            logprobs.append(lps)
        finish = [normalize_finish_reason(f) for f in result["finish_reasons"]]
        return outputs, logprobs, finish

    async def _completions_tokens(self, input_ids, prompt, params, timeout) -> tuple[list, list, list, list]:
        payload = {
            "model": self.config.model_name,
            "prompt": input_ids if input_ids is not None else prompt,
            **params,
            "logprobs": 0,
            "return_token_ids": True,
        }
        result = await self.http.post_json(
            f"{self._effective_base_url()}/completions", payload, timeout=timeout
        )
        choices = sorted(result.get("choices") or [], key=lambda c: c.get("index", 0))
        if not choices:
            raise BackendProtocolError("/v1/completions answered without choices")
        prompt_tokens = choices[0].get("prompt_token_ids") or result.get("prompt_token_ids") or input_ids
        outputs, logprobs, finish = [], [], []
        for choice in choices:
            ids = choice.get("token_ids")
            if ids is None:
                raise BackendProtocolError(
                    "/v1/completions did not return token_ids; the vLLM server must support "
                    "'return_token_ids' (vLLM >= 0.10)"
                )
            lps = ((choice.get("logprobs") or {}).get("token_logprobs")) or []
            if len(lps) != len(ids):
                raise BackendProtocolError(
                    f"/v1/completions returned {len(ids)} token ids but {len(lps)} logprobs"
                )
            outputs.append([int(t) for t in ids])
            logprobs.append([float(lp) if lp is not None else 0.0 for lp in lps])
            finish.append(normalize_finish_reason(choice.get("finish_reason")))
        if prompt_tokens is None:
            raise BackendProtocolError("/v1/completions did not return prompt_token_ids")
        return [int(t) for t in prompt_tokens], outputs, logprobs, finish

    # -- prompt logprobs -----------------------------------------------------------------------------
    async def _get_logprobs_wrapper(self, **kwargs) -> dict[str, Any]:
        kwargs = dict(kwargs)
        top_k = kwargs.pop("top_k", None)
        top_logprobs = kwargs.pop("top_logprobs", None)
        top_k = max(1, int(top_k if top_k is not None else (top_logprobs if top_logprobs is not None else 1)))
        input_ids, prompt, rest = self._split_prompt(kwargs)
        params, timeout = sampling_params_from_kwargs(rest)
        # Prompt scoring, not generation: one greedy token.
        params.update({"n": 1, "temperature": 0.0, "top_p": 1.0})
        params.setdefault("max_tokens", 1)

        async def native():
            prompt_tokens = self._prompt_tokens(input_ids, prompt)
            payload = {"prompt": {"prompt_token_ids": prompt_tokens}, **params, "prompt_logprobs": top_k}
            result = await self.http.post_json(f"{self.root_url}/generate", payload, timeout=timeout)
            raw = result.get("prompt_logprobs") if isinstance(result, dict) else None
            if raw is None:
                raise BackendProtocolError("/generate did not return 'prompt_logprobs'")
            ids, lps = normalize_prompt_logprobs(raw, prompt_tokens, top_k)
            return _logprob_payload(prompt_tokens, ids, lps)

        async def openai_route():
            payload = {
                "model": self.config.model_name,
                "prompt": input_ids if input_ids is not None else prompt,
                **params,
                "prompt_logprobs": top_k,
                "return_token_ids": True,
            }
            result = await self.http.post_json(
                f"{self._effective_base_url()}/completions", payload, timeout=timeout
            )
            choices = result.get("choices") or []
            if not choices:
                raise BackendProtocolError("/v1/completions answered without choices")
            prompt_tokens = choices[0].get("prompt_token_ids") or input_ids
            if prompt_tokens is None:
                raise BackendProtocolError("/v1/completions did not return prompt_token_ids")
            ids, lps = normalize_prompt_logprobs(choices[0].get("prompt_logprobs"), prompt_tokens, top_k)
            return _logprob_payload([int(t) for t in prompt_tokens], ids, lps)

        return await self._with_detection(native, openai_route)


def _logprob_payload(
    prompt_tokens: list[int], ids: list[list[int]], lps: list[list[float]]
) -> dict[str, Any]:
    return {"prompt_tokens": prompt_tokens, "prompt_topk_token_ids": ids, "prompt_topk_logprobs": lps}
