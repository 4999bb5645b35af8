"""``atropos-grpo`` / ``python -m example_trainer.grpo``: the trainer's entry point.

Exit status: 0 when training finished (or was stopped by Ctrl-C/SIGTERM after saving a checkpoint),
2 for a bad command line or config (one line naming the flag), 1 for any other error (one line on
stderr; the traceback only with ``--debug-loading`` or ``ATROPOS_DEBUG=1``).
"""

from __future__ import annotations

import argparse
import logging
import os
import signal
import sys
import threading
import time
from collections.abc import Sequence
from functools import partial
from types import FrameType

from pydantic import ValidationError

from example_trainer.grpo.cli import config_from_args, describe_validation_error, parse_args
from example_trainer.grpo.config import TrainingConfig

PROG = "atropos-grpo"


#: Signals closer together than this count as one: under SLURM and ``torchrun`` a trainer process gets the
#: same SIGTERM from the job step and again from the launcher forwarding it.
DUPLICATE_SIGNAL_S = 2.0


class StopFlag:
    """Set by the first SIGINT/SIGTERM: the loop finishes its step, checkpoints and exits. Another signal
    more than :data:`DUPLICATE_SIGNAL_S` seconds later aborts at once."""

    def __init__(self) -> None:
        self.event = threading.Event()
        self._first_at: float | None = None

    def __call__(self) -> bool:
        return self.event.is_set()

    def install(self) -> None:
        if threading.current_thread() is not threading.main_thread():
            return
        for sig in (signal.SIGINT, signal.SIGTERM):
            signal.signal(sig, self._handle)

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        now = time.monotonic()
        if self.event.is_set():
            if self._first_at is not None and now - self._first_at < DUPLICATE_SIGNAL_S:
                return
            raise KeyboardInterrupt
        self._first_at = now
        self.event.set()
        logging.getLogger(PROG).warning(
            "%s received: finishing the current step, saving a checkpoint and stopping (again to abort)",
            signal.Signals(signum).name,
        )


def run(config: TrainingConfig, should_stop=None):
    """Dispatch on ``config.weight_bridge_mode`` to the matching ``train_*`` function."""
    from example_trainer.grpo import modes as trainers

    dispatch = {
        "none": trainers.train_legacy,
        "lora_only": trainers.train_lora,
        "lora_restart": trainers.train_lora_restart,
        "shared_vllm": trainers.train_shared_vllm,
    }
    return dispatch[config.weight_bridge_mode](config, should_stop=should_stop)


def _fail(message: str, code: int, prog: str = PROG) -> int:
    print(f"{prog}: error: {message}", file=sys.stderr)
    return code


def main(argv: Sequence[str] | None = None) -> int:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    return run_from_args(parse_args(argv))


def run_from_args(args: argparse.Namespace, prog: str = PROG) -> int:
    """Validate the parsed command line, train, and return the exit status (see the module docstring)."""
    _fail_here = partial(_fail, prog=prog)
    try:
        config = config_from_args(args)
    except ValidationError as exc:
        return _fail_here(describe_validation_error(exc), 2)
    debug = config.debug_loading or os.environ.get("ATROPOS_DEBUG") == "1"
    stop = StopFlag()
    stop.install()
    try:
        result = run(config, should_stop=stop)
    except KeyboardInterrupt:
        return _fail_here("aborted", 130)
    except NotImplementedError as exc:
        return _fail_here(str(exc), 2)
    except Exception as exc:  # noqa: BLE001 - one line for the user, traceback on request
        if debug:
            logging.getLogger(prog).exception("training failed")
        from example_trainer.grpo.api_client import AtroposApiError

        plain = isinstance(exc, AtroposApiError | FileNotFoundError | ValueError)
        return _fail_here(str(exc) if plain else f"{type(exc).__name__}: {exc}", 1)
    if result.rank != 0:
        return 0
    where = f"; final checkpoint {result.final_checkpoint}" if result.final_checkpoint else ""
    state = "stopped" if result.stopped_early else "finished"
    print(f"{prog}: {state} at step {result.step}/{config.training_steps}{where}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
