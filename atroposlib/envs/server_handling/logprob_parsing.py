"""Pure functions that normalise the logprob payloads of the different backends."""

from __future__ import annotations

from typing import Any, Optional

from atroposlib.envs.server_handling.errors import BackendProtocolError


def _as_float(value: Any) -> float:
    """A logprob given as a number or as ``{"logprob": x, ...}`` (vLLM's ``Logprob``)."""
    if isinstance(value, dict):
        value = value.get("logprob")
    if value is None:
        raise BackendProtocolError("logprob entry without a value")
    return float(value)


def _merge_position(entry: Any) -> dict:
    """One position's ``{token_id: logprob}`` from a dict, a list of dicts, or None."""
    if entry is None:
        return {}
    if isinstance(entry, dict):
        return entry
    if isinstance(entry, list):
        merged: dict = {}
        for item in entry:
            if isinstance(item, dict):
                merged.update(item)
        return merged
    raise BackendProtocolError(f"unexpected logprob entry of type {type(entry).__name__}")


def sampled_logprobs_from_generate(
    positions: list[Any], token_ids: Optional[list[int]] = None
) -> tuple[list[int], list[float]]:
    """Token ids and logprobs of one choice from a ``/generate`` ``logprobs`` list.

    Each position is ``[{token_id: logprob}]`` (or the bare dict). When ``token_ids`` is known the
    logprob of exactly that token is taken; otherwise the first entry of each position is the
    sampled token (the server was asked for ``logprobs=0``).
    """
    ids: list[int] = []
    lps: list[float] = []
    for pos, entry in enumerate(positions):
        mapping = _merge_position(entry)
        if not mapping:
            raise BackendProtocolError(f"empty logprob entry at output position {pos}")
        if token_ids is not None and pos < len(token_ids):
            tid = int(token_ids[pos])
            value = mapping.get(str(tid), mapping.get(tid))
            if value is None:
                key, value = next(iter(mapping.items()))
                tid = int(key)
        else:
            key, value = next(iter(mapping.items()))
            tid = int(key)
        ids.append(tid)
        lps.append(_as_float(value))
    return ids, lps


def normalize_topk_entry(entry: Any, top_k: Optional[int] = None) -> tuple[list[int], list[float]]:
    """Parallel ``(token_ids, logprobs)`` for one prompt position, best first, at most ``top_k``.

    Accepts ``{id: logprob}``, ``{id: {"logprob": x, "rank": r}}``, a list of such dicts, SGLang's
    list of ``[logprob, id, text]`` triples, or None (the first prompt position has no logprob).
    """
    if entry is None:
        return [], []
    pairs: list[tuple[int, float]] = []
    if isinstance(entry, list) and entry and isinstance(entry[0], (list, tuple)):
        pairs = [(int(item[1]), float(item[0])) for item in entry if item is not None]
    else:
        pairs = [(int(k), _as_float(v)) for k, v in _merge_position(entry).items()]
    pairs.sort(key=lambda p: p[1], reverse=True)
    if top_k is not None and top_k > 0:
        pairs = pairs[:top_k]
    return [p[0] for p in pairs], [p[1] for p in pairs]


def normalize_prompt_logprobs(
    raw: Any, prompt_tokens: list[int], top_k: Optional[int] = None
) -> tuple[list[list[int]], list[list[float]]]:
    """Top-k ids/logprobs per prompt position from a ``prompt_logprobs`` payload.

    The payload is a list over positions, possibly nested once per sequence (``[[pos0, pos1, ...]]``).
    """
    if raw is None:
        raise BackendProtocolError("the backend did not return prompt_logprobs")
    entries = raw
    if (
        isinstance(raw, list)
        and len(raw) == 1
        and isinstance(raw[0], list)
        and len(prompt_tokens) > 1
        and not (raw[0] and isinstance(raw[0][0], (int, float)))
    ):
        entries = raw[0]
    ids: list[list[int]] = []
    lps: list[list[float]] = []
    for entry in entries:
        tids, tlps = normalize_topk_entry(entry, top_k)
        ids.append(tids)
        lps.append(tlps)
    return ids, lps


def normalize_finish_reason(value: Any) -> str:
    """A finish reason as a string (SGLang sends ``{"type": "stop", ...}``); None becomes "stop"."""
    if isinstance(value, dict):
        value = value.get("type")
    return str(value) if value else "stop"
