"""The app against the real engine, tiny rounds on the bundled model: the dashboard follows, and
pause, resume, finish-then-pause and stop act on the real loop."""

from __future__ import annotations

import json
import os

import pytest

from app.window import MainWindow
from engine.run.priority import LOW_NICE
from tests.threads import autogroup_nice, thread_nices
from wire import events as ev

pytestmark = pytest.mark.slow

TINY = ["--model", "smollm2-135m", "--offline", "--tasks", "basic_arithmetic", "--local", "2", "--external", "0",
        "--completions", "2", "--max-tokens", "16", "--eval-every", "0", "--threads", "2"]
ROUND_MS = 600_000  # one tiny round is 10-100 s on a busy 2-core box; startup loads torch and the model


def test_dashboard_and_controls_on_a_real_engine(qtbot, tmp_path, monkeypatch, model_cache):
    monkeypatch.setenv("SAPO_CACHE_DIR", str(model_cache))
    monkeypatch.setenv("SAPO_CONFIG_DIR", str(tmp_path / "config"))
    data = tmp_path / "data"
    data.mkdir()
    (data / "node.json").write_text(json.dumps({"node_id": "e1" * 16}))
    from app.settings import AppSettings

    window = MainWindow(AppSettings(data_dir=str(data)), extra_engine_args=TINY, cores=2)
    qtbot.addWidget(window)
    seen: list = []
    window.engine.event.connect(seen.append)
    d = window.dashboard

    def rounds() -> int:
        return sum(isinstance(e, ev.Round) for e in seen)

    ours = autogroup_nice()
    try:
        window.start()
        assert window.model.state == "starting"
        qtbot.wait_until(lambda: rounds() >= 1, timeout=ROUND_MS)
        # the engine leads a session of its own, at low priority with its autogroup: this window's stays as it was
        pid = window.engine.pid
        assert os.getsid(pid) == pid != os.getsid(0)
        assert set(thread_nices(pid).values()) == {LOW_NICE}
        if autogroup_nice(pid) is not None:  # CI's sandbox has none to read
            assert autogroup_nice(pid) == LOW_NICE and autogroup_nice() == ours
        window.refresh()
        assert window.model.state == "running" and d.main_button.text() == "Pause"
        assert d.card_round.value.text() == str(rounds()) and d.status.text().startswith("Training — round")
        assert len(d.progress_chart._reward_avg.getData()[0]) == rounds()
        phases = {(e.phase) for e in seen if isinstance(e, ev.PhaseProgress)}
        assert {"generating", "training", "swapping", "checkpointing"} <= phases
        gen = [e for e in seen if isinstance(e, ev.PhaseProgress) and e.phase == "generating" and e.round == 1]
        assert gen[0].done == 0 and any(e.done == e.total == 4 for e in gen)  # 2 questions x 2 answers
        assert all(0 <= e.done <= e.total for e in gen)  # a refill batch (fill_dead_slots) is a phase of its own
        own = sum(len(e.rollouts) for e in seen if isinstance(e, ev.Round))  # a few answers per round
        assert own >= 2 * rounds()  # at least each own question of the round (2; more when dead slots refill)
        assert d.feed.rowCount() == own and d.feed.item(0, 0).text() == "this computer"  # answers' feed

        # cores and CPU time while running: the engine takes the new thread count from the next round, the
        # CPU-time limit from its next step
        with qtbot.wait_signal(window.engine.event, timeout=ROUND_MS,
                               check_params_cb=lambda e: isinstance(e, ev.Status) and "threads will be 1" in e.message):
            window.set_threads(1)
        with qtbot.wait_signal(window.engine.event, timeout=ROUND_MS, check_params_cb=lambda e: isinstance(
                e, ev.Status) and e.message == "using at most 50 % of CPU time from the next step"):
            window.set_cpu_limit(50)
        with qtbot.wait_signal(window.engine.event, timeout=ROUND_MS, check_params_cb=lambda e: isinstance(
                e, ev.Status) and e.message == "no CPU-time limit from the next step"):
            window.set_cpu_limit(100)

        # pause: the loop really pauses (the state comes from the engine), no new round starts
        with qtbot.wait_signal(window.engine.state_changed, timeout=ROUND_MS,
                               check_params_cb=lambda s: s == "paused"):
            d.main_button.click()
        n = rounds()
        qtbot.wait(4000)
        assert rounds() == n and d.main_button.text() == "Resume"
        window.refresh()
        assert d.status.text().startswith("Paused")

        # resume: rounds continue
        d.main_button.click()
        qtbot.wait_until(lambda: rounds() > n, timeout=ROUND_MS)

        # finish: the round in flight completes, then the engine pauses by itself
        assert window.engine.state == "running"
        d.finish_button.click()
        qtbot.wait_until(lambda: window.engine.state == "paused", timeout=ROUND_MS)
        n = rounds()
        states = [e.state for e in seen if isinstance(e, ev.StateChanged)]
        assert "finishing" in states and states[-1] == "paused"
        qtbot.wait(3000)
        assert rounds() == n

        # stop: a clean end, no problem shown
        with qtbot.wait_signal(window.engine.finished, timeout=ROUND_MS) as blocker:
            d.stop_button.click()
        assert blocker.args[0].ok, blocker.args[0]
        assert isinstance(seen[-1], ev.Stop) and seen[-1].reason == "stop command"
        assert window.engine.state == "stopped" and not d.banner.isVisible()
        assert d.main_button.text() == "Start"

        # "export my model": runs `sapo-engine export` on the node's data dir
        out = tmp_path / "exported"
        export = window.run_export(out)
        with qtbot.wait_signal(export.finished, timeout=ROUND_MS) as blocker:
            pass
        assert blocker.args[0].ok, blocker.args[0].stderr_tail
        assert (out / "lora.gguf").is_file() and (out / "peft" / "adapter_config.json").is_file()
        assert window.model.message.startswith(f"Your model was exported to {out}")
    finally:
        window.engine.shutdown(wait_ms=20_000)


def test_a_bad_setting_shows_the_engines_sentence_and_a_restart(qtbot, tmp_path, monkeypatch, model_cache):
    monkeypatch.setenv("SAPO_CACHE_DIR", str(model_cache))
    monkeypatch.setenv("SAPO_CONFIG_DIR", str(tmp_path / "config"))
    from app.settings import AppSettings

    window = MainWindow(AppSettings(data_dir=str(tmp_path / "data")), extra_engine_args=["--completions", "1"])
    qtbot.addWidget(window)
    with qtbot.wait_signal(window.engine.finished, timeout=120_000) as blocker:
        window.start()
    outcome = blocker.args[0]
    assert outcome.exit_code == 2 and "completions (L) must be between 2 and 64" in outcome.sentence()
    assert not window.dashboard.banner.isHidden()
    assert "completions (L)" in window.dashboard.banner_text.text()
    assert window.dashboard.restart_button.isVisibleTo(window.dashboard.banner)
    assert window.engine.state == "crashed" and window.act_start.isEnabled()
