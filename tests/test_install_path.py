"""scripts/setup.sh's choice of install path (engine/models/install_path.py), with the machine's answers substituted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from engine.models.install_path import LOCKED_PYTHON, choose_path, missing_tools, python_problem

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("forced,system,machine,driver,want", [
    (None, "Linux", "x86_64", True, "cuda"),
    (None, "Linux", "x86_64", False, "cpu"),
    (None, "Darwin", "arm64", False, "metal"),
    (None, "Darwin", "x86_64", False, "cpu"),  # an Intel Mac: no MPS worth having
    (None, "Windows", "AMD64", True, "cuda"),
    ("cpu", "Linux", "x86_64", True, "cpu"),
    ("cpu", "Darwin", "arm64", False, "cpu"),
    ("cuda", "Linux", "x86_64", False, "cuda"),  # forced: the driver may come later
])
def test_auto_and_forced(forced, system, machine, driver, want):
    assert choose_path(forced, system, machine, driver) == want


@pytest.mark.parametrize("forced,system,match", [
    ("rocm", "Linux", "cpu, cuda or metal"), ("metal", "Linux", "needs macOS"), ("cuda", "Darwin", "no CUDA"),
])
def test_impossible_choices_are_refused(forced, system, match):
    with pytest.raises(ValueError, match=match):
        choose_path(forced, system, "arm64", False)


def test_cuda_prerequisites_are_named():
    assert missing_tools("cuda", {"nvcc": False, "cmake": True, "cublas_v2.h": True}) == ["nvcc"]
    assert missing_tools("cuda", {"nvcc": True, "cmake": True}) == ["cublas_v2.h"]  # nvcc without cuBLAS
    assert missing_tools("cuda", {}) == ["nvcc", "cmake", "cublas_v2.h"]
    assert missing_tools("cpu", {"cmake": True}) == []


def test_the_script_setup_runs_answers_in_one_line(tmp_path):
    script = ROOT / "engine" / "models" / "install_path.py"
    run = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "SAPO_ACCEL": "cpu"}, check=True)
    assert run.stdout == "cpu\n"
    bad = subprocess.run([sys.executable, str(script)], capture_output=True, text=True,
                         env={"PATH": "/usr/bin:/bin", "SAPO_ACCEL": "tpu"})
    assert bad.returncode == 2 and bad.stdout == "" and bad.stderr.count("\n") == 1 and "SAPO_ACCEL" in bad.stderr


def test_only_the_locked_python_can_install_the_locks():
    assert LOCKED_PYTHON == (3, 11) and python_problem((3, 11, 7, "final", 0)) is None
    for version in ((3, 12, 3), (3, 13, 0), (3, 10, 12)):
        why = python_problem(version)
        assert why is not None and "\n" not in why
        assert f"this is Python {version[0]}.{version[1]}" in why and "PYTHON=python3.11 scripts/setup.sh" in why


def test_the_locks_hold_one_torch_wheel_for_the_locked_python_only():
    # Why the rule exists: torch's CPU build comes from PyTorch's index as one file, the cp311 one; were the lock
    # to gain the wheels of other versions, the rule could be widened (and this test would say so).
    lock = (ROOT / "requirements" / "cpu-torch.txt").read_text()
    assert lock.startswith("torch==2.13.0+cpu") and lock.count("--hash=sha256:") == 1


def test_setup_takes_a_python311_beside_another_python3(tmp_path):
    # scripts/setup.sh's choice, with a python3 that is not 3.11 first on PATH and a python3.11 after it: the
    # install path comes from python3.11 (an empty SAPO_ACCEL=cpu run of the first lines only).
    fake = tmp_path / "bin"
    fake.mkdir()
    (fake / "python3").write_text("#!/bin/sh\necho 'Python 3.12 (fake)' >&2; exit 1\n")
    (fake / "python3").chmod(0o755)
    (fake / "python3.11").symlink_to(sys.executable)
    probe = (ROOT / "scripts" / "setup.sh").read_text().split("ACCEL=$(")[0]  # up to the install-path choice
    run = subprocess.run(["bash", "-c", probe + 'echo "$PYTHON"'], capture_output=True, text=True, cwd=ROOT,
                         env={"PATH": f"{fake}:/usr/bin:/bin", "HOME": str(tmp_path)})
    assert run.returncode == 0 and run.stdout.strip() == "python3.11", run.stderr
    # Given one explicitly, it is kept, whatever it is.
    run = subprocess.run(["bash", "-c", probe + 'echo "$PYTHON"'], capture_output=True, text=True, cwd=ROOT,
                         env={"PATH": f"{fake}:/usr/bin:/bin", "PYTHON": "python3"})
    assert run.stdout.strip() == "python3"

