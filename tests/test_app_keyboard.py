"""Everything without a mouse: QTest key events on the real window and wizard (offscreen).

The dashboard drives a small scripted engine (the real engine's controls are tested in
test_app_engine.py); what is tested here is that keys reach every action, that Tab visits every
control in reading order, and that every control a keyboard reaches has a name for a screen reader.
"""

from __future__ import annotations

import sys
import textwrap

import pytest
from PySide6.QtCore import Qt, QTimer
from PySide6.QtGui import QAccessible
from PySide6.QtTest import QTest
from PySide6.QtWidgets import QAbstractButton, QApplication, QTabWidget, QToolTip, QWidget, QWizard

from app import engine_process
from app.settings import AppSettings
from app.window import MainWindow
from wire import events as ev

# Answers commands as the real engine's loop does (engine/run/control.py): state events, finish -> paused.
SCRIPTED_ENGINE = textwrap.dedent(r'''
    import json, sys
    def say(obj):
        sys.stdout.write(json.dumps(obj) + "\n"); sys.stdout.flush()
    say({"type": "start", "node_id": "ab" * 16, "node_name": "brave-otter-1", "model": "smollm2-135m",
         "model_path": "/m.gguf", "round_start": 0, "round_end": None, "threads": 2, "settings": {}, "schema": 1})
    say({"type": "state", "state": "running", "round": 0})
    for line in sys.stdin:
        cmd = json.loads(line)["cmd"]
        if cmd == "pause":
            say({"type": "state", "state": "paused", "round": 0})
        elif cmd == "resume":
            say({"type": "state", "state": "running", "round": 0})
        elif cmd == "finish":
            say({"type": "state", "state": "finishing", "round": 0})
            say({"type": "state", "state": "paused", "round": 1})
        elif cmd == "stop":
            say({"type": "state", "state": "stopping", "round": 1})
            say({"type": "stop", "round": 1, "reason": "stop command"})
            sys.exit(0)
''')


def accessible_name(widget: QWidget) -> str:
    """What a screen reader says for the widget: its accessible name, its text, or its label's."""
    iface = QAccessible.queryAccessibleInterface(widget)
    return iface.text(QAccessible.Text.Name).strip() if iface is not None else ""


def tab_chain(start: QWidget, limit: int = 80) -> list[QWidget]:
    """The widgets Tab visits from ``start`` until it comes back round (or ``limit`` presses)."""
    start.setFocus(Qt.FocusReason.TabFocusReason)
    chain = [QApplication.focusWidget()]
    for _ in range(limit):
        QTest.keyClick(QApplication.focusWidget(), Qt.Key.Key_Tab)
        w = QApplication.focusWidget()
        if w is chain[0]:
            return chain
        assert w not in chain, f"Tab is stuck in a loop at {w!r}: {[type(x).__name__ for x in chain]}"
        chain.append(w)
    raise AssertionError(f"Tab never came back round: {[type(x).__name__ for x in chain]}")


def key(widget: QWidget, k: Qt.Key, mod: Qt.KeyboardModifier = Qt.KeyboardModifier.NoModifier) -> None:
    QTest.keyClick(QApplication.focusWidget() or widget, k, mod)


def ctrl(widget: QWidget, k: Qt.Key) -> None:
    key(widget, k, Qt.KeyboardModifier.ControlModifier)


@pytest.fixture
def window(qtbot, tmp_path, monkeypatch):
    script = tmp_path / "scripted_engine.py"
    script.write_text(SCRIPTED_ENGINE)
    monkeypatch.setattr(engine_process, "engine_program", lambda: (sys.executable, [str(script)]))
    monkeypatch.setenv("SAPO_CONFIG_DIR", str(tmp_path / "config"))
    w = MainWindow(AppSettings(data_dir=str(tmp_path / "data")), cores=2)
    qtbot.addWidget(w)
    w.show()
    qtbot.wait_exposed(w)
    w.activateWindow()
    qtbot.wait_until(lambda: QApplication.activeWindow() is w)
    yield w
    w.engine.shutdown(wait_ms=5000)


def test_shortcuts_start_pause_resume_finish_stop(qtbot, window):
    engine = window.engine

    def after(keys, state):  # press, then wait for the engine to report the state
        with qtbot.wait_signal(engine.state_changed, timeout=20_000, check_params_cb=lambda s: s == state):
            keys()

    after(lambda: ctrl(window, Qt.Key.Key_R), "running")  # Ctrl+R: start
    after(lambda: ctrl(window, Qt.Key.Key_P), "paused")  # Ctrl+P: pause ...
    assert window.dashboard.main_button.text() == "Resume"
    after(lambda: ctrl(window, Qt.Key.Key_P), "running")  # ... and resume
    after(lambda: ctrl(window, Qt.Key.Key_F), "paused")  # Ctrl+F: finish this round, then pause
    after(lambda: ctrl(window, Qt.Key.Key_P), "running")
    # The big button by keyboard: focus it and press Space.
    window.dashboard.main_button.setFocus(Qt.FocusReason.TabFocusReason)
    after(lambda: key(window, Qt.Key.Key_Space), "paused")
    with qtbot.wait_signal(engine.finished, timeout=20_000) as blocker:
        ctrl(window, Qt.Key.Key_T)  # Ctrl+T: stop
    assert blocker.args[0].ok and engine.state == "stopped"
    # Every menu entry has a mnemonic or a shortcut, so the menus work without a mouse too.
    for menu_action in window.menuBar().actions():
        assert "&" in menu_action.text(), menu_action.text()
        for act in menu_action.menu().actions():
            if not act.isSeparator():
                assert "&" in act.text() or not act.shortcut().isEmpty(), act.text()


