"""Imports run one way, read from the source (so TYPE_CHECKING and function-level imports count too).

Inside relay/ no module imports, directly or through others, a module that imports it back; relay/
stands on wire/ only (never engine/, app/ or the repo's tools/); wire/ stands on nothing of ours.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
OURS = ("app", "engine", "relay", "tools", "wire")


def _module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(path: Path) -> set[str]:
    """Every module of ours that ``path`` imports anywhere in its body (``from a import b`` may name a.b)."""
    package = _module_name(path) if path.name == "__init__.py" else _module_name(path).rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:  # relative: from . import x / from .y import z
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return {name for name in found if name.split(".")[0] in OURS}


def _graph(package: str) -> dict[str, set[str]]:
    files = sorted((ROOT / package).rglob("*.py"))
    modules = {_module_name(f): f for f in files}
    return {name: {m for m in _imports(f) if m in modules and m != name} for name, f in modules.items()}


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle, as the modules along it, or None."""
    state: dict[str, int] = {}  # 1: on the current path, 2: done
    path: list[str] = []

    def visit(name: str) -> list[str] | None:
        state[name] = 1
        path.append(name)
        for nxt in sorted(graph[name]):
            if state.get(nxt) == 1:
                return path[path.index(nxt):] + [nxt]
            if nxt not in state and (found := visit(nxt)) is not None:
                return found
        path.pop()
        state[name] = 2
        return None

    for name in sorted(graph):
        if name not in state and (found := visit(name)) is not None:
            return found
    return None


def test_the_cycle_finder_finds_a_cycle():
    assert _cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}}) == ["a", "b", "c", "a"]
    assert _cycle({"a": {"b"}, "b": set()}) is None


def test_relay_has_no_import_cycle():
    assert _cycle(_graph("relay")) is None


def test_relay_stands_on_wire_only():
    for path in sorted((ROOT / "relay").rglob("*.py")):
        others = {m.split(".")[0] for m in _imports(path)} - {"relay", "wire"}
        assert not others, f"{path.relative_to(ROOT)} imports {sorted(others)}"


def test_wire_stands_on_nothing_of_ours():
    for path in sorted((ROOT / "wire").rglob("*.py")):
        others = {m.split(".")[0] for m in _imports(path)} - {"wire"}
        assert not others, f"{path.relative_to(ROOT)} imports {sorted(others)}"
