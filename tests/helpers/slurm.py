"""A stand-in ``scontrol`` for the SLURM discovery tests, which run on machines without SLURM."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest


def write_scontrol(directory: Path, script: str) -> Path:
    """Write ``directory/scontrol``, an executable ``/bin/sh`` script whose body is ``script``; returns its path.

    ``directory`` is created if missing. ``script`` sees the arguments as ``$1``..., e.g. ``show hostnames LIST``.
    """
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / "scontrol"
    path.write_text("#!/bin/sh\n" + script)
    path.chmod(path.stat().st_mode | stat.S_IEXEC)
    return path


def install_scontrol(monkeypatch: pytest.MonkeyPatch, directory: Path, script: str) -> Path:
    """:func:`write_scontrol`, then put ``directory`` first on ``PATH`` until the test ends."""
    path = write_scontrol(directory, script)
    monkeypatch.setenv("PATH", f"{directory}{os.pathsep}{os.environ['PATH']}")
    return path
