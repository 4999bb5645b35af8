"""``atropos-grpo-run`` / ``python -m example_trainer.run``: the inference server and the trainer in one command,
for ``--weight-bridge-mode shared_vllm``.

    atropos-grpo-run --model Qwen/Qwen2.5-1.5B-Instruct --training-steps 20 --atropos-url http://localhost:8000

It starts the inference server (``example_trainer.inference.vllm_api_server``, or with ``--inference-backend hf`` the
light Hugging Face server) on ``--vllm-port`` with its weights shareable (``ATROPOS_SHARED_WEIGHTS=1``,
eager mode, no prefix cache), waits for ``/health``, attaches the trainer to the server's own weight
tensors (CUDA IPC on a GPU, shared memory on a CPU; :mod:`example_trainer.inference.shared_weights`) and trains them in
place: every optimizer step is what the next generation uses, with no refresh. The server's log is
``<--log-dir>/vllm_0.log``; it is stopped (its own process group only) when training ends, fails or is
interrupted. Both run on the first visible GPU (choose it with ``CUDA_VISIBLE_DEVICES``).

The flags are ``atropos-grpo``'s; ``--weight-bridge-mode`` may only be ``shared_vllm``, its default here. Exit status
as for ``atropos-grpo``.
"""

from __future__ import annotations

import argparse
import logging
import sys
from collections.abc import Sequence

from example_trainer.grpo.cli import build_parser as build_trainer_parser

PROG = "atropos-grpo-run"


def build_parser() -> argparse.ArgumentParser:
    parser = build_trainer_parser()
    parser.prog = PROG
    parser.description = (
        "Start the inference server and the GRPO trainer together; the trainer trains the server's own "
        "weights in place (shared_vllm: CUDA IPC on a GPU, shared memory on a CPU)."
    )
    parser.set_defaults(weight_bridge_mode="shared_vllm")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    from example_trainer.grpo import run_from_args

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.weight_bridge_mode != "shared_vllm":
        parser.error(
            f"--weight-bridge-mode {args.weight_bridge_mode}: {PROG} runs shared_vllm; use atropos-grpo "
            "for the other modes"
        )
    if not args.use_vllm:
        parser.error("--no-vllm: shared_vllm trains the weights of the server this command starts")
    return run_from_args(args, prog=PROG)


if __name__ == "__main__":
    sys.exit(main())
