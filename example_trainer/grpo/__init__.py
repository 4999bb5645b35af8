"""The GRPO trainer: configuration and command line, batches from the trajectory API, the loss, the training
loop, checkpoints and distributed set-up.

Entry point: ``atropos-grpo`` / ``python -m example_trainer.grpo`` (:func:`example_trainer.grpo.main.main`).
"""

from example_trainer.grpo.main import main, run, run_from_args

__all__ = ["main", "run", "run_from_args"]
