"""A failed ``setup()`` as one readable line.

``setup()`` is where an environment meets its surroundings: it loads data, checks the sandbox, resolves names
from its config. When that fails the cause is almost always the user's to fix (a missing field in a file, no
bubblewrap, an unknown task name), so the command line reports it in one line instead of a traceback.
``ATROPOS_CLI_TRACEBACK=1`` keeps the original exception and its traceback.
"""

from __future__ import annotations

import os
from typing import Any


class EnvSetupError(RuntimeError):
    """``setup()`` of an environment raised; the message names the environment and the cause in one line."""


def traceback_requested() -> bool:
    """True when ``ATROPOS_CLI_TRACEBACK`` asks for original exceptions instead of one-line errors."""
    return os.environ.get("ATROPOS_CLI_TRACEBACK", "").strip().lower() in ("1", "true", "yes")


async def run_setup(env: Any) -> None:
    """Await ``env.setup()``; an exception from it is raised again as :class:`EnvSetupError`.

    With :func:`traceback_requested` the original exception propagates unchanged.
    """
    try:
        await env.setup()
    except Exception as exc:
        if traceback_requested():
            raise
        message = " ".join(str(exc).split()) or type(exc).__name__
        raise EnvSetupError(f"{type(env).__name__}.setup() failed: {message}") from exc
