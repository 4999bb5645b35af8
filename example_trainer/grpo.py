"""compat: ``python example_trainer/grpo.py`` runs the trainer (the package :mod:`example_trainer.grpo`)."""

import sys

from example_trainer.grpo.main import main

if __name__ == "__main__":
    sys.exit(main())
