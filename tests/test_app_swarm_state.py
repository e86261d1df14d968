"""The swarm's state on screen has one source, the engine's ``relay`` event: the swarm card says what the
relay link is (singular and plural alike), persistently when the relay is unreachable (why, and when the
next try is), "not connected" once stopped; a replay's card and message line never disagree. The real
window and channel, a scripted engine child (tests/scripted_engine.py); the engine's side on a closed port."""

from __future__ import annotations

import time
from pathlib import Path

from test_app_history import _round, run_script, stop

from app.replay import read_events
from app.run_model import RunModel
from app.window import MainWindow
from wire import events as ev
from wire.identity import Identity

ROOT = Path(__file__).resolve().parent.parent
RELAY = "ws://relay.example:8765"


def _start(**settings) -> ev.Start:
    return ev.Start(node_id="ab" * 16, node_name="calm-heron-07", model="smollm2-135m", model_path="/m.gguf",
                    round_start=0, round_end=None, threads=2, settings={"relay": RELAY, "offline": False} | settings)




def test_a_node_that_connects_before_it_says_start_shows_its_link(qtbot, window, tmp_path, monkeypatch):
    # A node joining a swarm with a manifest connects first (the manifest decides its mix), then says start.
    d = window.dashboard
    run_script(qtbot, window, monkeypatch, tmp_path / "run.jsonl",
               [ev.Relay(state="connected", url=RELAY, peers=2), _start(), ev.History(),
                ev.StateChanged(state="running")])
    assert (d.card_swarm.value.text(), d.card_swarm.caption.text()) == ("2", "volunteers online")
    stop(qtbot, window)


def test_connected_says_one_count_in_one_wording_and_stop_says_not_connected(qtbot, window, tmp_path, monkeypatch):
    d = window.dashboard
    run_script(qtbot, window, monkeypatch, tmp_path / "run.jsonl",
               [_start(), ev.History(), ev.StateChanged(state="running"),
                ev.Relay(state="connected", url=RELAY, peers=1)])
    assert (d.card_swarm.value.text(), d.card_swarm.caption.text()) == ("1", "volunteer online")
    assert "peers" not in d.message.text() and "relay" not in d.message.text()  # the card says it, once
    assert window.tray.icon.toolTip().endswith("\n1 volunteer online")  # the tray: the same words
    stop(qtbot, window)
    assert (d.card_swarm.value.text(), d.card_swarm.caption.text()) == ("–", "not connected (stopped)")
    assert window.tray.icon.toolTip().endswith("\nnot connected (stopped)")
    assert "connected" not in d.message.text()


def test_an_unreachable_relay_shows_a_persistent_reason_and_the_next_try(qtbot, window, tmp_path, monkeypatch):
    d = window.dashboard
    retry_at = time.time() + 20
    run_script(qtbot, window, monkeypatch, tmp_path / "run.jsonl",
               [_start(), ev.History(), ev.StateChanged(state="running"),
                ev.Relay(state="unreachable", url=RELAY, reason="connection refused", retry_at=retry_at),
                ev.Status(message="something else happened"), _round(1, relay_connected=False, peers=0)])
    assert d.card_swarm.value.text() == "offline"
    caption = d.card_swarm.caption.text()
    assert caption.startswith("relay unreachable: connection refused; next try in ") and caption.endswith(" s")
    assert 1 <= int(caption.split("next try in ")[1].split()[0]) <= 20
    assert "Errno" not in caption and "alone" not in caption
    qtbot.wait(1500)  # it counts down on its own, with no event arriving
    assert d.card_swarm.caption.text() != caption and d.card_swarm.caption.text().startswith("relay unreachable")


