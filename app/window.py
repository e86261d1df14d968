"""The main window: the controller between the engine process, the run model and the dashboard.

Engine events update the model; a short timer coalesces redraws, so a burst of progress
events costs one repaint. Buttons, menus, the tray and the power rules all act on the
engine through the same few commands.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path

from PySide6.QtCore import QTimer, Signal
from PySide6.QtGui import QAction, QCloseEvent, QKeySequence
from PySide6.QtWidgets import QApplication, QFileDialog, QMainWindow, QWidget

from app import autostart, power
from app.controls_menu import ControlsMenu
from app.dashboard import Dashboard
from app.engine_process import EngineProcess, run_args
from app.guiprocess import GuiProcess
from app.icon import app_icon
from app.local_relay import LocalRelay
from app.outcome import Outcome
from app.run_model import RunModel
from app.settings import AppSettings, default_data_dir, node_path
from app.tray import Tray
from wire import events as ev

log = logging.getLogger("app.window")

REDRAW_MS = 200
COUNTDOWN_MS = 1000  # the swarm card's "next try in N s" and a round's time left count down between events
POWER_CHECK_MS = 30_000


def bring_to_front(widget: QWidget) -> None:
    """Shown, restored from minimized, raised and focused: the tray's Show, a second launch, a waiting dialog."""
    widget.showNormal()
    widget.raise_()
    widget.activateWindow()