def test_tab_reaches_every_control_of_the_dashboard_with_a_name(qtbot, window):
    d = window.dashboard
    d.show_problem("The engine stopped: a test problem.", ("last line",))
    window.model.state = "running"
    window.model.feed.extend(ev.RolloutSample("basic_arithmetic", f"{i} + 1 = ?", str(i + 1), 1.0, True, "own")
                             for i in range(3))
    window.refresh()
    d.set_controls("running")
    chain = tab_chain(d.main_button)
    # Reading order: the big button, its two neighbours, the problem's restart, the figures, then the tabs.
    wanted = [d.main_button, d.finish_button, d.stop_button, d.restart_button, d.card_round, d.card_you]
    positions = [chain.index(w) for w in wanted]
    assert positions == sorted(positions), [type(w).__name__ for w in chain]
    assert d.tabs.tabBar() in chain and d.feed in chain  # tables are one stop each: Tab leaves them
    # Every control a keyboard reaches says what it is.
    unnamed = [f"{type(w).__name__}({w.objectName()})" for w in chain if not accessible_name(w)]
    assert not unnamed, unnamed
    # A figure reached by Tab shows its explanation, as hovering does.
    d.card_reward.setFocus(Qt.FocusReason.TabFocusReason)
    qtbot.wait_until(lambda: QToolTip.isVisible() and QToolTip.text() == d.card_reward.toolTip(), timeout=5000)
    # The tabs by keyboard: arrows on the tab bar, then Tab into the page shown.
    d.tabs.tabBar().setFocus(Qt.FocusReason.TabFocusReason)
    key(window, Qt.Key.Key_Right)
    assert d.tabs.currentIndex() == 1
    key(window, Qt.Key.Key_Right)
    assert d.tabs.currentIndex() == 2
    while d.tabs.currentWidget() is not d.log:  # on to the last tab, the log
        before = d.tabs.currentIndex()
        key(window, Qt.Key.Key_Right)
        assert d.tabs.currentIndex() == before + 1
    key(window, Qt.Key.Key_Tab)
    assert QApplication.focusWidget() is d.log
    key(window, Qt.Key.Key_Tab)  # the log is read-only: Tab moves on instead of typing a tab
    assert QApplication.focusWidget() is not d.log