def test_the_card_wording_for_each_state():
    m = RunModel()
    assert m.swarm_card() == ("–", "not connected (stopped)")
    m.apply(_start(relay=None))
    m.apply(ev.StateChanged(state="running"))
    assert m.swarm_card() == ("alone", "training alone (no swarm)")
    m.apply(_start())
    assert m.swarm_card() == ("…", "joining the swarm")
    m.apply(ev.Relay(state="connected", url=RELAY, peers=2))
    assert m.swarm_card() == ("2", "volunteers online")
    m.apply(ev.Swarm(peers_online=1, groups_per_minute=0.0))
    assert m.swarm_card() == ("1", "volunteer online")
    m.apply(ev.Relay(state="unreachable", url=RELAY, reason="no such host", retry_at=100.0))
    assert m.swarm_card(now=97.5) == ("offline", "relay unreachable: no such host; next try in 3 s")
    assert m.swarm_card(now=101.0)[1] == "relay unreachable: no such host; trying again at the next step"
    m.apply(ev.Stop(round=3, reason="stop command"))
    m.state = "stopped"
    assert m.swarm_card() == ("–", "not connected (stopped)")


def test_an_older_engines_link_lines_are_read_as_the_link():
    m = RunModel()
    m.apply(_start())
    m.apply(ev.StateChanged(state="running"))
    m.apply(ev.Status(message=f"relay {RELAY} unreachable ([Errno 111] Connection refused); training on local "
                              "groups, retrying in 4s", time=1000.0))
    assert m.message == "" and m.swarm_card(now=1001.0) == (
        "offline", "relay unreachable: connection refused; next try in 3 s")
    m.apply(ev.Status(message=f"reconnected to relay {RELAY}, swarm 'public', 3 peers online"))
    assert m.message == "" and m.swarm_card() == ("3", "volunteers online")
    m.apply(ev.Status(message="resumed from round-000004"))
    assert m.message == "resumed from round-000004"


def test_a_replays_card_and_message_line_agree(qtbot):
    replay = read_events(ROOT / "docs" / "swarm-demo.jsonl")  # an older engine: its link said in status lines
    window = MainWindow()
    qtbot.addWidget(window)
    window.show_replay(replay.events, "replay")
    d, m = window.dashboard, window.model
    assert "peers online" not in d.message.text()  # the start's "2 peers online" is not the end's count
    assert d.card_swarm.value.text() == str(m.peers)
    assert d.card_swarm.caption.text().endswith("online at the end of the run")


def test_the_engine_says_an_unreachable_relay_as_a_reason_and_a_retry_time(tmp_path):
    from engine.sharing.swarm_client import SwarmClient
    from tools.relay_loadgen import free_port

    links: list[ev.Relay] = []
    lines: list[str] = []
    url = f"ws://127.0.0.1:{free_port()}"  # nothing listens there
    client = SwarmClient(url, "s", Identity.generate(), "m", None, on_status=lines.append, timeout_s=5,
                         on_link=links.append)
    before = time.time()
    assert not client.ensure_connected()
    assert [(link.state, link.url, link.reason) for link in links] == [("unreachable", url, "connection refused")]
    assert links[0].retry_at is not None and before < links[0].retry_at < time.time() + 2  # backoff starts at 1 s
    assert lines == []  # said once, as the typed event


def test_the_terminal_says_the_relay_link():
    import io

    from engine.run.event_log import terminal_printer

    out = io.StringIO()
    show = terminal_printer(out)
    show(ev.Relay(state="connected", url=RELAY, peers=1))
    show(ev.Relay(state="unreachable", url=RELAY, reason="connection refused", retry_at=time.time() + 30))
    first, second = out.getvalue().splitlines()
    assert first == f"relay: connected to {RELAY}, 1 peer online"
    assert second.startswith(f"relay: {RELAY} unreachable (connection refused); training on local groups, next try in")
    out = io.StringIO()
    show = terminal_printer(out)
    show(ev.SwarmManifest(state="adopted", swarm="sums", digest="d" * 64, mix=["chain_sum"], completions=4,
                          max_tokens=48, format_bonus=0.1, signer="b" * 64, replaced=["a" * 64]))
    assert out.getvalue() == (f"swarm sums: following its manifest {'d' * 12} signed by {'b' * 12} (replaces "
                              f"{'a' * 12}) | L=4 max_tokens 48 | chain_sum\n")


