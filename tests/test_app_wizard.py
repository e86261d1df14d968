"""The setup wizard with the bundled model and a local swarm; settings persist; preferences edit them."""

from __future__ import annotations

import tomllib

import pytest
from PySide6.QtWidgets import QWizard

from app import settings as store
from app.local_relay import port_open
from app.settings import AppSettings
from engine.errors import SapoError
from tools.relay_loadgen import free_port


@pytest.fixture
def dirs(tmp_path, monkeypatch, model_cache):
    monkeypatch.setenv("SAPO_CONFIG_DIR", str(tmp_path / "config"))
    monkeypatch.setenv("SAPO_CACHE_DIR", str(model_cache))
    return tmp_path


def test_settings_persist_across_restarts(dirs):
    assert store.load() == AppSettings()  # nothing saved yet: defaults, setup not done
    s = AppSettings(setup_done=True, only_when_idle=True, idle_minutes=9, swarm_kind="private", schedule_on=True,
                    schedule_start="23:15", schedule_end="06:45",
                    node={"model": "smollm2-135m", "relay": "ws://relay.example:8765", "swarm": "lab",
                          "token": "s3cret", "threads": 2, "cpu_limit": 60})
    store.save(s)
    again = store.load()
    assert again == s
    node = tomllib.loads((dirs / "config" / "node.toml").read_text())
    assert node == s.node  # the engine's file holds exactly the engine's settings
    bad = AppSettings(node={"completions": 1})
    with pytest.raises(SapoError, match="completions"):
        store.save(bad)  # never writes a file the engine would refuse
    assert store.load() == s
    (dirs / "config" / "app.toml").write_text('power = "light"\nsetup_done = true')  # an old file's preset
    assert store.load().setup_done  # is ignored: the cores are node.toml's threads
    (dirs / "config" / "app.toml").write_text("power = [")
    with pytest.raises(SapoError, match="cannot be read"):
        store.load()


def test_wizard_with_the_bundled_model_and_a_local_swarm(qtbot, dirs):
    from app.wizard import SetupWizard

    port = free_port()
    wizard = SetupWizard(AppSettings(data_dir=str(dirs / "data")), cores=2, measure=False)
    qtbot.addWidget(wizard)
    wizard.show()
    qtbot.wait_until(lambda: wizard.report is not None, timeout=180_000)  # a real `sapo-engine models --json`
    assert wizard.hardware_page.isComplete()
    assert "Memory" in wizard.hardware_page.text.text()
    if wizard.report.hardware.device == "cpu" and not wizard.report.hardware.gpus:  # the engine's word on where
        assert "Each model:</b> trains on the CPU, samples on the CPU" in wizard.hardware_page.text.text()
    wizard.next()
    page = wizard.model_page
    assert page.selected() == wizard.report.recommended  # the recommendation is preselected
    rows = {page.table.item(i, 0).data(0x0100): i for i in range(page.table.rowCount())}
    page.table.selectRow(rows["smollm2-135m"])
    assert page.selected() == "smollm2-135m" and page.isComplete()
    wizard.next()
    assert wizard.currentPage() is wizard.download_page
    assert wizard.download_page.isComplete() and "already on this computer" in wizard.download_page.text.text()
    wizard.next()
    form = wizard.swarm_page.form
    form.buttons["public"].setChecked(True)
    form.relay.setText("http://not-a-relay")
    assert not wizard.swarm_page.isComplete() and "ws://host:port" in form.problem.text()
    form.buttons["local"].setChecked(True)
    form.port.setValue(port)
    form.swarm.setText("kitchen")
    assert wizard.swarm_page.isComplete()
    wizard.next()
    qtbot.wait_until(wizard.name_page.isComplete, timeout=120_000)  # a real `sapo-engine identity --json`
    name = wizard.name_page.name.text()
    assert name.count("-") == 2 and name == wizard.name_page.query.report.node_name  # adjective-animal-NN
    assert (dirs / "data" / "node.json").is_file()  # the engine made this node's identity in its data dir
    wizard.next()
    assert wizard.power_page.resources.threads.value() == 1  # half of 2 cores, chosen directly
    wizard.power_page.rules.battery.setChecked(False)
    assert wizard.currentPage() is wizard.power_page and wizard.button(QWizard.WizardButton.FinishButton).isVisible()
    result = wizard.result_settings()
    wizard.accept()
    assert result.setup_done and result.swarm_kind == "local" and result.local_relay_port == port
    assert result.node == {"model": "smollm2-135m", "swarm": "kitchen", "relay": f"ws://127.0.0.1:{port}",
                           "threads": 1}
    assert result.pause_on_battery is False
    store.save(result)
    assert store.load() == result

    # The main window starts the local swarm (a relay it owns, on 127.0.0.1), then the engine.
    from app.window import MainWindow

    window = MainWindow(store.load(), cores=2)
    qtbot.addWidget(window)
    with qtbot.wait_signal(window.engine.state_changed, timeout=60_000,
                           check_params_cb=lambda s: s == "starting"):
        window.start()
    assert window.relay is not None and window.relay.is_ready and port_open(port)
    window.engine.shutdown(wait_ms=10_000)  # the engine itself is tested in test_app_engine.py
    window.relay.stop()
    qtbot.wait_until(lambda: not port_open(port), timeout=10_000)


