"""``TrlVllmServer``: TRL's ``trl vllm-serve`` generation server (``server_type: trl``).

TRL's server has one generation route, ``POST {base_url}/generate/`` taking
``{"prompts": [text], "n", "repetition_penalty", "temperature", "top_p", "top_k", "min_p",
"max_tokens"}`` and answering ``{"completion_ids": [[...]]}``; recent TRL releases also return
``"prompt_ids"`` and ``"logprobs"`` (one logprob per completion token). Chat prompts are rendered
with the model's chat template. Token-level calls (and hence ``ManagedServer``) work when the
server returns logprobs; with an older TRL they fail with a ``NotImplementedError`` saying so.
Health: ``GET {base_url}/health/``. A ``base_url`` ending in ``/v1`` (OpenAI style) is taken as the root.
:func:`use_policy_tokenizer` gives such servers the environment's tokenizer when they name none.
"""

from __future__ import annotations

from typing import Any, Optional

from openai.types.chat.chat_completion import ChatCompletion
from openai.types.completion import Completion

from atroposlib.envs.server_handling.errors import BackendProtocolError
from atroposlib.envs.server_handling.http import HTTPClient, root_url
from atroposlib.envs.server_handling.responses import chat_completion_of, completion_of
from atroposlib.envs.server_handling.server_baseline import (
    APIServer,
    APIServerConfig,
    ReasoningConfig,
    require_base_url,
)
from atroposlib.envs.server_handling.tokenizer_util import ConfigTokenizerMixin

#: Defaults TRL's server applies when a parameter is absent (sent explicitly in every request).
TRL_DEFAULTS: dict[str, Any] = {
    "n": 1,
    "repetition_penalty": 1.0,
    "temperature": 1.0,
    "top_p": 1.0,
    "top_k": -1,
    "min_p": 0.0,
    "max_tokens": 1024,
}


class TrlVllmServer(ConfigTokenizerMixin, APIServer):
    """Client for TRL's vLLM generation server."""

    def __init__(self, config: APIServerConfig, reasoning_config: Optional[ReasoningConfig] = None):
        require_base_url(config, "trl")
        super().__init__(config, reasoning_config=reasoning_config)
        self.http = HTTPClient(api_key=config.api_key or None, timeout=float(config.timeout))
        self._init_tokenizer(config)

    @property
    def _url(self) -> str:
        # TRL's routes sit at the server root; an OpenAI-style base URL's trailing /v1 is dropped.
        return root_url(self.config.base_url)

    async def check_server_status_task(self, chat_completion: bool = True):
        await self._health_check_loop()

    async def _probe_health(self) -> bool:
        status = await self.http.get_status(f"{self._url}/health/", timeout=self.health_probe_timeout)
        return status < 500

    async def _generate(self, prompt_text: str, kwargs: dict[str, Any]) -> dict[str, Any]:
        body: dict[str, Any] = {"prompts": [prompt_text]}
        for key, default in TRL_DEFAULTS.items():
            value = kwargs.get(key)
            body[key] = default if value is None else value
        if kwargs.get("max_completion_tokens") is not None:
            body["max_tokens"] = kwargs["max_completion_tokens"]
        result = await self.http.post_json(f"{self._url}/generate/", body)
        if not isinstance(result, dict) or "completion_ids" not in result:
            raise BackendProtocolError("TRL /generate/ did not return 'completion_ids'")
        return result

    def _finish_reason(self, ids: list[int]) -> str:
        return "stop" if self.tokenizer.eos_token_id in ids else "length"

    def _render_chat(self, messages: list[dict[str, Any]]) -> str:
        return self.tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True)

    async def _chat_completion_wrapper(self, **kwargs) -> ChatCompletion:
        result = await self._generate(self._render_chat(kwargs.get("messages") or []), kwargs)
        return chat_completion_of(*self._texts_and_finish_reasons(result), self.config.model_name)

    async def _completion_wrapper(self, **kwargs) -> Completion:
        result = await self._generate(str(kwargs.get("prompt", "")), kwargs)
        return completion_of(*self._texts_and_finish_reasons(result), self.config.model_name)

    def _texts_and_finish_reasons(self, result: dict[str, Any]) -> tuple[list[str], list[str]]:
        ids_per_choice = result["completion_ids"]
        texts = [self.tokenizer.decode(ids, skip_special_tokens=True) for ids in ids_per_choice]
        return texts, [self._finish_reason(ids) for ids in ids_per_choice]

    async def _tokens_and_logprobs_completion_wrapper(self, **kwargs) -> tuple[list, list, list, list]:
        input_ids = kwargs.get("input_ids")
        prompt = kwargs.get("prompt")
        if prompt is None and input_ids is None:
            raise ValueError("prompt or input_ids is required")
        # TRL's server takes text prompts only; token ids are decoded back to text.
        text = prompt if prompt is not None else self.tokenizer.decode(input_ids, skip_special_tokens=False)
        result = await self._generate(text, kwargs)
        if "logprobs" not in result or result["logprobs"] is None:
            raise NotImplementedError(
                "this TRL vllm-serve does not return logprobs, so token-level calls (ManagedServer) are not "
                "possible; upgrade TRL, or serve the model with vLLM and use server_type 'vllm'"
            )
        prompt_ids = result.get("prompt_ids")
        if prompt_ids:
            prompt_tokens = [int(t) for t in prompt_ids[0]]
        elif input_ids is not None:
            prompt_tokens = list(input_ids)
        else:
            prompt_tokens = list(self.tokenizer.encode(text))
        outputs = [[int(t) for t in ids] for ids in result["completion_ids"]]
        logprobs = [[float(lp) for lp in lps] for lps in result["logprobs"]]
        for ids, lps in zip(outputs, logprobs, strict=False):
            if len(ids) != len(lps):
                raise BackendProtocolError(f"TRL returned {len(ids)} completion ids but {len(lps)} logprobs")
        finish = [self._finish_reason(ids) for ids in outputs]
        return prompt_tokens, outputs, logprobs, finish

    async def close(self) -> None:
        await super().close()
        await self.http.close()


def use_policy_tokenizer(server: Any, tokenizer: Any) -> None:
    """Give every :class:`TrlVllmServer` of ``server`` (an environment's server manager, or one server)
    whose config names no tokenizer (``tokenizer_name`` unset or ``none``) the environment's ``tokenizer``.

    TRL's server serves the policy being trained and the client renders its chats, so they are rendered with
    the policy's tokenizer instead of one looked up by the served model's name."""
    for each in getattr(server, "servers", None) or [server]:
        if isinstance(each, TrlVllmServer) and (each.config.tokenizer_name or "none").lower() == "none":
            each.tokenizer = tokenizer
