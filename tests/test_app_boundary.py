"""The import boundary, checked in fresh interpreters: the app never loads torch or llama.cpp, the engine never Qt."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

APP_MODULES = ["app", "app.main", "app.window", "app.wizard", "app.preferences", "app.dashboard", "app.charts",
               "app.engine_process", "app.engine_tasks", "app.local_relay", "app.power", "app.replay", "app.tray",
               "app.settings", "app.forms", "app.single_instance", "app.autostart", "wire.events", "wire.models"]
ENGINE_MODULES = ["engine", "engine.commands.cli", "engine.run.runner", "engine.run.node", "engine.run.control", "engine.commands.models",
                  "engine.commands.speed", "engine.run.progress", "engine.models.download", "engine.models.hardware"]


def _loaded_after_import(modules: list[str]) -> set[str]:
    code = ("import importlib, sys\n"
            f"for m in {modules!r}: importlib.import_module(m)\n"
            "print('\\n'.join(sorted(sys.modules)))\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT), "QT_QPA_PLATFORM": "offscreen"}
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stderr
    return set(done.stdout.split())


def test_importing_the_app_never_imports_torch_or_llama_cpp():
    loaded = _loaded_after_import(APP_MODULES)
    assert "PySide6.QtWidgets" in loaded  # the check itself works: the app did load
    assert not {m for m in loaded if m.split(".")[0] in ("torch", "llama_cpp", "transformers", "peft")}
    # of the engine, only its settings (and the error they raise): the rest is reached through the child process
    assert {m for m in loaded if m.split(".")[0] == "engine"} <= {"engine", "engine.config", "engine.errors"}


def test_importing_the_engine_never_imports_qt():
    loaded = _loaded_after_import(ENGINE_MODULES)
    assert "torch" in loaded  # the check itself works: engine.run.node did load torch
    assert not {m for m in loaded if m.split(".")[0] in ("PySide6", "shiboken6", "pyqtgraph", "app")}
