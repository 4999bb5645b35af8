"""compat: the original's flat module paths (``example_trainer.cli``, ``example_trainer.vllm_api_server`` ...).

Each such module is one call to :func:`alias`, which makes the old name the very module object of its wing, so
imports, attribute access and monkeypatching reach the same code; run as a script (``python -m
example_trainer.vllm_api_server``) it calls the module's ``main``.
"""

from __future__ import annotations

import importlib
import sys


def alias(old_name: str, target: str) -> None:
    """Bind ``sys.modules[old_name]`` to the module ``target``, or run its ``main`` when ``old_name`` is
    ``"__main__"`` (exits with its return value)."""
    module = importlib.import_module(target)
    if old_name == "__main__":
        sys.exit(module.main())
    sys.modules[old_name] = module
