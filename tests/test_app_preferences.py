"""Preferences (issue 26 item 9): models by name and marked as the setup marks them, a warning when one the
setup called too slow is chosen, the setup assistant one click away (no terminal command), four tabs; and the
cores, CPU-time and rule controls, the same in the Run menu and the tray, acting on the engine."""

from __future__ import annotations

import sys
from pathlib import Path

import msgspec
from PySide6.QtCore import QTimer
from PySide6.QtWidgets import QApplication, QLabel, QTabWidget

from app import engine_process
from app.settings import AppSettings
from wire import events as ev
from wire.models import GpuInfo, HardwareInfo, ModelInfo, ModelsReport  # noqa: F401 - the report's parts

SCRIPT = Path(__file__).resolve().parent / "scripted_engine.py"


def _model(name: str, display: str, fit: str = "fits", why: str = "", **kw) -> ModelInfo:
    return ModelInfo(name=name, display_name=display, n_params=10**8, file_size_bytes=100 * 1024**2, quantization="Q8_0",
                     bundled=name == "smollm2-135m", downloaded=True, fit=fit, needed_bytes=1, budget_bytes=2, why=why,
                     **kw)


def _report() -> ModelsReport:
    hw = HardwareInfo(summary="2 cores", os="Linux", cpu_name="cpu", cpu_physical=2, cpu_logical=2, ram_total=8,
                      ram_available=4, device="cpu")
    return ModelsReport(hardware=hw, recommended="smollm2-135m", reason="", models=[
        _model("smollm2-135m", "SmolLM2 135M Instruct (bundled)"),
        _model("qwen2.5-1.5b", "Qwen2.5 1.5B Instruct", fit="no", why="too slow for 2 cores", round_s=900.0),
        _model("qwen2.5-7b", "Qwen2.5 7B Instruct", fit="no", why="needs 9.1 GB of 7.6 GB RAM"),
    ])


def _dialog(qtbot, settings: AppSettings):
    from app.preferences import PreferencesDialog

    dialog = PreferencesDialog(settings, cores=4)
    qtbot.addWidget(dialog)
    dialog.models.process.kill()  # the real catalog query is tested in test_app_wizard.py; this one gets a report
    dialog.model_tab.show_report(_report())
    return dialog


def test_models_by_name_and_marked_and_a_too_slow_one_warns(qtbot):
    dialog = _dialog(qtbot, AppSettings(node={"model": "smollm2-135m"}))
    texts = [dialog.model.itemText(i) for i in range(dialog.model.count())]
    assert texts == ["SmolLM2 135M Instruct (bundled) — 100 MB  (recommended)",
                     "Qwen2.5 1.5B Instruct — 100 MB  (too slow here)",
                     "Qwen2.5 7B Instruct — 100 MB  (too big)"]
    assert dialog.model.currentData() == "smollm2-135m" and dialog.model_tab.warning.isHidden()
    dialog.model.setCurrentIndex(1)
    warning = dialog.model_tab.warning
    assert not warning.isHidden()
    assert warning.text().startswith("The setup found Qwen2.5 1.5B Instruct too slow for this computer "
                                     "(too slow for 2 cores). A round would take about 15 min here.")
    assert dialog.result_settings().node["model"] == "qwen2.5-1.5b"  # a warning, not a refusal
    dialog.model.setCurrentIndex(2)
    assert "does not fit this computer (needs 9.1 GB of 7.6 GB RAM)" in warning.text()
    dialog.model.setCurrentIndex(0)
    assert warning.isHidden()


def test_a_model_file_or_unknown_name_stays_choosable(qtbot):
    dialog = _dialog(qtbot, AppSettings(node={"model": "/models/mine.gguf"}))
    assert dialog.model.currentData() == "/models/mine.gguf" and dialog.model.currentText() == "/models/mine.gguf"
    assert dialog.result_settings().node["model"] == "/models/mine.gguf"


def test_four_tabs_no_terminal_command_and_the_button_opens_the_setup(qtbot, window):
    from app.preferences import OPEN_SETUP

    dialog = _dialog(qtbot, AppSettings())
    tabs = dialog.findChild(QTabWidget)
    assert [tabs.tabText(i) for i in range(tabs.count())] == ["Model", "Resources", "Schedule", "Swarm"]
    words = " ".join(label.text() for label in dialog.findChildren(QLabel))
    assert "sapo --setup" not in words and "terminal" not in words
    with qtbot.wait_signal(dialog.finished, timeout=5000) as done:
        dialog.model_tab.setup_button.click()
    assert done.args == [OPEN_SETUP]

    # From the window: the button closes Preferences and opens the real setup assistant.
    seen: list[str] = []

    def click_setup() -> None:
        prefs = QApplication.activeModalWidget()
        seen.append(type(prefs).__name__)
        QTimer.singleShot(500, leave_wizard)
        prefs.model_tab.setup_button.click()

    def leave_wizard() -> None:
        wizard = QApplication.activeModalWidget()
        seen.append(type(wizard).__name__)
        wizard.reject()

    QTimer.singleShot(500, click_setup)
    window.preferences()
    assert seen == ["PreferencesDialog", "SetupWizard"]


