#!/usr/bin/env bash
# Builds .venv-llamacpp: llama.cpp's own `llama-server`, CPU only, from the llama.cpp
# sources that the llama-cpp-python sdist on PyPI vendors (see docs/runtimes.md).
# The sdist is checked by digest; the cmake configure and build run without a network
# (unshare), so nothing is fetched while building (the web UI download is off too).
# Idempotent: a finished build is detected by its stamp and left alone.
set -euo pipefail

cd "$(dirname "$0")/.."
DEST=.venv-llamacpp
VERSION=0.3.36
SHA256=832db0699007f1be95a7e41ef12e88926b02ba836461e36a36372db2760c1a2e
STAMP="$DEST/.installed-llamacpp-$VERSION"
JOBS="${JOBS:-$(nproc)}"

if [[ -f "$STAMP" ]]; then
    echo "install-llamacpp: $DEST already built"
    exit 0
fi

mkdir -p "$DEST/src"
SDIST="$DEST/src/llama_cpp_python-$VERSION.tar.gz"
if ! echo "$SHA256  $SDIST" | sha256sum -c --quiet - 2>/dev/null; then
    rm -f "$SDIST"
    # pip is the ordinary PyPI client; --no-binary keeps it on the source archive.
    "${PIP:-.venv/bin/pip}" download --quiet --no-deps --no-binary :all: \
        "llama-cpp-python==$VERSION" -d "$DEST/src"
    echo "$SHA256  $SDIST" | sha256sum -c --quiet -
fi

SRC="$DEST/src/llama_cpp_python-$VERSION/vendor/llama.cpp"
test -f "$SRC/CMakeLists.txt" || tar -xzf "$SDIST" -C "$DEST/src"

# The build runs in a network namespace of its own when the machine allows one.
OFFLINE=()
if unshare -rn true 2>/dev/null; then
    OFFLINE=(unshare -rn)
else
    echo "install-llamacpp: no network namespace here; building with the web UI download off only" >&2
fi

BUILD="$DEST/build"
"${OFFLINE[@]}" cmake -S "$SRC" -B "$BUILD" -DCMAKE_BUILD_TYPE=Release \
    -DLLAMA_BUILD_SERVER=ON -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_BUILD_UI=OFF -DLLAMA_CURL=OFF -DLLAMA_OPENSSL=OFF \
    -DGGML_NATIVE=OFF -DBUILD_SHARED_LIBS=OFF >"$DEST/cmake-configure.log"
"${OFFLINE[@]}" nice cmake --build "$BUILD" --config Release --target llama-server -j "$JOBS" \
    >"$DEST/cmake-build.log"

mkdir -p "$DEST/bin"
cp "$BUILD/bin/llama-server" "$DEST/bin/llama-server"
"$DEST/bin/llama-server" --version
touch "$STAMP"
echo "install-llamacpp: $DEST ready"
