"""The KernelBench harness that runs inside the sandbox: a standalone script (standard library and torch).

It reads one job as JSON on stdin: ``{"nonce", "reference", "candidate", "device", "correct_trials",
"perf_trials", "measure_performance", "atol", "rtol", "seed"}`` and writes one line
``<nonce> <json report>`` to the stdout it was started with, only at the end. The report:
``{"compiled", "correct", "ref_ms", "new_ms", "error"}``.

Steps: load the reference (``Model``, ``get_inputs``, ``get_init_inputs``); execute the candidate source
and build ``ModelNew`` with the same init inputs and seed (any failure here, a build of an inline CUDA
extension included, is "not compiled"); run both on ``correct_trials`` seeded inputs and compare the
outputs (same type ``torch.Tensor`` exactly, shape, dtype, ``allclose`` within ``atol``/``rtol``); then,
on a CUDA device with ``measure_performance``, time both with CUDA events (median of ``perf_trials`` runs
after warm-up).

Forging: the nonce is never written where the candidate can read it and the report goes to a descriptor
its prints do not reach; the functions the verdict relies on are bound before the candidate runs, and a
tensor subclass (which could redefine comparisons) is refused. The candidate shares this interpreter, so
code that deliberately inspects the harness (its frames or memory) or patches torch's classes is not
caught.
"""

from __future__ import annotations

import json
import os
import statistics
import sys
import traceback


def _error(exc: BaseException) -> str:
    last = traceback.format_exception_only(type(exc), exc)[-1].strip()
    return last[:500]


def _move(value, device, tensor_type):
    return value.to(device) if isinstance(value, tensor_type) else value


def _outputs(value):
    return list(value) if isinstance(value, (tuple, list)) else [value]


def main() -> None:
    job = json.loads(sys.stdin.buffer.read())
    nonce = job.pop("nonce")
    channel = os.dup(1)
    os.dup2(2, 1)
    _write, _exit, _dumps = os.write, os._exit, json.dumps
    report: dict = {"compiled": False, "correct": False, "ref_ms": None, "new_ms": None, "error": None}

    def finish() -> None:
        for flush in (sys.stdout.flush, sys.stderr.flush):
            try:
                flush()
            except BaseException:  # noqa: BLE001
                pass
        _write(channel, f"{nonce} {_dumps(report)}\n".encode())
        _exit(0)

    import torch

    tensor_type, manual_seed, allclose, no_grad = (
        torch.Tensor,
        torch.manual_seed,
        torch.allclose,
        torch.no_grad,
    )
    device = job["device"]
    if device.startswith("cuda") and not torch.cuda.is_available():
        report["error"] = "cuda unavailable: torch sees no CUDA device inside the sandbox"
        finish()
    reference: dict = {"__name__": "reference"}
    exec(compile(job["reference"], "reference.py", "exec"), reference)
    init_inputs = list(reference["get_init_inputs"]())
    manual_seed(job["seed"])
    ref_model = reference["Model"](*init_inputs).to(device)
    try:
        candidate: dict = {"__name__": "model_new"}
        exec(compile(job["candidate"], "model_new.py", "exec"), candidate)
        manual_seed(job["seed"])
        new_model = candidate["ModelNew"](*init_inputs).to(device)
    except BaseException as exc:  # noqa: BLE001 - a failed build is an outcome, whatever it raises
        report["error"] = f"compile: {_error(exc)}"
        finish()
    report["compiled"] = True
    try:
        with no_grad():
            for trial in range(job["correct_trials"]):
                manual_seed(job["seed"] + trial)
                inputs = [_move(x, device, tensor_type) for x in reference["get_inputs"]()]
                expected, got = _outputs(ref_model(*inputs)), _outputs(new_model(*inputs))
                problem = _compare(expected, got, allclose, tensor_type, job["atol"], job["rtol"])
                if problem:
                    report["error"] = f"trial {trial}: {problem}"
                    finish()
        report["correct"] = True
        if job["measure_performance"] and device.startswith("cuda"):
            report["ref_ms"], report["new_ms"] = _time(torch, reference, ref_model, new_model, job, device)
    except BaseException as exc:  # noqa: BLE001
        report["error"] = f"run: {_error(exc)}"
        report["correct"] = False
    finish()


def _compare(expected, got, allclose, tensor_type, atol: float, rtol: float) -> str:
    if len(expected) != len(got):
        return f"{len(got)} outputs, expected {len(expected)}"
    for want, have in zip(expected, got, strict=True):
        if type(have) is not tensor_type:
            return f"output is {type(have).__name__}, not torch.Tensor"
        if have.shape != want.shape or have.dtype != want.dtype:
            return f"output {tuple(have.shape)} {have.dtype}, expected {tuple(want.shape)} {want.dtype}"
        if not bool(allclose(have, want, atol=atol, rtol=rtol)):
            return "output differs from the reference"
    return ""


def _time(torch, reference: dict, ref_model, new_model, job: dict, device: str) -> tuple[float, float]:
    Event, synchronize = torch.cuda.Event, torch.cuda.synchronize
    torch.manual_seed(job["seed"])
    inputs = [_move(x, device, torch.Tensor) for x in reference["get_inputs"]()]

    def median_ms(model) -> float:
        times = []
        with torch.no_grad():
            for _ in range(3):
                model(*inputs)
            synchronize()
            for _ in range(job["perf_trials"]):
                start, end = Event(enable_timing=True), Event(enable_timing=True)
                start.record()
                model(*inputs)
                end.record()
                synchronize()
                times.append(start.elapsed_time(end))
        return statistics.median(times)

    return median_ms(ref_model), median_ms(new_model)


if __name__ == "__main__":
    main()
