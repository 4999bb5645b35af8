"""Loading a Hugging Face tokenizer by hub name or local directory, failing fast and clearly when offline.

``transformers`` retries an unreachable hub for about a minute (printing every retry) before it gives up.
:func:`load_hf_tokenizer` asks the hub once, with a short timeout, before a hub name is loaded: when it does
not answer, only the local cache is used, and a tokenizer that is not cached fails at once with one message
saying what to do (point at a local tokenizer directory, or set ``HF_HUB_OFFLINE=1``).
"""

from __future__ import annotations

import logging
import os
import threading
import time
from pathlib import Path
from typing import Any

logger = logging.getLogger(__name__)

#: Seconds one reachability check of the hub may take.
HUB_PROBE_TIMEOUT_S = 3.0
#: Seconds a reachability answer is reused before the hub is asked again.
HUB_PROBE_TTL_S = 60.0

_probe_lock = threading.Lock()
_probe_cache: dict[str, tuple[bool, float]] = {}


class TokenizerLoadError(RuntimeError):
    """A tokenizer could not be loaded; the message is one line that says what to change."""


def hub_endpoint() -> str:
    """The Hugging Face hub URL in use (``$HF_ENDPOINT`` or https://huggingface.co)."""
    from huggingface_hub import constants

    return str(constants.ENDPOINT).rstrip("/")


def hub_offline_mode() -> bool:
    """Whether the Hugging Face libraries are told to stay offline (``HF_HUB_OFFLINE=1``)."""
    from huggingface_hub import constants

    check = getattr(constants, "is_offline_mode", None)
    if callable(check):
        return bool(check())
    return bool(getattr(constants, "HF_HUB_OFFLINE", False))


def hub_reachable(timeout: float = HUB_PROBE_TIMEOUT_S) -> bool:
    """Whether the hub answers an HTTP request within ``timeout`` seconds (any status counts as an answer).

    The answer is cached per endpoint for :data:`HUB_PROBE_TTL_S` seconds.
    """
    import requests

    endpoint = hub_endpoint()
    with _probe_lock:
        cached = _probe_cache.get(endpoint)
        if cached is not None and time.monotonic() - cached[1] < HUB_PROBE_TTL_S:
            return cached[0]
        try:
            requests.head(endpoint, timeout=timeout, allow_redirects=False)
            reachable = True
        except requests.RequestException:
            reachable = False
        _probe_cache[endpoint] = (reachable, time.monotonic())
        return reachable


def _looks_like_path(name: str) -> bool:
    # Hub ids are "name" or "org/name"; anything absolute, relative-dotted or deeper is a directory.
    return os.path.isabs(name) or name.startswith((".", "~")) or name.count("/") > 1 or "\\" in name


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0][:300] if text else type(exc).__name__


def load_hf_tokenizer(name: str, *, flag: str = "tokenizer_name", **kwargs: Any) -> Any:
    """``AutoTokenizer.from_pretrained(name, **kwargs)`` for a local directory or a hub name.

    ``flag`` names the setting that chose ``name`` (e.g. ``--env.tokenizer_name``) in error messages.
    A hub name is loaded from the local cache alone when ``HF_HUB_OFFLINE=1`` is set or the hub does not
    answer within :data:`HUB_PROBE_TIMEOUT_S` seconds.

    Raises:
        TokenizerLoadError: the directory does not exist, the hub is unreachable (or offline mode is on)
            and the tokenizer is not cached, or loading failed for another reason (message: its first line).
    """
    from transformers import AutoTokenizer

    name = str(name)
    local = Path(name).expanduser()
    if local.is_dir():
        try:
            return AutoTokenizer.from_pretrained(str(local), **kwargs)
        except Exception as exc:
            raise TokenizerLoadError(
                f"cannot load the tokenizer in {name} ({flag}): {_first_line(exc)}"
            ) from exc
    if _looks_like_path(name):
        raise TokenizerLoadError(f"cannot load tokenizer {name!r} ({flag}): no such directory")

    unreachable = False
    offline = hub_offline_mode() or bool(kwargs.get("local_files_only"))
    if not offline and not hub_reachable():
        offline = unreachable = True
    if offline:
        try:
            tokenizer = AutoTokenizer.from_pretrained(name, **{**kwargs, "local_files_only": True})
        except Exception as exc:
            if unreachable:
                why = f"the Hugging Face hub ({hub_endpoint()}) is unreachable"
                fix = f"pass a local tokenizer directory ({flag} /path/to/tokenizer), or set HF_HUB_OFFLINE=1 to use only cached files"
            else:
                why = (
                    "offline mode is on (HF_HUB_OFFLINE=1)"
                    if hub_offline_mode()
                    else "only local files allowed"
                )
                fix = f"pass a local tokenizer directory ({flag} /path/to/tokenizer)"
            raise TokenizerLoadError(
                f"cannot load tokenizer {name!r} ({flag}): {why} and it is not in the local cache; {fix}"
            ) from exc
        if unreachable:
            logger.info(
                "the Hugging Face hub (%s) is not answering: using the cached copy of %s",
                hub_endpoint(),
                name,
            )
        return tokenizer
    try:
        return AutoTokenizer.from_pretrained(name, **kwargs)
    except Exception as exc:
        raise TokenizerLoadError(f"cannot load tokenizer {name!r} ({flag}): {_first_line(exc)}") from exc


__all__ = ["TokenizerLoadError", "hub_endpoint", "hub_offline_mode", "hub_reachable", "load_hf_tokenizer"]
