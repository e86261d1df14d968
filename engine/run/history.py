"""The node's event history in its data dir: what a restarted app rebuilds its charts from.

Each ``round`` and ``eval`` event is appended to ``events.jsonl`` beside the model's checkpoints
(``<data dir>/checkpoints/<model>/``: each model its own past, as its own checkpoints) as it is emitted. The
file is bounded: past ``MAX_BYTES`` it becomes ``events.1.jsonl`` (the one older file kept) and a
new one begins. At start the runner reads both back (``load``) and emits them as one ``history``
event, so the app has one source, the engine's stdout, for the past and the present alike.

A data dir's checkpoints decide what the history is: a run restarted from an earlier round (or a
fresh one after its checkpoints were deleted) writes rounds again, and the later copy replaces the
earlier line of rounds from that point on. Nothing here may take the node down: a write that fails
is said once and dropped.
"""

from __future__ import annotations

import sys
from pathlib import Path

import msgspec

from wire import events as ev

FILE_NAME = "events.jsonl"
OLD_FILE_NAME = "events.1.jsonl"
MAX_BYTES = 8 * 1024 * 1024  # ~1000 rounds with their answers; two files at most
MAX_ROUNDS = 1000  # rounds sent in a history event
FEED_ROUNDS = 10  # the newest rounds keep their answers (the app's feed shows 40); older ones are sent without

Item = ev.Round | ev.Eval


class HistoryFile:
    """Appends a node's rounds and evaluations to its data dir and reads them back, bounded and rotated."""

    def __init__(self, folder: Path, max_bytes: int = MAX_BYTES) -> None:
        self.path = folder / FILE_NAME
        self.old_path = folder / OLD_FILE_NAME
        self.max_bytes = max_bytes
        self._failed = False

    def record(self, event: ev.Event) -> None:
        """An ``EventLog`` listener: keeps rounds and evaluations, ignores the rest."""
        if not isinstance(event, (ev.Round, ev.Eval)) or self._failed:
            return
        line = ev.encode(event)
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)  # a new model's folder, before its first checkpoint
            if self.path.exists() and self.path.stat().st_size + len(line) > self.max_bytes:
                self.path.replace(self.old_path)  # the older file goes; this one becomes it
            with open(self.path, "ab") as fh:
                fh.write(line)
        except OSError as exc:  # a full disk must not stop training: the history just ends here
            self._failed = True
            print(f"event history not written to {self.path}: {exc}", file=sys.stderr, flush=True)

    def load(self, upto_round: int, max_rounds: int = MAX_ROUNDS, feed_rounds: int = FEED_ROUNDS) -> ev.History:
        """The history up to ``upto_round`` (the round the node resumed from; 0: a fresh start, no history)."""
        if upto_round <= 0:
            return ev.History()
        items = lineage(self._read())
        items = [e for e in items if e.round <= upto_round]
        rounds = [e.round for e in items if isinstance(e, ev.Round)]
        if len(rounds) > max_rounds:
            first = rounds[-max_rounds]
            items = [e for e in items if e.round >= first]
        feed_from = rounds[-feed_rounds] if 0 < feed_rounds <= len(rounds) else 0
        items = [msgspec.structs.replace(e, rollouts=[]) if isinstance(e, ev.Round) and e.round < feed_from else e
                 for e in items]
        return ev.History(events=items)

    def _read(self) -> list[Item]:
        out: list[Item] = []
        for path in (self.old_path, self.path):
            try:
                lines = path.read_bytes().splitlines()
            except FileNotFoundError:
                continue
            except OSError as exc:
                print(f"event history not read from {path}: {exc}", file=sys.stderr, flush=True)
                continue
            for line in lines:
                try:
                    event = ev.decode_event(line)
                except msgspec.DecodeError:  # a line torn by a crash, say: skipped
                    continue
                if isinstance(event, (ev.Round, ev.Eval)):
                    out.append(event)
        return out


def lineage(items: list[Item]) -> list[Item]:
    """The items of the latest line of rounds, in order: an item at round n replaces everything
    after n, and an item of its own kind at n (an evaluation at n comes before round n's event)."""
    kept: list[Item] = []
    for item in items:
        if kept and kept[-1].round >= item.round:  # not the usual next step: a restart from an earlier round
            kept = [k for k in kept if k.round < item.round or (k.round == item.round and type(k) is not type(item))]
        kept.append(item)
    return kept
