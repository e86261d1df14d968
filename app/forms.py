"""The swarm form, shared by the setup wizard and the preferences dialog (computer use: app/resource_forms.py)."""

from __future__ import annotations

from PySide6.QtCore import Qt, Signal
from PySide6.QtWidgets import (QButtonGroup, QFormLayout, QGroupBox, QHBoxLayout, QLabel, QLineEdit, QListWidget,
                               QListWidgetItem, QPushButton, QRadioButton, QSpinBox, QVBoxLayout, QWidget)

from app import palette
from app.settings import RELAY_PLACEHOLDER, AppSettings
from app.swarm_list import SwarmLister
from wire.addresses import relay_urls_problem
from wire.invite import InviteError, parse_invite
from wire.protocol import swarm_name_problem
from wire.swarm_list import PublicSwarm

# The node settings an invite link pins (engine/config.py): the relay's certificate, the manifest's digest and signer.
PINS = ("relay_ca_sha256", "manifest_digest", "manifest_signer")
SWARM_CHOICES = (
    ("public", "Join a swarm", "Train together with the volunteers of a swarm on a relay server."),
    ("private", "Join a private swarm", "A swarm that needs a password (token) from whoever runs it."),
    ("local", "A local swarm on this computer",
     "The app runs a relay here (reachable from this computer only); other nodes on this computer can join it."),
    ("offline", "Train alone (offline)", "No swarm: this computer learns only from its own answers."),
)


def one_tab_stop(group: QButtonGroup) -> None:
    """A choice is one Tab stop, entered at the checked option; arrow keys move the choice (as in
    native dialogs). Qt alone enters a group at whichever button last had focus, often an unchecked one."""
    def fix(*_: object) -> None:
        for button in group.buttons():
            button.setFocusPolicy(Qt.FocusPolicy.StrongFocus if button.isChecked() else Qt.FocusPolicy.ClickFocus)

    group.buttonToggled.connect(fix)
    fix()