def test_preferences_edit_the_settings(qtbot, dirs):
    from app.preferences import PreferencesDialog

    s = AppSettings(setup_done=True, node={"model": "smollm2-135m", "offline": True})
    dialog = PreferencesDialog(s, cores=4)
    qtbot.addWidget(dialog)
    dialog.resources.threads.setValue(4)
    dialog.rules.idle.setChecked(True)
    dialog.swarm.buttons["private"].setChecked(True)
    dialog.swarm.relay.setText("wss://relay.example.org")
    ok = dialog.buttons.button(dialog.buttons.StandardButton.Ok)
    assert not ok.isEnabled()  # a private swarm needs its token
    dialog.swarm.token.setText("t0ken")
    assert ok.isEnabled()
    out = dialog.result_settings()
    assert out.node == {"model": "smollm2-135m", "threads": 4, "swarm": "public", "relay": "wss://relay.example.org",
                        "token": "t0ken"}
    assert out.only_when_idle and out.swarm_kind == "private"
    assert s.node == {"model": "smollm2-135m", "offline": True}  # the original is untouched until saved
    qtbot.wait_until(lambda: dialog.model.count() > 1, timeout=120_000)  # the catalog, from `models --json`
    names = [dialog.model.itemData(i) for i in range(dialog.model.count())]
    assert names[0] == "smollm2-135m" and "qwen2.5-7b" in names
    assert dialog.model.currentData() == "smollm2-135m"  # the choice survives the list arriving
    assert dialog.model.currentText().startswith("SmolLM2")  # shown by its name, not the engine's id


def test_the_swarm_form_says_which_swarm_names_the_relay_refuses(qtbot):
    from app.forms import SwarmForm

    form = SwarmForm()
    qtbot.addWidget(form)
    form.buttons["public"].setChecked(True)
    form.relay.setText("ws://127.0.0.1:8765")
    for bad in ("my swarm", ".hidden", "x" * 65, ""):
        form.swarm.setText(bad)
        assert form.problem_text() is not None and "swarm name must be" in form.problem_text(), bad
        assert form.problem.text() == form.problem_text()  # shown under the form as typed
    form.swarm.setText("kitchen-2.v1")
    assert form.problem_text() is None and form.problem.text() == ""


def test_join_a_swarm_assumes_no_relay_and_waits_for_a_valid_address(qtbot):
    from app.wizard import SwarmPage

    page = SwarmPage()
    qtbot.addWidget(page)
    form = page.form
    form.buttons["public"].setChecked(True)  # "Join a swarm", the first choice
    assert form.relay.text() == "" and form.relay.placeholderText().startswith("wss://")  # no loopback default
    assert not page.isComplete() and form.problem.text().startswith("enter the relay address")
    form.relay.setText("ws://")
    assert not page.isComplete() and "ws://host:port" in form.problem.text()  # wire/addresses.py's rule
    form.relay.setText("wss://relay.example.org")
    assert page.isComplete() and form.problem.text() == ""