@pytest.mark.slow
def test_the_wizard_by_keyboard(qtbot, tmp_path, monkeypatch, model_cache):
    monkeypatch.setenv("SAPO_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("SAPO_CACHE_DIR", str(model_cache))
    from app.wizard import SetupWizard

    wizard = SetupWizard(AppSettings(data_dir=str(tmp_path / "data")), cores=2, measure=False)
    qtbot.addWidget(wizard)
    wizard.show()
    qtbot.wait_exposed(wizard)
    wizard.activateWindow()
    qtbot.wait_until(lambda: QApplication.activeWindow() is wizard)
    qtbot.wait_until(lambda: wizard.report is not None, timeout=180_000)  # a real `sapo-engine models --json`

    def alt(k: Qt.Key) -> None:
        key(wizard, k, Qt.KeyboardModifier.AltModifier)

    def next_page(page: QWidget) -> None:  # Alt+N: Next (a mnemonic clicks after a short animation)
        alt(Qt.Key.Key_N)
        qtbot.wait_until(lambda: wizard.currentPage() is page, timeout=5000)

    def named_chain(page: QWidget) -> list[QWidget]:
        chain = tab_chain(wizard.button(QWizard.WizardButton.CancelButton))
        unnamed = [type(w).__name__ for w in chain if not accessible_name(w)]
        assert not unnamed, (page.title(), unnamed)
        return chain

    named_chain(wizard.hardware_page)
    page = wizard.model_page
    next_page(page)
    chain = named_chain(page)
    assert page.table in chain
    page.table.setFocus(Qt.FocusReason.TabFocusReason)
    rows = {page.table.item(i, 0).data(Qt.ItemDataRole.UserRole): i for i in range(page.table.rowCount())}
    for _ in range(len(rows)):  # arrows move the choice (rows that do not fit are skipped)
        before = page.selected()
        if before == "smollm2-135m":
            break
        key(wizard, Qt.Key.Key_Up if rows[before] > rows["smollm2-135m"] else Qt.Key.Key_Down)
        assert page.selected() != before, "arrow keys do not move the model choice"
    assert page.selected() == "smollm2-135m"
    next_page(wizard.download_page)
    assert wizard.download_page.isComplete()
    next_page(wizard.swarm_page)

    form = wizard.swarm_page.form
    chain = named_chain(wizard.swarm_page)
    radios = [w for w in chain if w in form.buttons.values()]
    assert len(radios) == 1  # the choices are one Tab stop; arrows choose among them
    radios[0].setFocus(Qt.FocusReason.TabFocusReason)
    order = list(form.buttons)
    assert radios[0] is form.buttons["offline"]  # Tab enters the choices at the checked one (the default)
    for _ in range(order.index("offline") - order.index("local")):
        key(wizard, Qt.Key.Key_Up)  # each arrow moves the choice one up
    assert form.buttons["local"].isChecked(), f"arrows did not choose the local swarm: {QApplication.focusWidget()}"
    assert form.port in tab_chain(form.buttons["local"]) and form.relay not in tab_chain(form.buttons["local"])
    form.swarm.setFocus(Qt.FocusReason.TabFocusReason)
    form.swarm.selectAll()
    QTest.keyClicks(form.swarm, "kitchen")
    next_page(wizard.name_page)
    qtbot.wait_until(wizard.name_page.isComplete, timeout=120_000)  # a real `sapo-engine identity --json`
    named_chain(wizard.name_page)
    next_page(wizard.power_page)

    resources, rules = wizard.power_page.resources, wizard.power_page.rules
    chain = named_chain(wizard.power_page)
    assert resources.threads in chain and resources.cpu in chain
    assert rules.idle in chain and rules.battery in chain and rules.schedule in chain
    assert rules.idle_minutes not in chain and rules.start not in chain  # disabled until their box is ticked
    assert resources.threads.value() == 1  # half of 2 cores
    resources.threads.setFocus(Qt.FocusReason.TabFocusReason)
    key(wizard, Qt.Key.Key_Right)  # the cores slider: one more core
    assert resources.threads.value() == 2 and resources.threads_label.text() == "2 of 2 cores"
    resources.cpu.setFocus(Qt.FocusReason.TabFocusReason)
    for _ in range(10):
        key(wizard, Qt.Key.Key_Left)  # 5 % a press
    assert resources.percent == 50 and resources.cpu_label.text() == "at most 50 % of their time"
    rules.idle.setFocus(Qt.FocusReason.TabFocusReason)
    key(wizard, Qt.Key.Key_Space)
    assert rules.idle.isChecked() and rules.idle_minutes in tab_chain(rules.idle)
    finish = wizard.button(QWizard.WizardButton.FinishButton)
    assert isinstance(finish, QAbstractButton) and finish.isVisible()
    with qtbot.wait_signal(wizard.accepted, timeout=10_000):
        alt(Qt.Key.Key_F)  # Alt+F: Finish
    s = wizard.result_settings()
    assert s.swarm_kind == "local" and s.node["swarm"] == "kitchen" and s.only_when_idle
    assert s.node["model"] == "smollm2-135m" and s.node["threads"] == 2 and s.node["cpu_limit"] == 50



def test_preferences_by_the_menu_keys(qtbot, window):
    seen: dict = {}

    def inside() -> None:  # runs in the dialog's own event loop
        dialog = QApplication.activeModalWidget()
        seen["dialog"] = type(dialog).__name__
        if dialog is None:
            return
        tabs = dialog.findChild(QTabWidget)
        seen["tabs"] = [tabs.tabText(i) for i in range(tabs.count())]
        for i in range(tabs.count()):  # each tab of the dialog: every control named, Tab goes round
            tabs.setCurrentIndex(i)
            chain = tab_chain(dialog.buttons.button(dialog.buttons.StandardButton.Cancel))
            seen.setdefault("unnamed", []).extend(type(w).__name__ for w in chain if not accessible_name(w))
        seen["chain"] = len(chain)
        QTest.keyClick(QApplication.focusWidget(), Qt.Key.Key_Escape)  # Escape closes it unchanged

    QTimer.singleShot(1500, inside)
    key(window, Qt.Key.Key_M, Qt.KeyboardModifier.AltModifier)  # Alt+M: the Model menu
    qtbot.wait_until(lambda: QApplication.activePopupWidget() is not None, timeout=5000)
    QTest.keyClick(QApplication.activePopupWidget(), Qt.Key.Key_P)  # P: Preferences… (runs until inside() closes it)
    qtbot.wait_until(lambda: "chain" in seen, timeout=10_000)
    assert seen["dialog"] == "PreferencesDialog" and seen["chain"] > 3 and not seen["unnamed"], seen
    assert seen["tabs"] == ["Model", "Resources", "Schedule", "Swarm"]
