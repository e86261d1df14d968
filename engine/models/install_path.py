"""Which install path suits this machine (cpu | cuda | metal), and the command that switches to it.

Standard library only: ``scripts/setup.sh`` runs this file with the system Python before any
virtual environment exists, and the engine imports it to say what a better install would be.
The rules (issue 25): an NVIDIA driver seen (``nvidia-smi -L`` lists a GPU) -> cuda; macOS on
arm64 -> metal; else cpu. ``SAPO_ACCEL=cpu|cuda|metal`` forces one. Each path has its own lock
file, ``requirements/<path>.txt``; the choice logic takes the machine's answers as arguments.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
import sys

PATHS = ("cpu", "cuda", "metal")
# What the CUDA path compiles with, besides the C/C++ compiler every path needs: llama.cpp's CUDA backend links
# cuBLAS, which a toolkit can lack (its header is the sign; seen: nvcc 13.0 alone makes CMake stop at CUDA::cublas).
CUDA_TOOLS = ("nvcc", "cmake", "cublas_v2.h")
CUDA_HOME_BIN = "/usr/local/cuda/bin"  # where the CUDA toolkit puts nvcc when it is not on PATH
FIX = "SAPO_ACCEL={path} scripts/setup.sh"  # from a checkout; docs/DEPLOY.md has the installers' way
# The Python that requirements/*.txt are resolved for (scripts/lock.sh): some of their pins hold one wheel, for
# this version only (torch's CPU build from PyTorch's index is locked as its cp311 file), so another Python cannot
# install them. pyproject allows newer ones; a lock for them is work left (packaging/README.md).
LOCKED_PYTHON = (3, 11)


def choose_path(forced: str | None, system: str, machine: str, nvidia_driver: bool) -> str:
    """The install path: the forced one if given, else cuda with an NVIDIA driver, metal on Apple silicon, else cpu."""
    if forced:
        if forced not in PATHS:
            raise ValueError(f"SAPO_ACCEL must be cpu, cuda or metal, got {forced!r}")
        if forced == "metal" and system != "Darwin":
            raise ValueError("SAPO_ACCEL=metal needs macOS (Apple silicon)")
        if forced == "cuda" and system == "Darwin":
            raise ValueError("SAPO_ACCEL=cuda needs Linux with an NVIDIA GPU (macOS has no CUDA)")
        return forced
    if nvidia_driver and system != "Darwin":
        return "cuda"
    if system == "Darwin" and machine in ("arm64", "aarch64"):
        return "metal"
    return "cpu"


def missing_tools(path: str, found: dict[str, bool]) -> list[str]:
    """The prerequisites of a path that this machine lacks (``found``: tool name -> seen)."""
    need = CUDA_TOOLS if path == "cuda" else ("cmake",)
    return [tool for tool in need if not found.get(tool, False)]


def python_problem(version: tuple[int, ...]) -> str | None:
    """Why set-up cannot install the locks with this Python, in one line; None for the locked version."""
    if tuple(version[:2]) == LOCKED_PYTHON:
        return None
    want = ".".join(map(str, LOCKED_PYTHON))
    return (f"the locks in requirements/ are for Python {want} (torch's CPU wheel among them), and this is Python "
            f"{'.'.join(map(str, version[:2]))}: install Python {want} (e.g. Ubuntu 24.04: the deadsnakes PPA's "
            f"python{want}-venv) and run PYTHON=python{want} scripts/setup.sh")


def better_path(installed: str, best: str) -> str | None:
    """The command that gets this machine's best path, or None when the install already is it."""
    return None if installed == best else FIX.format(path=best)


def nvidia_driver_seen() -> bool:
    """Whether an NVIDIA driver answers: ``nvidia-smi -L`` exits 0 and lists a GPU."""
    if shutil.which("nvidia-smi") is None:
        return False
    try:
        done = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and "GPU" in done.stdout


def this_machine_path(forced: str | None = None) -> str:
    return choose_path(forced, platform.system(), platform.machine(), nvidia_driver_seen())


def tools_found() -> dict[str, bool]:
    path = os.environ.get("PATH", "") + os.pathsep + CUDA_HOME_BIN
    found = {tool: shutil.which(tool, path=path) is not None for tool in CUDA_TOOLS[:2]}
    nvcc = shutil.which("nvcc", path=path)
    homes = [os.environ.get("CUDA_HOME", ""), os.path.dirname(CUDA_HOME_BIN),
             os.path.dirname(os.path.dirname(os.path.realpath(nvcc))) if nvcc else ""]
    found["cublas_v2.h"] = any(h and os.path.exists(os.path.join(h, "include", "cublas_v2.h")) for h in homes)
    return found


def main(argv: list[str]) -> int:
    """``install_path.py``: print the path (exit 2, one line, for a Python the locks cannot serve);
    ``install_path.py --missing PATH``: print what it lacks, one line."""
    try:
        if argv[:1] == ["--missing"]:
            lacking = missing_tools(argv[1], tools_found())
            if lacking:
                print(" ".join(lacking))
            return 0
        path = this_machine_path(os.environ.get("SAPO_ACCEL") or None)
        if (problem := python_problem(sys.version_info)) is not None:
            raise ValueError(problem)
        print(path)
        return 0
    except ValueError as err:
        print(f"setup: {err}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
