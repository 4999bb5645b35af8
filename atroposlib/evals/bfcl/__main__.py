"""``python -m atroposlib.evals.bfcl install``: install ``bfcl-eval`` for its data and checker only.

The package is installed with ``pip install --no-deps`` so that its pins (numpy 1.26.4, networkx 3.3,
filelock 3.20.0) and its vendor SDKs never enter the environment; nothing it leaves out is imported here.
Does nothing when the pinned version is already installed. Exit status: pip's.
"""

from __future__ import annotations

import subprocess
import sys
from importlib import metadata

from atroposlib.evals.bfcl.data import BFCL_EVAL_REQUIREMENT


def install_command() -> list[str]:
    """The pip command that installs the pinned ``bfcl-eval`` without its dependencies."""
    return [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "-q", "--no-deps",
            BFCL_EVAL_REQUIREMENT]  # fmt: skip


def installed() -> bool:
    """Whether the pinned ``bfcl-eval`` version is installed."""
    wanted = BFCL_EVAL_REQUIREMENT.split("==", 1)[1]
    try:
        return metadata.version("bfcl-eval") == wanted
    except metadata.PackageNotFoundError:
        return False


def main(argv: list[str] | None = None) -> int:
    args = sys.argv[1:] if argv is None else argv
    if args != ["install"]:
        print("usage: python -m atroposlib.evals.bfcl install", file=sys.stderr)
        return 2
    if installed():
        return 0
    print(f"[install] {BFCL_EVAL_REQUIREMENT} --no-deps (BFCL data and AST checker only)", file=sys.stderr)
    return subprocess.call(install_command())


if __name__ == "__main__":
    sys.exit(main())