class MainWindow(QMainWindow):
    # Closed for good (Quit, or closing where there is no tray): the app ends. Closing the window where there is a
    # tray only hides it, and training goes on, as Folding@home's client does.
    quit_requested = Signal()

    def __init__(self, settings: AppSettings | None = None, config_dir: Path | None = None,
                 extra_engine_args: list[str] | None = None, cores: int = 1, parent: QWidget | None = None,
                 sources: power.Sources | None = None) -> None:
        super().__init__(parent)
        self.sources = sources or power.Sources()  # idle time, battery, clock: a test's fakes or the system's
        self.settings = settings or AppSettings()
        self.config_dir = config_dir
        self.extra_engine_args = list(extra_engine_args or [])
        self.cores = cores
        self.replay = False
        self.model = RunModel()
        self.dashboard = Dashboard()
        self.setCentralWidget(self.dashboard)
        self.setWindowTitle("SAPO Swarm")
        self.setWindowIcon(app_icon())
        self.resize(1200, 860)

        self.engine = EngineProcess(self)
        self.engine.event.connect(self._on_event)
        self.engine.log_line.connect(self.dashboard.add_log)
        self.engine.state_changed.connect(self._on_state)
        self.engine.finished.connect(self._on_finished)
        self.relay: LocalRelay | None = None
        self._quitting = False
        self._told_tray = False  # the "still training in the tray" message is said once a session
        self.policy = power.PowerPolicy()
        self._hold: str | None = None
        self._last_state = "stopped"

        self._redraw = QTimer(self)
        self._redraw.setSingleShot(True)
        self._redraw.setInterval(REDRAW_MS)
        self._redraw.timeout.connect(self.refresh)
        self._countdown = QTimer(self)
        self._countdown.setSingleShot(True)
        self._countdown.setInterval(COUNTDOWN_MS)
        self._countdown.timeout.connect(self.refresh)
        self._power_timer = QTimer(self)
        self._power_timer.setInterval(POWER_CHECK_MS)
        self._power_timer.timeout.connect(self.check_power)

        d = self.dashboard
        d.start_clicked.connect(self.start)
        d.pause_clicked.connect(self.pause)
        d.resume_clicked.connect(self.resume)
        d.finish_clicked.connect(self.engine.finish)
        d.stop_clicked.connect(self.stop)
        d.restart_clicked.connect(self.start)
        d.try_model.asked.connect(self.ask)
        self.tray = Tray(cores, self)
        self.tray.toggle_pause.connect(self.toggle_pause)
        self.tray.show_window.connect(self._show)
        self.tray.quit.connect(self.quit)
        self._menus()
        for controls in (self.controls, self.tray.controls):
            controls.threads_chosen.connect(self.set_threads)
            controls.cpu_chosen.connect(self.set_cpu_limit)
            controls.rule_toggled.connect(self.set_rule)
        self._sync_controls()
        self._on_state("stopped")

    # --- menus ---
    def _menus(self) -> None:
        bar = self.menuBar()
        run = bar.addMenu("&Run")
        self.act_start = self._action(run, "&Start", "Ctrl+R", self.start)
        self.act_pause = self._action(run, "&Pause / resume", "Ctrl+P", self.toggle_pause)
        self.act_finish = self._action(run, "&Finish this round, then pause", "Ctrl+F", self.engine.finish)
        self.act_stop = self._action(run, "S&top", "Ctrl+T", self.stop)
        run.addSeparator()
        self.controls = ControlsMenu(run, self.cores, self)  # cores, CPU time, rules: the tray has the same
        run.addSeparator()
        self._action(run, "&Quit", QKeySequence.StandardKey.Quit, self.quit)
        model = bar.addMenu("&Model")
        self._action(model, "&Export my model…", "Ctrl+E", self.export_model)
        self._action(model, "&Preferences…", QKeySequence.StandardKey.Preferences, self.preferences)

    def _action(self, menu, text, shortcut, slot) -> QAction:  # type: ignore[no-untyped-def]
        act = QAction(text, self)
        act.setShortcut(QKeySequence(shortcut))
        act.triggered.connect(slot)
        menu.addAction(act)
        return act

    # --- replay ---
    def show_replay(self, events: list[ev.Event], title: str, skipped: int = 0) -> None:
        self.replay = True
        for event in events:
            self.model.apply(event)
        self.model.state = "replay"
        if skipped:
            self.model.message = f"{skipped} lines of the file were not events and were skipped"
        elif not self.model.message and self.model.node_name:  # the line under the headline says whose run it was
            ended = f"; it ended: {self.model.stop_reason}" if self.model.stop_reason else ""
            self.model.message = f"Recorded by {self.model.node_name}, training {self.model.model}{ended}"
        self.setWindowTitle(f"SAPO Swarm — {title}")
        self.dashboard.set_controls("stopped", replay=True)
        for act in (self.act_start, self.act_pause, self.act_finish, self.act_stop):
            act.setEnabled(False)
        self.refresh()

    # --- the engine ---
    def start(self) -> None:
        if self.replay or self.engine.running:
            return
        self.dashboard.hide_problem()
        if self.settings.swarm_kind == "local":
            self._start_relay()
        else:
            self._start_engine()

    def _start_relay(self) -> None:
        if self.relay is None:
            data = Path(self.settings.data_dir or default_data_dir()) / "local-relay"
            self.relay = LocalRelay(self.settings.local_relay_port, data, self)
            self.relay.ready.connect(lambda url: self._start_engine())
            self.relay.failed.connect(self._on_relay_failed)
        self.model = RunModel()  # the last run's figures go; the engine's events fill a new model
        self.model.message = "Starting the local swarm…"
        self._on_state("starting")  # the engine is not running yet, but the run is starting: Start is off
        self.refresh()
        self.relay.start()

    def _start_engine(self) -> None:
        if self.engine.running:
            return
        config = node_path(self.config_dir)
        data_dir = Path(self.settings.data_dir) if self.settings.data_dir else None
        self.model = RunModel()
        self.dashboard.log.clear()
        self.engine.start(run_args(config if config.exists() else None, data_dir, extra=self.extra_engine_args))
        self._power_timer.start()

    def _on_relay_failed(self, outcome: Outcome) -> None:
        self.dashboard.show_problem(outcome.sentence(), outcome.stderr_tail)
        if self.engine.running:
            self.model.message = "The local swarm stopped; the engine trains alone until it is back."
        else:  # it never came up: the run did not start
            self.model.message = ""
            self._on_state("stopped")

    def pause(self) -> None:
        self.policy.user_paused()
        self._ask_pause()

    def _ask_pause(self) -> None:
        """The engine pauses at its next pause point, which may be a minute away: say so at once."""
        if self.engine.pause():
            self.model.pausing = True
            self._on_state(self.engine.state)
            self.refresh()  # now, not at the next redraw: the click is answered at once

    def resume(self) -> None:
        rules = self.rules()
        self._hold = power.hold_reason(rules, self.sources.facts(rules))  # now, not at the last check
        self.policy.user_resumed(self._hold)
        self.engine.resume()
        if self.model.pausing:  # asked before the engine got there: it just goes on (no state event comes)
            self.model.pausing = False
            self._on_state(self.engine.state)
            self.refresh()

    def toggle_pause(self) -> None:
        if self.engine.state == "paused" or self.model.pausing:
            self.resume()
        elif self.engine.state in ("running", "finishing"):
            self.pause()
        elif not self.engine.running:
            self.start()

    def stop(self) -> None:
        self._power_timer.stop()
        if not self.engine.running and self.model.state == "starting":  # still waiting for the local relay
            if self.relay is not None:
                self.relay.stop()
            self._on_state("stopped")
            return
        self.engine.stop()

    # --- computer use: the Run menu, the tray and Preferences all end here ---
    def _save(self) -> None:
        if self.config_dir is not None or self.settings.setup_done:
            from app.settings import save

            save(self.settings, self.config_dir)

    def _sync_controls(self) -> None:
        self.controls.sync(self.settings)
        self.tray.controls.sync(self.settings)

    def set_threads(self, threads: int) -> None:
        self.settings.node["threads"] = threads
        self._save()
        if self.engine.running:
            self.engine.set_threads(threads)  # from the next round
        self._sync_controls()

    def set_cpu_limit(self, percent: int) -> None:
        if percent >= 100:
            self.settings.node.pop("cpu_limit", None)
        else:
            self.settings.node["cpu_limit"] = percent
        self._save()
        if self.engine.running:
            self.engine.set_cpu_limit(percent)  # from the next step
        self._sync_controls()

    def set_rule(self, key: str, on: bool) -> None:
        setattr(self.settings, key, on)
        self._save()
        self._sync_controls()
        self.check_power()  # a rule switched on or off acts now, not at the next check

    def rules(self) -> power.Rules:
        s = self.settings
        return power.Rules(s.only_when_idle, s.idle_minutes, s.pause_on_battery, s.schedule(),
                           s.busy_percent if s.busy_pause else 0)

    def check_power(self) -> None:
        """The idle, schedule and battery rules, acting through the same pause / resume commands."""
        rules = self.rules()
        self.apply_power(rules, self.sources.facts(rules))

    def apply_power(self, rules: power.Rules, facts: power.Facts) -> None:
        self._hold = power.hold_reason(rules, facts)
        action = self.policy.decide(self._hold, self.engine.state)
        if action == "pause":
            self._ask_pause()
            # the engine stops at its next pause point: say so until it has (its state event says when)
            self.model.message = f"Pausing by your preferences at the next pause point: {self._hold}."
        elif action == "resume":
            self.engine.resume()
            self.model.message = "Resumed: your preferences allow running again."
        self.schedule_refresh()

    def ask(self, command: ev.Ask) -> None:
        """Try your model: the question goes to the engine; its ``answer`` event comes back to the tab."""
        self.dashboard.try_model.sent(command, self.engine.ask(command))

    # --- engine signals ---
    def _on_event(self, event: ev.Event) -> None:
        if isinstance(event, ev.Answer):
            self.dashboard.try_model.show_answer(event)
            return
        if isinstance(event, ev.Start):
            self.dashboard.try_model.set_tasks(event.task_mix)
        self.model.apply(event)
        self.schedule_refresh()

    def _on_state(self, state: str) -> None:
        if state == "running" and self._last_state == "starting":
            QTimer.singleShot(0, self.check_power)  # the rules hold from the start, not from the first check
        self._last_state = state
        if state in ("stopped", "crashed", "starting"):
            self.model.state = state
        if state == "starting":  # a new engine process: the last one's relay link is gone with it
            self.model.link = None
        if state not in ("running", "finishing"):
            self.model.pausing = False
        self.dashboard.set_controls(state, replay=self.replay, pausing=self.model.pausing)
        self.dashboard.try_model.set_live(not self.replay and state in ("running", "paused", "finishing"))
        running = state in ("running", "paused", "finishing")
        self.act_start.setEnabled(not self.replay and state in ("stopped", "crashed"))
        self.act_pause.setEnabled(running)
        self.act_finish.setEnabled(state == "running")
        self.act_stop.setEnabled(running or state == "starting")
        self.setWindowIcon(app_icon(state))
        self.schedule_refresh()

    def _on_finished(self, outcome: Outcome) -> None:
        self._power_timer.stop()
        self.policy.stopped()
        if not outcome.ok and not (outcome.stopped_by_user and outcome.message is None):
            self.dashboard.show_problem(outcome.sentence(), outcome.stderr_tail)
        self.refresh()

    def schedule_refresh(self) -> None:
        if not self._redraw.isActive():
            self._redraw.start()

    def refresh(self) -> None:
        self.dashboard.refresh(self.model)
        self.tray.update(self.model.headline(), self.model.state, self.model.swarm_line())
        link = self.model.link
        counting = link is not None and link.state == "unreachable" or self.model.round_eta() is not None
        if counting and self.engine.running:
            self._countdown.start()

    # --- model export and preferences ---
    def export_model(self) -> None:
        out = QFileDialog.getExistingDirectory(self, "Export my model to…")
        if out:
            self.run_export(Path(out))

    def run_export(self, out: Path) -> GuiProcess:
        proc = GuiProcess("The export", self)
        args = ["-m", "engine", "export"]
        if self.settings.data_dir:
            args += ["--data-dir", self.settings.data_dir]

        def done(outcome: Outcome) -> None:
            text = (f"Your model was exported to {out}: a LoRA adapter for peft and for llama.cpp."
                    if outcome.ok else outcome.sentence() + "\n\n" + "\n".join(outcome.stderr_tail[-3:]))
            self.model.message = text.splitlines()[0]
            self.dashboard.add_log(text)
            self.schedule_refresh()

        proc.finished.connect(done)
        proc.start(sys.executable, args + [str(out)])
        return proc

    def preferences(self) -> None:
        from app.preferences import OPEN_SETUP, PreferencesDialog

        dialog = PreferencesDialog(self.settings, self.cores, self)
        result = dialog.exec()
        if result == OPEN_SETUP:
            self.run_setup()
        elif result:
            self.apply_settings(dialog.result_settings())

    def run_setup(self, invite: str | None = None) -> None:
        """The setup assistant again (Preferences' button, or an invite link clicked while the app runs): it
        measures this computer and compares models; with ``invite`` it opens at the swarm step, filled in."""
        from app.wizard import SetupWizard

        wizard = SetupWizard(self.settings, self.cores, invite=invite, parent=self)
        if wizard.exec():
            self.apply_settings(wizard.result_settings())

    def apply_settings(self, settings: AppSettings) -> None:
        """New settings from Preferences or the wizard: saved; cores, CPU time and rules act now."""
        from app.settings import save

        old_threads, old_limit = self.settings.node.get("threads"), self.settings.cpu_limit
        self.settings = settings
        save(self.settings, self.config_dir)
        self._sync_controls()
        threads = self.settings.node.get("threads")
        if self.engine.running and threads and threads != old_threads:
            self.engine.set_threads(int(threads))
        if self.engine.running and self.settings.cpu_limit != old_limit:
            self.engine.set_cpu_limit(self.settings.cpu_limit)
        self.check_power()
        if self.engine.running:
            self.model.message = "Preferences saved; swarm, model and priority changes apply at the next start."
            self.schedule_refresh()
        problem = autostart.sync(settings.start_at_login)
        if problem:
            self.model.message = problem
            self.schedule_refresh()

    def handle_request(self, command: str, argument: str) -> None:
        """Another launch of the app (app/single_instance.py): the launcher clicked again, or an invite link."""
        modal = QApplication.activeModalWidget()
        bring_to_front(modal or self)
        if modal is not None:  # a dialog is open: it comes first, and the request waits for another click
            return
        if command == "join":
            QTimer.singleShot(0, lambda: self.run_setup(invite=argument))
        elif command == "setup":
            QTimer.singleShot(0, self.run_setup)

    # --- leaving ---
    def _show(self) -> None:
        bring_to_front(self)

    def quit(self) -> None:
        """Quit for real (Run > Quit, the tray's Quit): the engine stops after its grace, the app ends."""
        self._quitting = True
        self.close()

    def closeEvent(self, event: QCloseEvent) -> None:  # noqa: N802 - Qt's name
        if self.tray.available and not self._quitting and not self.replay:
            event.ignore()  # to the tray: training goes on
            self.hide()
            if not self._told_tray:
                self._told_tray = True
                self.tray.icon.showMessage("SAPO Swarm keeps training",
                                           "It runs in the tray. Quit from the tray icon's menu stops it.")
            return
        if self.engine.running:
            self.statusBar().showMessage("Stopping the engine…")
            QApplication.processEvents()
            self.engine.shutdown()
        if self.relay is not None:
            self.relay.stop()
        self.tray.icon.hide()
        event.accept()
        self.quit_requested.emit()

