"""``SGLangServer``: an SGLang server with token ids and logprobs (``server_type: sglang``).

Chat and text completions use SGLang's OpenAI routes; token-level calls use SGLang's native
``POST /generate`` with ``input_ids``, ``sampling_params``, ``return_logprob: true``. Answers carry
``meta_info.output_token_logprobs`` as ``[logprob, token_id, text]`` triples and
``meta_info.finish_reason`` as ``{"type": ...}`` (returned here as the plain string).
:meth:`SGLangServer.get_logprobs` asks for ``logprob_start_len: 0`` and ``top_logprobs_num`` and
reads ``meta_info.input_top_logprobs``.
"""

from __future__ import annotations

from typing import Any, Optional

from atroposlib.envs.server_handling.errors import BackendProtocolError
from atroposlib.envs.server_handling.logprob_parsing import normalize_finish_reason, normalize_prompt_logprobs
from atroposlib.envs.server_handling.openai_compat import OpenAICompatibleServer
from atroposlib.envs.server_handling.openai_server import resolve_openai_configs  # noqa: F401  (re-exported)
from atroposlib.envs.server_handling.server_baseline import APIServerConfig, ReasoningConfig, require_base_url
from atroposlib.envs.server_handling.tokenizer_util import ConfigTokenizerMixin, encode_prompt
from atroposlib.envs.server_handling.vllm_server import VLLMServer, sampling_params_from_kwargs


class SGLangServer(ConfigTokenizerMixin, OpenAICompatibleServer):
    """Client for an SGLang server."""

    def __init__(self, config: APIServerConfig, reasoning_config: Optional[ReasoningConfig] = None):
        require_base_url(config, "sglang")
        super().__init__(config, reasoning_config=reasoning_config)
        self._init_tokenizer(config)

    async def _probe_health(self) -> bool:
        """``GET {root}/health``."""
        status = await self.http.get_status(f"{self.root_url}/health", timeout=self.health_probe_timeout)
        return status < 500

    def _prompt_ids(self, kwargs: dict[str, Any]) -> tuple[list[int], dict[str, Any]]:
        input_ids, prompt, rest = VLLMServer._split_prompt(kwargs)
        if input_ids is None:
            input_ids = encode_prompt(self.tokenizer, prompt or "")
        return input_ids, rest

    @staticmethod
    def _sampling_params(params: dict[str, Any]) -> dict[str, Any]:
        params = dict(params)
        if "max_tokens" in params:
            params["max_new_tokens"] = params.pop("max_tokens")
        return params

    async def _tokens_and_logprobs_completion_wrapper(self, **kwargs) -> tuple[list, list, list, list]:
        prompt_tokens, rest = self._prompt_ids(kwargs)
        params, timeout = sampling_params_from_kwargs(rest)
        payload = {
            "input_ids": prompt_tokens,
            "sampling_params": self._sampling_params(params),
            "return_logprob": True,
            "return_text_in_logprobs": False,
        }
        result = await self.http.post_json(f"{self.root_url}/generate", payload, timeout=timeout)
        results = result if isinstance(result, list) else [result]
        outputs, logprobs, finish = [], [], []
        for item in results:
            meta = (item or {}).get("meta_info")
            if not isinstance(meta, dict) or "output_token_logprobs" not in meta:
                raise BackendProtocolError("SGLang /generate answer lacks meta_info.output_token_logprobs")
            triples = meta["output_token_logprobs"] or []
            logprobs.append([float(t[0]) for t in triples])
            outputs.append([int(t[1]) for t in triples])
            finish.append(normalize_finish_reason(meta.get("finish_reason")))
        return prompt_tokens, outputs, logprobs, finish

    async def _get_logprobs_wrapper(self, **kwargs) -> dict[str, Any]:
        kwargs = dict(kwargs)
        top_k = kwargs.pop("top_k", None)
        top_logprobs = kwargs.pop("top_logprobs", None)
        top_k = max(1, int(top_k if top_k is not None else (top_logprobs if top_logprobs is not None else 1)))
        prompt_tokens, rest = self._prompt_ids(kwargs)
        params, timeout = sampling_params_from_kwargs(rest)
        params = self._sampling_params(params)
        params.update({"n": 1, "temperature": 0.0, "top_p": 1.0})
        params.setdefault("max_new_tokens", 1)
        payload = {
            "input_ids": prompt_tokens,
            "sampling_params": params,
            "return_logprob": True,
            "logprob_start_len": 0,
            "top_logprobs_num": top_k,
            "return_text_in_logprobs": False,
        }
        result = await self.http.post_json(f"{self.root_url}/generate", payload, timeout=timeout)
        item = result[0] if isinstance(result, list) else result
        meta = (item or {}).get("meta_info") or {}
        raw = meta.get("input_top_logprobs")
        if raw is None:
            raise BackendProtocolError("SGLang /generate answer lacks meta_info.input_top_logprobs")
        ids, lps = normalize_prompt_logprobs(raw, prompt_tokens, top_k)
        return {"prompt_tokens": prompt_tokens, "prompt_topk_token_ids": ids, "prompt_topk_logprobs": lps}
