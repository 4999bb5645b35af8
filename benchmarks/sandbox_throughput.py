"""Programs per second through the sandbox against plain ``python -c`` subprocesses, in the same run.

    python benchmarks/sandbox_throughput.py [--programs 40] [--parallel N] [--rounds 3]
                                            [--code "print(sum(range(1000)))"] [--json-out results.json]

Each round runs ``--programs`` copies of the same small program four ways, alternating so that machine noise
hits all of them alike: plain ``python -c`` subprocesses (asyncio, the same interpreter), then
:class:`atroposlib.sandbox.Sandbox` runs, each one at a time and then ``--parallel`` at once (default: the
core count). Printed: programs/s of each (median over rounds), the ratio sandbox/plain, and the wall-clock
time the sandbox adds per program (sequential: set-up and tear-down of the namespaces, the mounts and the
launcher). Target: at most 0.1 s added per program.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from atroposlib.sandbox import Sandbox, SandboxLimits  # noqa: E402


async def plain_run(code: str) -> int:
    process = await asyncio.create_subprocess_exec(
        sys.executable,
        "-c",
        code,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
    )
    await process.communicate()
    return process.returncode or 0


async def timed_batch(programs: int, parallel: int, run_one) -> float:
    """Seconds to run ``programs`` programs with at most ``parallel`` at once."""
    gate = asyncio.Semaphore(parallel)

    async def one() -> None:
        async with gate:
            await run_one()

    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(programs)))
    return time.perf_counter() - start


async def measure(programs: int, parallel: int, rounds: int, code: str) -> dict:
    limits = SandboxLimits(wall_seconds=60)
    sandboxes = {
        1: Sandbox(max_parallel=1, limits=limits),
        parallel: Sandbox(max_parallel=parallel, limits=limits),
    }
    sandboxes[1].check()

    async def sandboxed(width: int) -> None:
        result = await sandboxes[width].run_python(code)
        if result.exit_code != 0:
            raise SystemExit(
                f"the benchmark program failed in the sandbox: {result.reason}: {result.stderr[-500:]}"
            )

    async def plain() -> None:
        if await plain_run(code) != 0:
            raise SystemExit("the benchmark program failed as a plain subprocess")

    # Warm the page cache and the interpreter's files once before timing.
    await plain()
    await sandboxed(1)
    times: dict[str, list[float]] = {"plain_seq": [], "sandbox_seq": [], "plain_par": [], "sandbox_par": []}
    for _ in range(rounds):
        times["plain_seq"].append(await timed_batch(programs, 1, plain))
        times["sandbox_seq"].append(await timed_batch(programs, 1, lambda: sandboxed(1)))
        times["plain_par"].append(await timed_batch(programs, parallel, plain))
        times["sandbox_par"].append(await timed_batch(programs, parallel, lambda: sandboxed(parallel)))
    seconds = {key: statistics.median(values) for key, values in times.items()}
    rate = {key: programs / value for key, value in seconds.items()}
    return {
        "settings": {"programs": programs, "parallel": parallel, "rounds": rounds, "code": code},
        "programs_per_s": rate,
        "ratio_sequential": rate["sandbox_seq"] / rate["plain_seq"],
        "ratio_parallel": rate["sandbox_par"] / rate["plain_par"],
        "added_s_per_program_sequential": (seconds["sandbox_seq"] - seconds["plain_seq"]) / programs,
        "added_s_per_program_parallel": (seconds["sandbox_par"] - seconds["plain_par"]) / programs,
    }


def report(figures: dict) -> str:
    rate = figures["programs_per_s"]
    parallel = figures["settings"]["parallel"]
    lines = [
        f"{'':<24}{'plain python -c':>18}{'sandbox':>12}{'sandbox/plain':>16}{'added per program':>20}",
        f"{'sequential':<24}{rate['plain_seq']:>14.1f}/s {rate['sandbox_seq']:>9.1f}/s"
        f"{figures['ratio_sequential']:>16.2f}{figures['added_s_per_program_sequential'] * 1000:>17.1f} ms",
        f"{f'{parallel} at once':<24}{rate['plain_par']:>14.1f}/s {rate['sandbox_par']:>9.1f}/s"
        f"{figures['ratio_parallel']:>16.2f}{figures['added_s_per_program_parallel'] * 1000:>17.1f} ms",
        "target: at most 100 ms added per program (sequential)",
    ]
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--programs", type=int, default=40, help="programs per batch")
    parser.add_argument("--parallel", type=int, default=os.cpu_count() or 1, help="programs at once")
    parser.add_argument("--rounds", type=int, default=3, help="alternating rounds; medians are reported")
    parser.add_argument("--code", default="print(sum(range(1000)))", help="the program each run executes")
    parser.add_argument("--json-out", help="also write the figures to this JSON file")
    args = parser.parse_args()
    if args.programs < 1 or args.parallel < 1 or args.rounds < 1:
        parser.error("--programs, --parallel and --rounds must be at least 1")
    figures = asyncio.run(measure(args.programs, args.parallel, args.rounds, args.code))
    print(report(figures))
    if args.json_out:
        Path(args.json_out).write_text(json.dumps(figures, indent=2))


if __name__ == "__main__":
    main()
