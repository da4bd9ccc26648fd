#!/usr/bin/env bash
# LiteLLM proxy in its own environment (.venv-litellm), for `make bench-litellm`:
# it must not share the gateway's dependencies, and the comparison needs the
# real proxy server, not the library. Idempotent: a second run only checks.
set -euo pipefail
cd "$(dirname "$0")/.."

VENV=.venv-litellm
VERSION="${LITELLM_VERSION:-1.105.7}"
# Pinned: newer releases need companion packages (litellm-proxy, newer litellm-proxy-extras) that the
# package index these machines use does not carry.
PY="${PYTHON:-python3}"

if [ -x "$VENV/bin/litellm" ] && "$VENV/bin/python" -c "import importlib.metadata as m; assert m.version('litellm') == '$VERSION'" 2>/dev/null; then
    echo "litellm $VERSION already in $VENV"
    exit 0
fi
test -x "$VENV/bin/python" || "$PY" -m venv "$VENV"
"$VENV/bin/python" -m pip install --quiet --upgrade pip
"$VENV/bin/python" -m pip install --quiet "litellm[proxy]==$VERSION"
LITELLM_LOCAL_MODEL_COST_MAP=True "$VENV/bin/litellm" --version >/dev/null
echo "litellm $VERSION installed in $VENV"
