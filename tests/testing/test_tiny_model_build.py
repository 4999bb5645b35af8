"""The tiny model is built once when several processes (e.g. parallel test workers) ask for it at once."""

from __future__ import annotations

import subprocess
import sys

from transformers import AutoConfig

BUILD = """
import sys
from atroposlib.testing import tiny_model

original = tiny_model._build_into

def counted(*args, **kwargs):
    print("BUILT", flush=True)
    return original(*args, **kwargs)

tiny_model._build_into = counted
print(tiny_model.build_tiny_model(cache_dir=sys.argv[1]), flush=True)
"""


def test_concurrent_builds_build_once(tmp_path):
    cache = tmp_path / "cache"
    procs = [
        subprocess.Popen([sys.executable, "-c", BUILD, str(cache)], stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    outputs = [proc.communicate(timeout=600)[0] for proc in procs]
    assert [proc.returncode for proc in procs] == [0, 0]
    assert sum(out.count("BUILT") for out in outputs) == 1, outputs
    paths = {out.strip().splitlines()[-1] for out in outputs}
    assert len(paths) == 1
    model_dir = paths.pop()
    assert AutoConfig.from_pretrained(model_dir).model_type == "qwen2"
    assert not [p for p in cache.iterdir() if p.name.startswith(".building-")]