def test_a_manifest_adopted_after_start_sets_l_and_the_reward_scale():
    m = RunModel()
    m.apply(_start(completions=8, max_tokens=96, format_bonus=0.0))  # its own settings: the relay was down
    ceiling = m.best_reward()
    m.apply(ev.SwarmManifest(state="adopted", swarm="sums", digest="d" * 64, mix=["chain_sum"], completions=2,
                             max_tokens=12, format_bonus=0.1))
    assert (m.settings["completions"], m.settings["max_tokens"], m.settings["format_bonus"]) == (2, 12, 0.1)
    assert ceiling == 1.0 and m.best_reward() == 1.1
    m.apply(ev.SwarmManifest(state="changed", swarm="sums", digest="e" * 64, joined_digest="d" * 64,
                             changes=["max_tokens"]))
    assert m.settings["max_tokens"] == 12  # a change is reported, not followed


def test_the_swarm_tab_names_the_rules_followed_and_says_a_change_or_a_refusal(qtbot):
    from app.dashboard import Dashboard
    d = Dashboard()
    qtbot.addWidget(d)
    m = RunModel()
    m.apply(_start())
    d.refresh(m)
    swarm_tab = d.tabs.indexOf(d.rules.parentWidget())
    assert d.rules.isHidden() and d.rules_notice.isHidden() and d.tabs.tabText(swarm_tab) == "Swarm"
    new, old = "b" * 64, "a" * 64
    m.apply(ev.SwarmManifest(state="adopted", swarm="sums", digest="d" * 64, mix=["chain_sum", "gcd"],
                             completions=4, max_tokens=48, format_bonus=0.1, signer=new, replaced=[old]))
    d.refresh(m)
    text = d.rules.text()
    assert not d.rules.isHidden() and d.rules_notice.isHidden()
    assert "Swarm sums" in text and "chain_sum, gcd" in text and "d" * 12 in text and f"key {new[:12]}" in text
    assert f"replaced key {old[:12]} with it" in text and "refused" in text
    # The relay announces other rules: the node keeps its own (the event says so) and the tab says what changed.
    m.apply(ev.SwarmManifest(state="changed", swarm="sums", digest="e" * 64, joined_digest="d" * 64,
                             changes=["max_tokens", "tasks"]))
    d.refresh(m)
    assert "Swarm sums" in d.rules.text()  # still the rules it follows
    notice = d.rules_notice.text()
    assert not d.rules_notice.isHidden() and d.tabs.tabText(swarm_tab) == "Swarm ⚠"
    assert "max_tokens, tasks changed" in notice and "keeps the rules it joined with (dddddddddddd)" in notice
    assert "e" * 12 in notice
    # Adopting again (a new invite) clears the notice.
    m.apply(ev.SwarmManifest(state="adopted", swarm="sums", digest="e" * 64, mix=["chain_sum"], completions=4,
                             max_tokens=64, format_bonus=0.1, signer=new))
    d.refresh(m)
    assert d.rules_notice.isHidden() and d.tabs.tabText(swarm_tab) == "Swarm" and "replaced" not in d.rules.text()
    # A refusal: it trains alone, and the reason is the engine's own line.
    m2 = RunModel()
    m2.apply(ev.SwarmManifest(state="refused", swarm="sums", reason=f"relay {RELAY} announces a manifest signed by "
                              f"{old[:12]}, a key its operator replaced (with {new[:12]})"))
    d.refresh(m2)
    assert d.rules.isHidden() and d.rules_notice.text().startswith("This computer trains alone on its own tasks: relay")
    assert d.rules_notice.text().endswith(f"(with {new[:12]}).")
