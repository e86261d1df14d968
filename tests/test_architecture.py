"""The import rules of docs/ARCHITECTURE.md, checked on the source (every import: function-level and
``if TYPE_CHECKING`` ones too), with import-linter's graph (grimp) and its contracts in pyproject.toml.

tests/test_app_boundary.py checks the same boundary at run time, in fresh interpreters.
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import grimp
import pytest

ROOT = Path(__file__).resolve().parent.parent
PACKAGES = ("wire", "engine", "relay", "app", "tools")


@pytest.fixture(scope="module")
def graph() -> grimp.ImportGraph:
    sys.path.insert(0, str(ROOT))
    try:
        return grimp.build_graph(*PACKAGES, include_external_packages=True, cache_dir=None)
    finally:
        sys.path.remove(str(ROOT))


def _imports(graph: grimp.ImportGraph, package: str) -> set[tuple[str, str]]:
    return {(m, t) for m in graph.find_descendants(package) | {package}
            for t in graph.find_modules_directly_imported_by(m)}


def _our_edges(graph: grimp.ImportGraph) -> dict[str, list[str]]:
    ours = {m for p in PACKAGES for m in graph.find_descendants(p) | {p}}
    return {m: sorted(t for t in graph.find_modules_directly_imported_by(m) if t in ours) for m in ours}


def _cycles(edges: dict[str, list[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found = []
    for root in sorted(edges):
        if root in index:
            continue
        work = [(root, 0)]
        while work:
            v, i = work.pop()
            if i == 0:
                index[v] = low[v] = len(index)
                stack.append(v)
                on_stack.add(v)
            if i < len(edges[v]):
                work.append((v, i + 1))
                w = edges[v][i]
                if w not in index:
                    work.append((w, 0))
                elif w in on_stack:
                    low[v] = min(low[v], index[w])
                continue
            for w in edges[v]:
                if w in on_stack:
                    low[v] = min(low[v], low[w])
            if low[v] == index[v]:
                component = []
                while True:
                    w = stack.pop()
                    on_stack.discard(w)
                    component.append(w)
                    if w == v:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_circle_anywhere(graph):
    assert len(_our_edges(graph)) > 100  # the graph holds the project
    assert _cycles(_our_edges(graph)) == []


def test_the_cycle_finder_finds_circles_and_only_circles():
    edges = {"a": ["b"], "b": ["c"], "c": ["a", "d"], "d": ["e"], "e": ["d"], "f": ["a"]}
    assert sorted(_cycles(edges)) == [["a", "b", "c"], ["d", "e"]]
    assert _cycles({"a": ["b"], "b": ["c"], "c": [], "d": ["a", "c"]}) == []


def test_wire_imports_neither_engine_nor_relay_nor_heavy_libraries(graph):
    bad = {(m, t) for m, t in _imports(graph, "wire")
           if t.split(".")[0] in ("engine", "relay", "app", "torch", "llama_cpp", "PySide6")}
    assert bad == set()


def test_engine_never_imports_relay_or_qt(graph):
    bad = {(m, t) for m, t in _imports(graph, "engine") if t.split(".")[0] in ("relay", "app", "PySide6", "pyqtgraph")}
    assert bad == set()


def test_relay_never_imports_engine_torch_or_qt(graph):
    bad = {(m, t) for m, t in _imports(graph, "relay")
           if t.split(".")[0] in ("engine", "app", "torch", "llama_cpp", "PySide6")}
    assert bad == set()


def test_app_never_imports_torch_or_llama_cpp_and_of_the_engine_only_its_settings(graph):
    bad = {(m, t) for m, t in _imports(graph, "app")
           if t.split(".")[0] in ("torch", "llama_cpp", "transformers", "peft", "relay")
           or (t.split(".")[0] == "engine" and t not in ("engine.config", "engine.errors"))}
    assert bad == set()


def test_engine_stages_import_only_downward():
    """pyproject.toml's [tool.importlinter] contracts: the engine's layers, and the rules above once more."""
    lint = shutil.which("lint-imports", path=str(Path(sys.executable).parent))
    assert lint is not None, "import-linter is a test dependency (pip install -e '.[test]')"
    done = subprocess.run([lint, "--no-cache"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-2000:]
    assert "0 broken" in done.stdout