def test_a_pasted_invite_link_fills_the_join_page_and_pins_its_digests(qtbot):
    from app.wizard import SwarmPage
    from wire.invite import Invite, format_invite, format_invite_https

    page = SwarmPage()
    qtbot.addWidget(page)
    form = page.form
    invite = Invite(relays=["wss://a.example:8765", "wss://b.example:8765"], swarm="lab", token="s3cret",
                    ca_sha256="c" * 64, manifest_digest="d" * 64, manifest_signer="5" * 64)
    form.invite.setText(format_invite_https(invite))  # the https form a status page shows works the same
    assert form.kind == "private" and form.relay.text() == "wss://a.example:8765,wss://b.example:8765"
    assert form.swarm.text() == "lab" and form.token.text() == "s3cret" and page.isComplete()
    s = AppSettings()
    form.store(s)
    assert s.swarm_kind == "private" and s.node["token"] == "s3cret"
    assert s.node["relay_ca_sha256"] == "c" * 64 and s.node["manifest_digest"] == "d" * 64
    assert s.node["manifest_signer"] == "5" * 64  # the operator's manifest key: only rules it signed are followed
    again = SwarmPage()  # Preferences reopened: the pins stay, also when the volunteer saves again
    qtbot.addWidget(again)
    again.form.load(s)
    again.form.store(s2 := AppSettings())
    assert {k: s2.node.get(k) for k in ("relay_ca_sha256", "manifest_digest", "manifest_signer")} == {
        "relay_ca_sha256": "c" * 64, "manifest_digest": "d" * 64, "manifest_signer": "5" * 64}
    link = format_invite(invite)
    form.invite.setText(link[:-3])  # cut short in the copy
    assert not page.isComplete() and form.problem.text().startswith("invite link: ")
    assert "check" in form.problem.text()
    form.invite.setText(link.replace("swarm=lab", "swarm=lap"))  # edited
    assert not page.isComplete() and "altered" in form.problem.text()
    form.invite.setText("")
    assert page.isComplete()  # the fields it filled stay, and are valid on their own


def test_the_app_opens_at_the_join_step_with_a_link_argument(qtbot, dirs):
    from app.main import build_parser
    from app.wizard import SetupWizard
    from wire.invite import Invite, format_invite

    link = format_invite(Invite(relays=["ws://127.0.0.1:8765"], swarm="sums", manifest_digest="e" * 64,
                                manifest_signer="5" * 64))
    assert build_parser().parse_args([link]).link == link  # what the desktop file's `sapo %u` passes
    wizard = SetupWizard(AppSettings(setup_done=True), 2, measure=False, invite=link)
    qtbot.addWidget(wizard)
    assert wizard.startId() == wizard.pageIds()[3] and wizard.page(wizard.startId()) is wizard.swarm_page
    form = wizard.swarm_page.form
    assert form.invite.text() == link and form.kind == "public" and form.swarm.text() == "sums"
    settings = wizard.result_settings()
    assert settings.node["relay"] == "ws://127.0.0.1:8765" and settings.node["manifest_digest"] == "e" * 64
    assert settings.node["manifest_signer"] == "5" * 64
    store.save(settings)  # the engine's node.toml takes the pinned digest and signer: settings it knows
    assert store.load().node["manifest_digest"] == "e" * 64 and store.load().node["manifest_signer"] == "5" * 64


def test_the_join_page_lists_a_relays_public_swarms_to_pick_from(qtbot, tmp_path):
    from app.wizard import SwarmPage
    from relay_process import RelayProcess
    from test_swarm_manifest import GOOD

    (tmp_path / "swarms.toml").write_text(GOOD)  # "arithmetic" (public) and "secret" (private, never listed)
    relay = RelayProcess(tmp_path / "relay", "--swarms", str(tmp_path / "swarms.toml")).start()
    try:
        page = SwarmPage()
        qtbot.addWidget(page)
        form = page.form
        form.buttons["public"].setChecked(True)
        assert form.public_box.isEnabled() and not form.swarm_list.isVisibleTo(form)
        form.relay.setText(relay.url)
        with qtbot.waitSignal(form.lister.listed, timeout=20_000) as got:
            form.list_button.click()
        assert [s.swarm for s in got.args[0]] == ["arithmetic"]
        assert form.swarm_list.count() == 1 and form.swarm_list.isVisibleTo(form)
        item = form.swarm_list.item(0)
        assert item.text() == "arithmetic — Small sums for small models (0 volunteers online)"
        assert "basic_arithmetic x2 max_digits 1..2; chain_sum" in item.toolTip()
        assert "smollm2-135m, gemma-3-270m" in item.toolTip()
        form.pins = {"manifest_digest": "d" * 64, "manifest_signer": "5" * 64}  # an earlier invite's, another swarm
        form.swarm_list.setCurrentRow(0)  # the volunteer picks it: no name typed
        assert form.swarm.text() == "arithmetic" and page.isComplete() and form.pins == {}
        s = AppSettings()
        form.store(s)
        assert s.swarm_kind == "public" and s.node["swarm"] == "arithmetic" and s.node["relay"] == relay.url
    finally:
        relay.stop()
    # The relay is gone now: one line under the button, the list cleared, the form still usable.
    with qtbot.waitSignal(form.lister.failed, timeout=20_000) as failed:
        form.list_button.click()
    assert failed.args[0].startswith(f"could not list the swarms at {relay.http}/swarms: ")
    assert form.list_note.text() == failed.args[0] and form.swarm_list.count() == 0
    assert form.list_button.isEnabled() and page.isComplete()


