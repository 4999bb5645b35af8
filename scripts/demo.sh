#!/usr/bin/env bash
# Install, then run the main job.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install.sh
exec python3 -m atroposlib.cli.run_api --host 127.0.0.1 --port 8000 "$@"
