"""The deployment samples (Dockerfile, compose.yaml, deploy/) say what the relay really accepts.

Docker is not run here (no daemon on the test machine): the image's install line is checked to name
only the relay's own dependencies, compose.yaml is parsed, the relay flags in every sample are parsed
by the relay's own argument parser, and the load-balancer and systemd files are checked by haproxy,
nginx and systemd-analyze themselves where those are installed (skipped with the reason otherwise).
"""

from __future__ import annotations

import ast
import importlib.metadata
import re
import shlex
import shutil
import subprocess
import sys
import tomllib
from configparser import ConfigParser
from pathlib import Path

import pytest
import yaml

from relay.cli import build_parser

ROOT = Path(__file__).resolve().parents[1]
REQUIREMENTS = ROOT / "deploy" / "requirements-relay.txt"
HEAVY = {"torch", "llama-cpp-python", "transformers", "peft", "pyside6", "pyside6-essentials", "pyqtgraph", "numpy",
         "reasoning-gym", "gguf", "safetensors", "huggingface-hub", "matplotlib"}
# Flags of sapo-relay that the samples use but another branch of issue 14 adds (relay/redis_backend.py).
PENDING_FLAGS = {"--redis"}


def _norm(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def _requirement_names(lines: list[str]) -> set[str]:
    return {_norm(re.split(r"[<>=!~\[; ]", line.strip(), maxsplit=1)[0])
            for line in lines if line.strip() and not line.lstrip().startswith("#")}


def _third_party_imports(*folders: str) -> set[str]:
    """Distributions that the modules in these folders import (stdlib and the project's own left out)."""
    local = {"relay", "wire", "engine", "app"}
    names = set()
    for folder in folders:
        for path in (ROOT / folder).glob("*.py"):
            for node in ast.walk(ast.parse(path.read_text(), str(path))):
                if isinstance(node, ast.Import):
                    names.update(a.name.split(".")[0] for a in node.names)
                elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                    names.add(node.module.split(".")[0])
    modules = {n for n in names if n not in sys.stdlib_module_names and n not in local and n != "__future__"}
    dists = importlib.metadata.packages_distributions()
    return {_norm(dists[m][0]) if m in dists else _norm(m) for m in modules}


def _relay_flags_ok(args: list[str]) -> None:
    """The relay's own parser accepts these arguments (flags still pending on another branch aside)."""
    known = {flag for action in build_parser()._actions for flag in action.option_strings}
    kept, skip = [], False
    for arg in args:
        if skip:
            skip = False
        elif arg in PENDING_FLAGS and arg not in known:
            skip = True  # and its value
        else:
            kept.append(arg)
    build_parser().parse_args(kept)  # exits (SystemExit) on an unknown flag or a bad value


def test_image_installs_only_the_relays_own_dependencies() -> None:
    required = _requirement_names(REQUIREMENTS.read_text().splitlines())
    assert not required & HEAVY
    assert _third_party_imports("relay", "wire") <= required  # the image lacks nothing the relay imports
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert required <= _requirement_names(project["dependencies"])  # and adds nothing the project lacks
    dockerfile = (ROOT / "Dockerfile").read_text().replace("\\\n", " ")
    installs = [line for line in dockerfile.splitlines() if "pip install" in line]
    assert installs, "the Dockerfile installs nothing?"
    for line in installs:
        args = shlex.split(line.split("pip install", 1)[1])
        assert [a for a in args if not a.startswith("--")] == ["-r", "/app/requirements-relay.txt"], line
    copied = [shlex.split(line)[1] for line in dockerfile.splitlines() if line.startswith("COPY ")]
    assert copied == ["deploy/requirements-relay.txt", "wire/", "relay/"]
    entry = re.search(r"^ENTRYPOINT (\[.*\])$", dockerfile, re.M)
    assert entry is not None
    cmd = yaml.safe_load(entry.group(1))
    assert cmd[:3] == ["python", "-m", "relay"]
    _relay_flags_ok(cmd[3:])


def test_compose_file() -> None:
    compose = yaml.safe_load((ROOT / "compose.yaml").read_text())
    services = compose["services"]
    relays = {name: s for name, s in services.items() if s.get("build") == "."}
    assert len(relays) >= 2, "N replicas built from the project's own Dockerfile"
    for name, service in relays.items():
        args = service["command"]
        assert "--max-peers-per-address" not in args  # behind a balancer every node has its address
        assert args[args.index("--redis") + 1].startswith("redis://redis:6379/")
        _relay_flags_ok(args)
        assert f"{name}-data:/data" in service["volumes"] and service["depends_on"]["redis"]
    redis_args = services["redis"]["command"]
    assert redis_args[0] == "redis-server"
    for key, value in (("--appendonly", "yes"), ("--appendfsync", "everysec"), ("--maxmemory-policy", "noeviction")):
        assert redis_args[redis_args.index(key) + 1] == value
    for mount in services["lb"]["volumes"]:
        source = mount.split(":")[0]
        if source.startswith("./") and not source.endswith("certs"):
            assert (ROOT / source).is_file(), source
    haproxy = (ROOT / "deploy" / "haproxy.cfg").read_text()
    assert set(re.findall(r"^\s*server (\S+) (\S+):8765", haproxy, re.M)) == {(n, n) for n in relays}


@pytest.fixture(scope="module")
def certs(tmp_path_factory: pytest.TempPathFactory):
    from tls_certs import make_pki

    return make_pki(tmp_path_factory.mktemp("pki"))


def _tool(name: str) -> str:
    path = shutil.which(name) or shutil.which(name, path="/usr/sbin:/sbin")
    if path is None:
        pytest.skip(f"{name} is not installed (Debian package '{name}'): its own check of the sample not run")
    return path


def test_haproxy_accepts_its_sample(certs, tmp_path: Path) -> None:
    haproxy = _tool("haproxy")
    bundle = tmp_path / "relay.pem"
    bundle.write_bytes(certs.cert.read_bytes() + certs.key.read_bytes())
    cfg = tmp_path / "haproxy.cfg"
    text = (ROOT / "deploy" / "haproxy.cfg").read_text()
    assert "/etc/haproxy/certs/relay.pem" in text
    cfg.write_text(text.replace("/etc/haproxy/certs/relay.pem", str(bundle)))
    done = subprocess.run([haproxy, "-c", "-f", str(cfg)], capture_output=True, text=True, timeout=30)
    assert done.returncode == 0, done.stderr + done.stdout
    assert "option httpchk GET /healthz" in text and "timeout tunnel" in text


def test_nginx_accepts_its_sample(certs, tmp_path: Path) -> None:
    nginx = _tool("nginx")
    text = (ROOT / "deploy" / "nginx.conf").read_text()
    text = (text.replace("/etc/letsencrypt/live/relay.example.org/fullchain.pem", str(certs.cert))
                .replace("/etc/letsencrypt/live/relay.example.org/privkey.pem", str(certs.key)))
    conf = tmp_path / "nginx.conf"
    conf.write_text(f"error_log stderr;\npid {tmp_path}/nginx.pid;\nevents {{}}\nhttp {{\n"
                    f"access_log off;\n{text}\n}}\n")
    done = subprocess.run([nginx, "-t", "-p", str(tmp_path), "-c", str(conf)], capture_output=True, text=True,
                          timeout=30)
    assert done.returncode == 0, done.stderr
    assert "proxy_set_header Upgrade $http_upgrade" in text


def test_systemd_unit(tmp_path: Path) -> None:
    unit = ROOT / "deploy" / "sapo-relay.service"
    parser = ConfigParser(strict=False, interpolation=None)
    parser.optionxform = str  # type: ignore[assignment,method-assign]
    parser.read_string(unit.read_text())
    exec_start = shlex.split(parser["Service"]["ExecStart"])
    assert exec_start[1:3] == ["-m", "relay"]
    _relay_flags_ok(exec_start[3:])
    analyze = shutil.which("systemd-analyze")
    if analyze is None:
        pytest.skip("systemd-analyze is not installed: the unit was parsed, not verified by systemd")
    done = subprocess.run([analyze, "verify", str(unit)], capture_output=True, text=True, timeout=60)
    # The venv of the unit's ExecStart does not exist on the test machine; anything else is a real complaint.
    complaints = [line for line in (done.stderr + done.stdout).splitlines()
                  if line.strip() and "/opt/sapo-relay/bin/python is not executable" not in line]
    assert not complaints, complaints