class SwarmForm(QWidget):
    changed = Signal()

    def __init__(self, parent: QWidget | None = None) -> None:
        super().__init__(parent)
        layout = QVBoxLayout(self)
        self.group = QButtonGroup(self)
        self.buttons: dict[str, QRadioButton] = {}
        for key, title, words in SWARM_CHOICES:
            button = QRadioButton(title)
            button.setToolTip(words)
            self.group.addButton(button)
            self.buttons[key] = button
            layout.addWidget(button)
            hint = QLabel(words)
            hint.setWordWrap(True)
            hint.setStyleSheet(f"color: {palette.MUTED_TEXT}; margin-left: 24px")
            layout.addWidget(hint)
        box = QGroupBox("Swarm details")
        form = QFormLayout(box)
        # One pasted invite link (wire/invite.py) fills everything below, and pins the relay's certificate, the
        # swarm's manifest digest and the key its operator signs manifests with, where the link carries them.
        self.invite = QLineEdit()
        self.invite.setPlaceholderText("sapo-swarm://join?... or https://.../join#... (from the swarm's operator)")
        self.invite.setAccessibleName("invite link")
        self.invite.setClearButtonEnabled(True)
        self.pins: dict[str, str] = {}  # PINS from the link
        form.addRow("Invite link:", self.invite)
        self.relay = QLineEdit()
        self.relay.setPlaceholderText(RELAY_PLACEHOLDER)
        self.relay.setAccessibleName("relay address")
        self.swarm = QLineEdit("public")
        self.swarm.setAccessibleName("swarm name")
        self.token = QLineEdit()
        self.token.setEchoMode(QLineEdit.EchoMode.Password)
        self.token.setAccessibleName("swarm token")
        self.port = QSpinBox()
        self.port.setRange(1024, 65535)
        self.port.setValue(8765)
        self.port.setAccessibleName("local swarm port")
        form.addRow("Relay address:", self.relay)
        form.addRow("Public swarms:", self._public_swarms())
        form.addRow("Swarm name:", self.swarm)
        form.addRow("Token (password):", self.token)
        form.addRow("Port on this computer:", self.port)
        self.problem = QLabel("")
        self.problem.setStyleSheet(f"color: {palette.ERROR_TEXT}")
        self.problem.setWordWrap(True)
        layout.addWidget(box)
        layout.addWidget(self.problem)
        layout.addStretch(1)
        self.form = form
        for w in (self.relay, self.swarm, self.token):
            w.textChanged.connect(self._update)
        self.invite.textChanged.connect(self._take_invite)
        self.group.buttonToggled.connect(lambda *_: self._update())
        self.buttons["offline"].setChecked(True)
        one_tab_stop(self.group)

    def _public_swarms(self) -> QWidget:
        """The relay's public swarms (GET /swarms), listed on request: picking one fills in its name."""
        box = QWidget()
        column = QVBoxLayout(box)
        column.setContentsMargins(0, 0, 0, 0)
        row = QHBoxLayout()
        self.list_button = QPushButton("List this relay's swarms")
        self.list_button.setAccessibleName("list the relay's public swarms")
        self.list_note = QLabel("")
        self.list_note.setWordWrap(True)
        self.list_note.setStyleSheet(f"color: {palette.MUTED_TEXT}")
        row.addWidget(self.list_button)
        row.addWidget(self.list_note, 1)
        column.addLayout(row)
        self.swarm_list = QListWidget()
        self.swarm_list.setAccessibleName("public swarms")
        self.swarm_list.setMaximumHeight(120)
        self.swarm_list.hide()
        column.addWidget(self.swarm_list)
        self.lister = SwarmLister(self)
        self.list_button.clicked.connect(self._list_swarms)
        self.lister.listed.connect(self._show_swarms)
        self.lister.failed.connect(self._list_failed)
        self.swarm_list.currentItemChanged.connect(self._pick_swarm)
        self.public_box = box
        return box

    def _list_swarms(self) -> None:
        self.list_note.setText("asking the relay…")
        self.list_button.setEnabled(False)
        self.lister.fetch(self.relay.text(), ca_sha256=self.pins.get("relay_ca_sha256"))

    def _show_swarms(self, swarms: list[PublicSwarm]) -> None:
        self.list_button.setEnabled(True)
        self.swarm_list.clear()
        self.swarm_list.setVisible(bool(swarms))
        if not swarms:
            self.list_note.setText("This relay lists no public swarms: type the swarm's name below.")
            return
        self.list_note.setText("Pick a swarm:")
        for s in swarms:
            peers = f"{s.peers_online} volunteer{'' if s.peers_online == 1 else 's'} online"
            item = QListWidgetItem(f"{s.swarm} — {s.description or ', '.join(s.tasks)} ({peers})")
            item.setData(Qt.ItemDataRole.UserRole, s.swarm)
            item.setToolTip("\n".join([f"Tasks: {'; '.join(s.tasks)}"]
                                      + ([f"Suggested models: {', '.join(s.models)}"] if s.models else [])))
            self.swarm_list.addItem(item)

    def _list_failed(self, why: str) -> None:
        self.list_button.setEnabled(True)
        self.swarm_list.clear()
        self.swarm_list.hide()
        self.list_note.setText(why)

    def _pick_swarm(self, item: QListWidgetItem | None) -> None:
        if item is None:
            return
        name = item.data(Qt.ItemDataRole.UserRole)
        if name != self.swarm.text().strip():
            # An invite's manifest pins are for its own swarm only. The signer goes too: the list may be another
            # relay's, typed after the invite, where that key would refuse every swarm.
            self.pins.pop("manifest_digest", None)
            self.pins.pop("manifest_signer", None)
        self.swarm.setText(name)

    @property
    def kind(self) -> str:
        return next((k for k, b in self.buttons.items() if b.isChecked()), "offline")

    def _update(self) -> None:
        kind = self.kind
        for widget, shown in ((self.relay, kind in ("public", "private")), (self.public_box, kind == "public"),
                              (self.swarm, kind != "offline"),
                              (self.token, kind == "private"), (self.port, kind == "local")):
            widget.setEnabled(shown)
            self.form.labelForField(widget).setEnabled(shown)
        self.problem.setText(self.problem_text() or "")
        self.changed.emit()

    def _take_invite(self, text: str) -> None:
        """A good link fills the form (public or private by its token); a bad one is the form's problem line."""
        self.pins = {}
        if text.strip():
            try:
                invite = parse_invite(text)
            except InviteError:
                self._update()
                return
            self.buttons["private" if invite.token else "public"].setChecked(True)
            self.relay.setText(",".join(invite.relays))
            self.swarm.setText(invite.swarm)
            self.token.setText(invite.token or "")
            self.pins = {k: v for k, v in (("relay_ca_sha256", invite.ca_sha256),
                                           ("manifest_digest", invite.manifest_digest),
                                           ("manifest_signer", invite.manifest_signer)) if v}
        self._update()

    def invite_problem(self) -> str | None:
        text = self.invite.text().strip()
        if not text:
            return None
        try:
            parse_invite(text)
        except InviteError as exc:
            return f"invite link: {exc}"
        return None

    def problem_text(self) -> str | None:
        if (problem := self.invite_problem()) is not None:
            return problem
        kind = self.kind
        if kind in ("public", "private"):
            if not self.relay.text().strip():
                return "enter the relay address of the swarm to join (ws://host:port or wss://host)"
            problem = relay_urls_problem(self.relay.text())  # wire's rule; the engine checks again when it starts
            if problem:
                return problem
        if kind != "offline" and (problem := swarm_name_problem(self.swarm.text().strip())):
            return problem  # wire's rule: the relay refuses any other name
        if kind == "private" and not self.token.text():
            return "a private swarm needs its token"
        return None

    def load(self, s: AppSettings) -> None:
        self.buttons.get(s.swarm_kind, self.buttons["offline"]).setChecked(True)
        self.relay.setText(s.node.get("relay") or "") if s.swarm_kind != "local" else None
        self.swarm.setText(s.node.get("swarm", "public"))
        self.token.setText(s.node.get("token") or "")
        self.pins = {k: s.node[k] for k in PINS if s.node.get(k)}
        self.port.setValue(s.local_relay_port)
        self._update()

    def store(self, s: AppSettings) -> None:
        kind = self.kind
        s.swarm_kind = kind  # type: ignore[assignment]
        s.local_relay_port = self.port.value()
        for key in ("relay", "swarm", "token", "offline", *PINS):
            s.node.pop(key, None)
        if kind == "offline":
            s.node["offline"] = True
            return
        s.node["swarm"] = self.swarm.text().strip()
        s.node["relay"] = f"ws://127.0.0.1:{self.port.value()}" if kind == "local" else self.relay.text().strip()
        if kind == "private":
            s.node["token"] = self.token.text()
        if kind in ("public", "private"):
            s.node.update(self.pins)
