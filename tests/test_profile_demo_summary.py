"""benchmarks/profile_demo.py charges py-spy samples to the innermost process and to the right part."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

_SPEC = importlib.util.spec_from_file_location(
    "profile_demo", Path(__file__).resolve().parents[1] / "benchmarks" / "profile_demo.py"
)
profile_demo = importlib.util.module_from_spec(_SPEC)
_SPEC.loader.exec_module(profile_demo)


def test_samples_are_charged_to_the_innermost_process_and_part(tmp_path):
    demo = 'process 1:"python -m example_trainer.demo --steps 3"'
    trainer = 'process 2:"python -m example_trainer.grpo --model m"'
    worker = 'process 3:"python -B -c from multiprocessing.spawn import spawn_main"'
    raw = tmp_path / "demo.raw"
    raw.write_text(
        f"{demo};{trainer};thread (0x1);train (example_trainer/grpo/step.py:10);"
        "backward (torch/_tensor.py:5);_engine_run_backward (torch/autograd/graph.py:1) 40\n"
        f"{demo};{worker};thread (0x2);worker_busy_loop (vllm/x.py:1);"
        "MessageQueue.acquire_read (vllm/shm.py:3);SpinCondition.wait (vllm/shm.py:9) 20\n"
        f"{demo};thread (0x3);main (example_trainer/demo/pipeline.py:1);sleep (time.py:1) 10\n"
        "garbage line without a count\n"
    )
    summary = profile_demo.summarise(raw, rate=20.0)
    assert summary["trainer"] == {"backward": pytest.approx(2.0)}
    assert summary["vLLM engine core / worker (spawned)"] == {"vLLM shm queue spin-wait": pytest.approx(1.0)}
    assert summary["demo (warm start, evals)"] == {"other": pytest.approx(0.5)}
