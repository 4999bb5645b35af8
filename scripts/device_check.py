"""Run the device check (see example_trainer/demo/device_check.py): the real training path on one GPU."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from example_trainer.demo.device_check import main  # noqa: E402

if __name__ == "__main__":
    raise SystemExit(main())
