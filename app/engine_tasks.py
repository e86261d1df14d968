"""Short engine commands the app runs as children: the model report, a model download.

The app learns about hardware and models only from these (it never imports torch).
"""

from __future__ import annotations

from typing import Any, Callable

import msgspec
from PySide6.QtCore import QObject, Signal

from app.engine_process import engine_program
from app.guiprocess import GuiProcess
from app.outcome import Outcome
from wire import events as ev
from wire.models import NodeIdentity, decode_report


class JsonQuery(QObject):
    """An engine command that prints one JSON object; ``done`` gives it decoded, ``failed`` a sentence."""

    done = Signal(object)
    failed = Signal(str)

    def __init__(self, what: str, decode: Callable[[str], Any], parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.process = GuiProcess(what, self)
        self._decode = decode
        self._lines: list[str] = []
        self.process.stdout_line.connect(self._lines.append)
        self.process.finished.connect(self._on_finished)
        self.report: Any = None

    def run(self, args: list[str]) -> None:
        program, prefix = engine_program()
        self._lines.clear()
        self.process.start(program, prefix + args)

    def _on_finished(self, outcome: Outcome) -> None:
        if not outcome.ok:
            tail = outcome.stderr_tail[-1:] if outcome.stderr_tail else ()
            self.failed.emit(" ".join((outcome.sentence(), *tail)))
            return
        for line in reversed(self._lines):  # the answer is the last JSON line; libraries may print before it
            try:
                self.report = self._decode(line)
            except msgspec.DecodeError:
                continue
            self.done.emit(self.report)
            return
        self.failed.emit("The engine's answer could not be read.")


class ModelsQuery(JsonQuery):
    """``sapo-engine models --json``: a ModelsReport."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__("Checking this computer", decode_report, parent)

    def start(self, measure: bool = False, threads: int | None = None) -> None:
        args = ["models", "--json"] + (["--measure"] if measure else [])
        self.run(args + (["--threads", str(threads)] if threads else []))


class IdentityQuery(JsonQuery):
    """``sapo-engine identity --json``: this node's NodeIdentity (made on first use)."""

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__("Reading this node's identity", msgspec.json.Decoder(NodeIdentity).decode, parent)

    def start(self, data_dir: str | None) -> None:
        self.run(["identity", "--json"] + (["--data-dir", data_dir] if data_dir else []))


class ModelDownload(QObject):
    """``sapo-engine download NAME --events -``: ``progress(done, total)``, ``done(ok, sentence)``."""

    progress = Signal(int, int)
    done = Signal(bool, str)

    def __init__(self, parent: QObject | None = None) -> None:
        super().__init__(parent)
        self.process = GuiProcess("The download", self)
        self.process.stdout_line.connect(self._on_line)
        self.process.finished.connect(self._on_finished)
        self.cancelled = False

    def start(self, model: str) -> None:
        program, prefix = engine_program()
        self.cancelled = False
        self.process.start(program, prefix + ["download", model, "--events", "-"])

    def cancel(self) -> None:
        self.cancelled = True
        self.process.kill()

    def _on_line(self, line: str) -> None:
        try:
            event = ev.decode_event(line)
        except msgspec.DecodeError:
            return
        if isinstance(event, ev.Download):
            self.progress.emit(event.done_bytes, event.total_bytes)
        elif isinstance(event, ev.ErrorEvent):
            self.process.set_message(event.message)

    def _on_finished(self, outcome: Outcome) -> None:
        if self.cancelled:
            self.done.emit(False, "Download cancelled.")
        else:
            self.done.emit(outcome.ok, "Downloaded." if outcome.ok else download_failure_words(outcome))


def download_failure_words(outcome: Outcome) -> str:
    """A failed download in plain words: the engine's sentence is for a terminal (HF_HUB_OFFLINE, hosts)."""
    message = (outcome.message or "").lower()
    back = " Go Back to choose a model that is already on this computer, or try again later."
    if "offline mode is on" in message:
        return "The model could not be downloaded: this computer is set to work offline." + back
    if "cannot connect" in message or "timed out" in message:
        return "The model could not be downloaded: the download server could not be reached." + back
    if "gated" in message:
        return ("The model could not be downloaded: its owner asks you to accept its terms on huggingface.co "
                "first." + back)
    sentence = outcome.sentence()
    return sentence + ("" if sentence.endswith(".") else ".") + back
