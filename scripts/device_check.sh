#!/usr/bin/env bash
# The device check: a random model of Qwen2.5-0.5B's shape, built locally, trained 20 GRPO steps against the
# arithmetic environment in each weight mode (none with in-place reload, none with the weight broadcast,
# shared_vllm, lora_only), with the server's logprobs checked against the trainer's after every refresh.
# Needs one GPU and about five minutes; nothing is downloaded. Arguments go to scripts/device_check.py
# (e.g. --device cpu --shape tiny --steps 2 for the same path on a CPU).
set -euo pipefail
cd "$(dirname "$0")/.."
export PYTHONUNBUFFERED=1 WANDB_MODE=offline HF_HUB_OFFLINE=1 TOKENIZERS_PARALLELISM=false
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # the repo itself, installed or not
exec python3 scripts/device_check.py "$@"
