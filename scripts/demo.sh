#!/usr/bin/env bash
# Install, then run the main job: the one-command CPU demo (GRPO on the arithmetic environment with
# vLLM; prints held-out accuracy before -> after). Extra arguments go to the demo (see --help).
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec python3 -m example_trainer.demo "$@"
