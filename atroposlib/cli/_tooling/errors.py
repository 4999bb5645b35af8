"""One error type for the tools and the wrapper that turns it into a one-line message and exit code."""

from __future__ import annotations

import os
import sys
from collections.abc import Callable


class ToolError(Exception):
    """A problem the user can act on; printed as one line, never as a traceback.

    ``exit_code`` is the process exit status the CLI returns for it (default 1).
    """

    def __init__(self, message: str, exit_code: int = 1) -> None:
        super().__init__(message)
        self.exit_code = exit_code


def run_cli(prog: str, body: Callable[[], int | None]) -> int:
    """Run a tool's ``body`` and map its outcome to an exit status.

    ``ToolError`` -> its message on stderr and its exit code; Ctrl-C -> 130; any other exception ->
    a one-line ``unexpected error`` message and 1 (set ``ATROPOS_DEBUG=1`` to re-raise for a
    traceback).
    """
    try:
        return int(body() or 0)
    except ToolError as exc:
        print(f"{prog}: error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print(f"{prog}: interrupted", file=sys.stderr)
        return 130
    except Exception as exc:  # noqa: BLE001 - the contract is "never a traceback"
        if os.environ.get("ATROPOS_DEBUG"):
            raise
        print(
            f"{prog}: unexpected error: {type(exc).__name__}: {exc} (set ATROPOS_DEBUG=1 for a traceback)",
            file=sys.stderr,
        )
        return 1