def test_the_run_menu_and_the_tray_set_cores_and_cpu_time_on_the_running_engine(qtbot, tmp_path, monkeypatch):
    from app.window import MainWindow

    monkeypatch.setenv("SAPO_CONFIG_DIR", str(tmp_path / "config"))
    window = MainWindow(AppSettings(data_dir=str(tmp_path / "data")), cores=4)
    qtbot.addWidget(window)
    script = tmp_path / "run.jsonl"
    start = ev.Start(node_id="ab" * 16, node_name="calm-heron-07", model="smollm2-135m", model_path="/m.gguf",
                     round_start=0, round_end=None, threads=1)
    script.write_bytes(ev.encode(start) + ev.encode(ev.StateChanged(state="running")))
    monkeypatch.setattr(engine_process, "engine_program", lambda: (sys.executable, [str(SCRIPT), str(script)]))
    sent: list[dict] = []
    send = window.engine.send
    monkeypatch.setattr(window.engine, "send", lambda c: sent.append(msgspec.to_builtins(c)) or send(c))
    window.start()
    qtbot.wait_until(lambda: window.engine.state == "running", timeout=20_000)
    tray, menu = window.tray.controls, window.controls
    assert [a.text() for a in tray.threads.values()] == ["1 of 4 cores", "2 of 4 cores", "3 of 4 cores",
                                                         "4 of 4 cores"]
    tray.threads[3].trigger()
    assert window.settings.node["threads"] == 3 and menu.threads[3].isChecked()
    menu.cpu[50].trigger()
    assert window.settings.cpu_limit == 50 and tray.cpu[50].isChecked()
    tray.cpu[100].trigger()
    assert "cpu_limit" not in window.settings.node
    assert sent == [{"cmd": "set_threads", "threads": 3}, {"cmd": "set_cpu_limit", "percent": 50},
                    {"cmd": "set_cpu_limit", "percent": 100}]
    # a value Preferences chose that the tray does not list is shown, in order
    window.settings.node["cpu_limit"] = 35
    window._sync_controls()
    assert tray.cpu[35].isChecked() and [a.text() for a in tray.cpu_menu.actions()][:2] == [
        "at most 25 % of the cores' time", "at most 35 % of the cores' time"]
    with qtbot.wait_signal(window.engine.finished, timeout=20_000):
        window.stop()


def test_resources_and_schedule_round_trip(qtbot):
    dialog = _dialog(qtbot, AppSettings(schedule_on=True, schedule_start="21:30", schedule_end="06:00",
                                        node={"threads": 3, "cpu_limit": 40}))
    assert dialog.resources.threads.value() == 3 and dialog.resources.percent == 40
    assert dialog.rules.schedule.isChecked() and dialog.rules.start.time().toString("HH:mm") == "21:30"
    out = dialog.result_settings()
    assert (out.node["threads"], out.node["cpu_limit"], out.schedule_start, out.schedule_end) == (3, 40, "21:30",
                                                                                                  "06:00")
    dialog.resources.cpu.setValue(20)  # 100 %: the engine's default, left out of node.toml
    dialog.rules.schedule.setChecked(False)
    out = dialog.result_settings()
    assert "cpu_limit" not in out.node and out.schedule() is None
    out.node_config()  # what the engine would accept


def test_pausing_for_other_programs_is_off_by_default_and_round_trips(qtbot):
    dialog = _dialog(qtbot, AppSettings())
    assert not dialog.rules.busy.isChecked() and not dialog.rules.busy_percent.isEnabled()
    dialog.rules.busy.setChecked(True)
    assert dialog.rules.busy_percent.isEnabled()
    dialog.rules.busy_percent.setValue(40)
    out = dialog.result_settings()
    assert (out.busy_pause, out.busy_percent) == (True, 40)
    again = _dialog(qtbot, out)
    assert again.rules.busy.isChecked() and again.rules.busy_percent.value() == 40


def test_other_programs_first_by_default_and_the_choice_reaches_the_engine(qtbot):
    dialog = _dialog(qtbot, AppSettings(node={"threads": 2}))
    assert dialog.resources.yield_cpu.isChecked()  # low priority: the engine's default, left out of node.toml
    assert "priority" not in dialog.result_settings().node
    dialog.resources.yield_cpu.setChecked(False)
    out = dialog.result_settings()
    assert out.node["priority"] == "normal" and out.node_config().priority == "normal"
    again = _dialog(qtbot, out)
    assert not again.resources.yield_cpu.isChecked()
    again.resources.yield_cpu.setChecked(True)
    assert "priority" not in again.result_settings().node and again.result_settings().node_config().priority == "low"
