#!/usr/bin/env bash
# Install everything the tests need, then lint and run the whole test suite.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh --test
export WANDB_MODE=offline HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
python3 -m ruff check .
python3 -m ruff format --check .
python3 -m pytest -q -p no:cacheprovider "$@"
