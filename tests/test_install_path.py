"""scripts/setup.sh's choice of install path (engine/models/install_path.py), with the machine's answers substituted."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from engine.models.install_path import choose_path, missing_tools

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
