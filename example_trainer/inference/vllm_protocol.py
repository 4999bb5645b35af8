"""The ``/generate`` contract of the vLLM server, as pure functions over vLLM's own types.

A body is ``{"prompt": text | [ids] | {"prompt_token_ids": [ids]}, "stream"?: bool, <SamplingParams>}``;
:func:`parse_generate_request` validates it, :func:`format_generate_response` builds the reply from the
engine's final output and :func:`stream_chunk` each NDJSON line of a streamed reply.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from example_trainer.inference.routes.errors import BadRequest

#: Keys of a ``/generate`` body that are not sampling parameters.
_NON_SAMPLING_KEYS = ("prompt", "stream")


@dataclass
class GenerateRequest:
    """A validated ``/generate`` body: the engine prompt, stream flag and sampling parameters."""

    prompt: str | dict[str, list[int]]
    stream: bool
    sampling_params: Any  # vllm.SamplingParams


def _parse_token_ids(value: Any, vocab_size: int | None) -> list[int]:
    if not isinstance(value, list) or not value:
        raise BadRequest("'prompt_token_ids' must be a non-empty list of integers")
    for tok in value:
        if isinstance(tok, bool) or not isinstance(tok, int):
            raise BadRequest(f"'prompt_token_ids' must hold integers, got {tok!r}")
        if tok < 0 or (vocab_size is not None and tok >= vocab_size):
            raise BadRequest(f"token id {tok} is outside the vocabulary [0, {vocab_size})")
    return list(value)


def parse_generate_request(body: Any, *, vocab_size: int | None = None) -> GenerateRequest:
    """Validate a ``/generate`` JSON body and build its :class:`vllm.SamplingParams`.

    ``prompt`` is a string, ``{"prompt_token_ids": [int, ...]}`` or a bare list of token ids;
    ``stream`` is an optional bool; every other key is passed to ``SamplingParams``. Token ids
    must lie in ``[0, vocab_size)`` when ``vocab_size`` is given. Non-stream requests return
    only the final output; stream requests return cumulative outputs.

    Raises:
        BadRequest: with a message naming the offending field.
    """
    from vllm.exceptions import VLLMError
    from vllm.sampling_params import RequestOutputKind, SamplingParams

    if not isinstance(body, dict):
        raise BadRequest("request body must be a JSON object")
    if "prompt" not in body:
        raise BadRequest("missing required field 'prompt'")
    raw_prompt = body["prompt"]
    prompt: str | dict[str, list[int]]
    if isinstance(raw_prompt, str):
        if not raw_prompt:
            raise BadRequest("'prompt' must not be empty")
        prompt = raw_prompt
    elif isinstance(raw_prompt, dict):
        unknown = set(raw_prompt) - {"prompt_token_ids"}
        if unknown or "prompt_token_ids" not in raw_prompt:
            raise BadRequest("'prompt' as an object must be {\"prompt_token_ids\": [int, ...]}")
        prompt = {"prompt_token_ids": _parse_token_ids(raw_prompt["prompt_token_ids"], vocab_size)}
    elif isinstance(raw_prompt, list):
        prompt = {"prompt_token_ids": _parse_token_ids(raw_prompt, vocab_size)}
    else:
        raise BadRequest("'prompt' must be a string, a list of token ids or {\"prompt_token_ids\": [...]}")

    stream = body.get("stream", False)
    if not isinstance(stream, bool):
        raise BadRequest("'stream' must be a boolean")
    params = {k: v for k, v in body.items() if k not in _NON_SAMPLING_KEYS}
    params["output_kind"] = RequestOutputKind.CUMULATIVE if stream else RequestOutputKind.FINAL_ONLY
    try:
        sampling_params = SamplingParams(**params)
    except (TypeError, ValueError, VLLMError) as exc:
        raise BadRequest(f"invalid sampling parameters: {exc}") from exc
    return GenerateRequest(prompt=prompt, stream=stream, sampling_params=sampling_params)


def _position_logprobs(position: Mapping[int, Any] | None, chosen: int | None) -> dict[str, float] | None:
    """``{token_id: logprob}`` for one position, the chosen token first (clients read item 0)."""
    if position is None:
        return None
    out: dict[str, float] = {}
    if chosen is not None and chosen in position:
        out[str(chosen)] = float(position[chosen].logprob)
    for tok, lp in position.items():
        out.setdefault(str(tok), float(lp.logprob))
    return out


def format_generate_response(final_output: Any, sampling_params: Any, prompt_text: str) -> dict[str, Any]:
    """The non-stream ``/generate`` reply for one finished :class:`vllm.RequestOutput`.

    Always ``{"text": [...], "prompt": str, "finish_reasons": [...]}``. When ``logprobs`` was
    requested it adds ``"logprobs"`` (per output, per generated position, a one-element list
    holding ``{token_id: logprob}`` with the sampled token first), ``"prompt_token_ids"`` and
    ``"token_ids"`` (per output). When ``prompt_logprobs`` was requested it adds
    ``"prompt_logprobs"``: per prompt position ``{token_id: logprob}`` with the prompt's own token
    first, ``null`` for the first position.
    """
    outputs = list(final_output.outputs)
    reply: dict[str, Any] = {
        "text": [o.text for o in outputs],
        "prompt": prompt_text,
        "finish_reasons": [o.finish_reason for o in outputs],
    }
    if sampling_params.logprobs is not None:
        reply["logprobs"] = [
            [[_position_logprobs(pos, tok)] for pos, tok in zip(o.logprobs or [], o.token_ids, strict=False)]
            for o in outputs
        ]
        reply["prompt_token_ids"] = list(final_output.prompt_token_ids or [])
        reply["token_ids"] = [list(o.token_ids) for o in outputs]
    if sampling_params.prompt_logprobs is not None:
        prompt_ids = list(final_output.prompt_token_ids or [])
        reply["prompt_logprobs"] = [
            _position_logprobs(pos, prompt_ids[i] if i < len(prompt_ids) else None)
            for i, pos in enumerate(final_output.prompt_logprobs or [])
        ]
    return reply


def stream_chunk(request_output: Any, prompt_text: str) -> bytes:
    """One NDJSON line of a streamed ``/generate``: ``{"text": [prompt + text so far, ...]}``."""
    texts = [prompt_text + o.text for o in request_output.outputs]
    return (json.dumps({"text": texts}) + "\n").encode()


def prompt_text(engine: Any, final_output: Any) -> str:
    """The prompt of ``final_output`` as text (decoded from its token ids when it was given as ids)."""
    if final_output.prompt:
        return final_output.prompt
    tokenizer = getattr(engine, "tokenizer", None)
    if tokenizer is None or not final_output.prompt_token_ids:
        return ""
    return tokenizer.decode(final_output.prompt_token_ids)


def vocab_size(engine: Any) -> int | None:
    """The served model's vocabulary size, None when the engine cannot say."""
    try:
        return int(engine.model_config.get_vocab_size())
    except Exception:  # noqa: BLE001 - only used for validation
        return None
