"""The node's event history in its data dir (engine/run/history.py): kept, bounded and rotated, read back
as the ``history`` event the app rebuilds its charts from. Plain files, no model."""

from __future__ import annotations

import msgspec
import pytest

from engine.run.event_log import EventLog
from engine.run.history import HistoryFile, lineage
from wire import events as ev


def _round(n: int) -> ev.Round:
    sample = ev.RolloutSample(task="t", question=f"q{n}", answer="1", reward=1.0, correct=True, source="own")
    return ev.Round(round=n, reward_mean=0.5, accuracy=0.25, format_rate=1.0, task_score=0.25, groups=4,
                    gen_tokens=100, gen_s=2.0, gen_tokens_per_s=50.0, loss=0.1, train_s=5.0, swap_ms=100.0,
                    checkpoint_ms=10.0, groups_trained=3, groups_dropped=1, tokens_trained=100, clip_low_frac=0.0,
                    clip_high_frac=0.0, grad_norm=1.0, round_s=8.0, rollouts=[sample])


def _eval(n: int) -> ev.Eval:
    return ev.Eval(round=n, eval_accuracy=0.1, eval_sampled_reward=0.2, eval_questions=4, eval_s=1.0)


def _rounds(h: ev.History) -> list[int]:
    return [e.round for e in h.events if isinstance(e, ev.Round)]


def test_rounds_and_evaluations_are_kept_and_read_back_up_to_the_resumed_round(tmp_path):
    history = HistoryFile(tmp_path)
    log = EventLog()
    log.add(history.record)
    log.emit(ev.Status(message="not kept"))
    log.emit(ev.PhaseProgress(round=1, phase="generating"))
    for e in (_eval(0), _round(1), _round(2), _eval(2), _round(3)):
        log.emit(e)
    assert [type(e) for e in HistoryFile(tmp_path).load(3).events] == [ev.Eval, ev.Round, ev.Round, ev.Eval, ev.Round]
    assert _rounds(history.load(2)) == [1, 2]  # the checkpoint says round 2: later rounds are not this node's past
    assert history.load(0).events == []  # a fresh start has no past
    (tmp_path / "events.jsonl").open("a").write('{"type": "round", "round": 4, "rew')  # torn by a crash
    assert _rounds(history.load(9)) == [1, 2, 3]


def test_a_line_nested_past_the_stack_is_skipped_like_any_damaged_line(tmp_path):
    # msgspec recurses into free-form fields: a RecursionError went past `except msgspec.DecodeError` and stopped
    # the node at start, reading its own history
    history = HistoryFile(tmp_path)
    log = EventLog()
    log.add(history.record)
    log.emit(_round(1))
    with (tmp_path / "events.jsonl").open("a") as fh:
        fh.write("[" * 200_000 + "\n")
        fh.write('{"type": "start", "settings": {"x": ' + "[" * 200_000 + "}}\n")
    log.emit(_round(2))
    assert _rounds(history.load(2)) == [1, 2]
    deep = '{"type": "start", "settings": {"x": ' + "[" * 200_000
    with pytest.raises(msgspec.DecodeError, match="nested too deeply"):
        ev.decode_event(deep)
    with pytest.raises(msgspec.DecodeError, match="nested too deeply"):
        ev.decode_command('{"type": "threads", "n": ' + "[" * 200_000)


def test_a_restart_from_an_earlier_round_replaces_the_later_ones():
    items = [_eval(0), _round(1), _round(2), _round(3), _round(2), _round(3), _eval(0), _round(1)]
    kept = lineage(items)
    assert [(type(e).__name__, e.round) for e in kept] == [("Eval", 0), ("Round", 1)]
    assert kept[-1] is items[-1]
    resumed = lineage([_round(1), _round(2), _round(3), _round(2), _eval(2), _round(3)])
    assert [(type(e).__name__, e.round) for e in resumed] == [("Round", 1), ("Round", 2), ("Eval", 2), ("Round", 3)]


def test_the_file_is_rotated_and_the_event_bounded(tmp_path):
    size = len(ev.encode(_round(1)))
    history = HistoryFile(tmp_path, max_bytes=10 * size)
    for n in range(1, 31):
        history.record(_round(n))
    assert (tmp_path / "events.1.jsonl").exists()
    total = sum(p.stat().st_size for p in tmp_path.iterdir())
    assert total <= 2 * 10 * size  # two files at most, each under the bound
    h = history.load(30, max_rounds=8, feed_rounds=3)
    assert _rounds(h) == list(range(23, 31))  # the last 8 of the rounds both files still hold
    assert [len(e.rollouts) for e in h.events][-4:] == [0, 1, 1, 1]  # answers only in the newest rounds
    kept = _rounds(history.load(30))
    assert kept == list(range(kept[0], 31)) and 10 < len(kept) < 30  # the older ones rotated out


def test_a_history_event_survives_the_channel():
    h = ev.History(events=[_eval(0), _round(1)])
    assert ev.decode_event(ev.encode(h)) == h
