#!/usr/bin/env bash
# Install everything the tests need, then lint and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --test
export WANDB_MODE=offline HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
python3 -m ruff check .
python3 -m ruff format --check .
# Worker processes, one per core (-n auto); tests sharing one service (vLLM, SLURM) or resource (the
# sandbox's user ids) keep to one worker each (xdist_group marks set in tests/conftest.py).
python3 -m pytest -q -p no:cacheprovider -n auto --dist loadgroup "$@"