def test_a_relays_list_of_swarms_is_read_with_bounds():
    from wire.swarm_list import MAX_LIST_BYTES, decode_swarm_list, swarms_url

    assert swarms_url("wss://relay.example.org,wss://b.example") == "https://relay.example.org/swarms"
    assert swarms_url("ws://127.0.0.1:8765") == "http://127.0.0.1:8765/swarms"
    for bad, why in (("", "enter the relay address"), ("http://x", "ws://host:port")):
        with pytest.raises(ValueError, match=why):
            swarms_url(bad)
    listed = decode_swarm_list(b'{"swarms": [{"swarm": "s", "tasks": ["gcd"], "digest": "ab", "peers_online": 2}]}')
    assert listed[0].swarm == "s" and listed[0].peers_online == 2  # a field the app does not use is ignored
    for body, why in ((b"<html>", "does not read"), (b'{"swarms": [{"swarm": "no spaces"}]}', "does not read"),
                      (b" " * (MAX_LIST_BYTES + 1), "over 256 KiB"),
                      (b'{"swarms": [], "x": ' + b"[" * 5000 + b"}", "nested too deeply")):  # was a RecursionError
        with pytest.raises(ValueError, match=why):
            decode_swarm_list(body)


def test_a_relay_with_a_private_ca_is_listed_with_the_invites_pin_or_its_ca_file(qtbot, tmp_path):
    from PySide6.QtWidgets import QWidget

    from app.swarm_list import SwarmLister
    from app.wizard import SwarmPage
    from relay.invite_cmd import certificate_sha256
    from wire.invite import Invite, format_invite
    from relay_process import RelayProcess
    from test_swarm_manifest import GOOD
    from tls_certs import make_pki

    pki = make_pki(tmp_path / "pki")
    (tmp_path / "swarms.toml").write_text(GOOD)
    relay = RelayProcess(tmp_path / "relay", "--swarms", str(tmp_path / "swarms.toml"), "--tls-cert", str(pki.cert),
                         "--tls-key", str(pki.key), tls_ca=pki.ca).start()
    owner = QWidget()  # as the join page owns its lister: Qt, not Python's collector, ends it and its replies
    qtbot.addWidget(owner)
    lister = SwarmLister(owner)
    pin = certificate_sha256(pki.cert)
    try:
        with qtbot.waitSignal(lister.failed, timeout=20_000) as failed:  # the system's CAs do not know it
            lister.fetch(relay.url)
        assert failed.args[0].startswith(f"could not list the swarms at {relay.http}/swarms: ")
        with qtbot.waitSignal(lister.listed, timeout=20_000) as got:  # an invite's fingerprint of its certificate
            lister.fetch(relay.url, ca_sha256=pin)
        assert [s.swarm for s in got.args[0]] == ["arithmetic"]
        with qtbot.waitSignal(lister.listed, timeout=20_000) as got:  # its CA's file, as node.toml's relay_ca_file
            lister.fetch(relay.url, ca_file=str(pki.ca))
        assert [s.swarm for s in got.args[0]] == ["arithmetic"]
        with qtbot.waitSignal(lister.failed, timeout=20_000) as failed:  # another certificate's fingerprint
            lister.fetch(relay.url, ca_sha256="0" * 64)
        assert "the relay's certificate is not the one the invite pins (sha256 000000000000...)" in failed.args[0]
        with qtbot.waitSignal(lister.failed, timeout=20_000) as failed:  # a file that is not a certificate
            lister.fetch(relay.url, ca_file=str(pki.key))
        assert failed.args[0] == f"the relay CA file {pki.key} holds no PEM certificate"
        # The join page: a pasted invite pins the certificate, and its list button uses the pin.
        page = SwarmPage()
        qtbot.addWidget(page)
        page.form.invite.setText(format_invite(Invite(relays=[relay.url], swarm="arithmetic", ca_sha256=pin)))
        with qtbot.waitSignal(page.form.lister.listed, timeout=20_000) as got:
            page.form.list_button.click()
        assert [s.swarm for s in got.args[0]] == ["arithmetic"] and page.form.swarm_list.count() == 1
    finally:
        relay.stop()
    with qtbot.waitSignal(lister.failed, timeout=20_000) as failed:  # gone: unreachable, not "another certificate"
        lister.fetch(relay.url, ca_sha256=pin)
    assert "not the one the invite pins" not in failed.args[0]
