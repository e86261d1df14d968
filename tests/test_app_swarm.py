"""The app in a live swarm: the real window drives a real engine child that joins a real relay on
127.0.0.1 with a second real engine (a headless child); the dashboard shows the other node's groups
under its derived name, and both nodes on the leaderboard."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from app.settings import AppSettings
from app.window import MainWindow
from wire import events as ev
from wire.identity import display_name

from relay_process import RelayProcess

pytestmark = pytest.mark.slow

# Both nodes: the bundled model, 4 answers of <= 24 tokens (enough for some groups to have reward spread,
# the only ones shared), one thread each so the two share the 2 cores of CI.
COMMON = ["--model", "smollm2-135m", "--tasks", "basic_arithmetic", "--completions", "4", "--max-tokens", "24",
          "--eval-every", "0", "--threads", "1", "--swarm", "gui"]
WAIT_MS = 900_000  # startup loads torch and the model twice; a round is 10-100 s on a busy 2-core box


def _start_of(path) -> dict | None:
    if not path.exists():
        return None
    return next((json.loads(x) for x in path.read_text().splitlines() if '"type":"start"' in x.replace(" ", "")),
                None)


def test_the_dashboard_shows_a_peer_in_a_live_swarm(qtbot, tmp_path, monkeypatch, model_cache):
    monkeypatch.setenv("SAPO_CACHE_DIR", str(model_cache))
    monkeypatch.setenv("SAPO_CONFIG_DIR", str(tmp_path / "config"))
    relay = RelayProcess(tmp_path / "relay").start()
    # The peer only shares (J = 0): two own groups a round, published when their rewards differ.
    peer_events, peer_err = tmp_path / "peer.jsonl", tmp_path / "peer.err"
    peer = subprocess.Popen([sys.executable, "-m", "engine", "run", *COMMON, "--local", "2", "--external", "0",
                             "--relay", relay.url, "--data-dir", str(tmp_path / "peer"), "--events", str(peer_events),
                             "--quiet"], stdout=subprocess.DEVNULL, stderr=peer_err.open("wb"),
                            env={**os.environ, "SAPO_CACHE_DIR": str(model_cache)})
    window = MainWindow(AppSettings(data_dir=str(tmp_path / "gui")),
                        extra_engine_args=[*COMMON, "--local", "1", "--external", "2", "--relay", relay.url], cores=2)
    qtbot.addWidget(window)
    seen: list = []
    window.engine.event.connect(seen.append)
    d = window.dashboard
    try:
        window.start()

        def peer_name() -> str | None:
            start = _start_of(peer_events)
            return display_name(start["node_id"]) if start else None

        def received() -> list[ev.RolloutSample]:
            return [s for e in seen if isinstance(e, ev.Round) for s in e.rollouts if s.source != "own"]

        def done() -> bool:
            assert peer.poll() is None, peer_err.read_text(errors="replace")[-2000:]
            assert window.engine.state not in ("crashed", "stopped"), "the app's engine ended"
            return bool(received()) and any(isinstance(e, ev.Swarm) and len(e.leaderboard) >= 2 for e in seen)

        qtbot.wait_until(done, timeout=WAIT_MS)
        window.refresh()
        name = peer_name()
        assert name is not None and name != window.model.node_name
        assert {s.source for s in received()} == {name}  # the sender's derived name, nothing the peer chose
        rounds = [e for e in seen if isinstance(e, ev.Round)]
        assert sum(r.external_groups for r in rounds) > 0

        # The feed: a row "from" the peer, beside this computer's own.
        sources = {d.feed.item(i, 0).text() for i in range(d.feed.rowCount())}
        assert name in sources and "this computer" in sources
        # The leaderboard: both nodes, this one marked.
        board = [d.leaderboard.item(i, 1).text() for i in range(d.leaderboard.rowCount())]
        assert name in board and f"{window.model.node_name} (you)" in board
        # The cards: a peer online, and what the swarm shipped counted on the groups chart.
        assert d.card_swarm.value.text() == "2" and window.model.relay_connected  # both nodes, this one included
        assert "volunteers online" in d.card_swarm.caption.text()
        assert sum(p.external for p in window.model.rounds) == sum(r.external_groups for r in rounds)
        # Refusals (a peer's question that is in this node's held-out set, a check timed out on a busy
        # machine) are legitimate in a live swarm; the Swarm tab says which, or that there were none.
        refused = sum(r.rejected_groups for r in rounds)
        assert d.refused.text().startswith("Shared answers refused so far — " if refused
                                           else "No shared answers refused so far."), d.refused.text()
    finally:
        window.engine.shutdown(wait_ms=20_000)
        peer.kill()
        peer.wait(10)
        relay.stop()
