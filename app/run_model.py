"""What the dashboard shows, accumulated from engine events: plain Python, no Qt.

The view (``app/dashboard.py``) only reads this; feeding it events is the whole
controller. Replay feeds it a file's events, a live run feeds it the engine's.
"""

from __future__ import annotations

import math
import re
import time
from collections import Counter, deque
from dataclasses import dataclass, field
from typing import Any

from app import eta
from wire import events as ev
from wire.models import describe_placement
from wire.points import Sample, points, points_per_day

FEED_SIZE = 40  # recent answers kept for the feed
LOG_SIZE = 2000

# Plain words for the phases of a round (the main screen avoids jargon).
PHASE_WORDS = {
    "external": "Collecting answers shared by the swarm",
    "generating": "Writing answers",
    "scoring": "Checking answers",
    "sharing": "Sharing answers with the swarm",
    "training": "Learning from the answers",
    "swapping": "Loading the improved model",
    "evaluating": "Taking a practice test",
    "checkpointing": "Saving progress",
}

STATE_WORDS = {
    "stopped": "Stopped",
    "starting": "Starting…",
    "running": "Training",
    "paused": "Paused",
    "finishing": "Finishing this round, then pausing",
    "stopping": "Stopping after this round",
    "crashed": "Stopped with a problem",
    "replay": "Replay of a finished run",
}


@dataclass(frozen=True)
class RoundPoint:
    round: int
    reward: float
    accuracy: float
    tokens_per_s: float
    # where the round's time went, seconds
    generate_s: float
    score_s: float
    train_s: float
    swap_s: float
    evaluate_s: float
    other_s: float
    round_s: float
    # groups of answers this round
    own: int
    external: int
    dropped: int
    rejected: int
    answers_per_min: float | None = None  # own answers written per minute of writing; None without the settings


@dataclass
class RunModel:
    state: str = "stopped"
    node_name: str = ""
    node_id: str = ""
    model: str = ""
    threads: int = 0
    round_end: int | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    rounds: list[RoundPoint] = field(default_factory=list)
    evals: list[tuple[int, float, float]] = field(default_factory=list)  # round, pass@1, sampled reward
    phase: ev.PhaseProgress | None = None
    download: ev.Download | None = None
    relay_connected: bool | None = None
    swarm_configured: bool = False  # the start event's settings name a relay and are not offline
    link: ev.Relay | None = None  # the engine's latest word on its relay: the swarm card says only this
    peers: int = 0
    shared_total: int = 0
    adopted_total: int = 0
    rank: int | None = None
    leaderboard: list[ev.LeaderRow] = field(default_factory=list)
    # Contribution points (wire/points.py): running totals after each round the relay counted, and the relay's
    # own count of this node's rounds (its swarm event), which the leaderboard's points use
    contributions: list[Sample] = field(default_factory=list)
    relay_rounds: int | None = None
    rejected_reasons: Counter[str] = field(default_factory=Counter)
    feed: deque[ev.RolloutSample] = field(default_factory=lambda: deque(maxlen=FEED_SIZE))
    message: str = ""  # the latest status / warning line
    error: str = ""
    stop_reason: str = ""
    pausing: bool = False  # a pause was asked for; the engine has not reached its next pause point yet
    # When the round in flight and its phase began (engine clock), and its earlier phases' seconds: the ETA's input
    round_t0: float | None = None
    phase_t0: float | None = None
    spent: dict[str, float] = field(default_factory=dict)
    paused_at: float | None = None  # a pause's time is no round's: the clocks above skip it
    last_eval_s: float | None = None  # the last practice test's seconds (its eval event's)
    where: str = ""  # where the engine trains and samples, and the fix for an idle GPU (the start event's)
    # A followed swarm's tasks this model has never answered right, drawn less for now (engine/tasks/held_back.py):
    # task -> its weight's factor, from the latest round
    held_back: dict[str, float] = field(default_factory=dict)
    # The swarm's rules (its manifest) this node follows, and the latest word against them: a change the relay
    # announces (the node keeps its rules) or a refusal (it trains alone); the Swarm tab says both
    rules: ev.SwarmManifest | None = None
    rules_notice: ev.SwarmManifest | None = None

    @property
    def current_round(self) -> int:
        return self.rounds[-1].round if self.rounds else int(self.settings.get("round_start", 0) or 0)

    def apply(self, event: ev.Event) -> None:
        """Take one event into the model."""
        match event:
            case ev.Start():
                self.node_name, self.node_id, self.model = event.node_name, event.node_id, event.model
                self.threads, self.round_end = event.threads, event.round_end
                self.where = (describe_placement(event.trains_on, event.samples_on, event.accel_fix)
                              if event.trains_on else "")
                self.settings = dict(event.settings) | {"round_start": event.round_start}
                self.swarm_configured = bool(event.settings.get("relay")) and not event.settings.get("offline")
                self.error = self.stop_reason = ""
                # Not the link: a node joining a swarm connects (its `relay` event) before it says `start`;
                # a link ends with the node's `stop` or its process.
            case ev.StateChanged():
                self.state = event.state
                self.pausing = False  # the engine's own word on its state replaces what was asked
                self._pause_clock(event)
                if event.state in ("paused", "stopping"):
                    self.phase = None if event.state == "stopping" else self.phase
            case ev.PhaseProgress():
                self._phase(event)
            case ev.Download():
                self.download = None if event.finished else event
            case ev.Status():
                link = legacy_link(event)
                if link is None:
                    self.message = event.message
                else:  # an older engine's connection line: a link change, not a message that goes stale
                    self._link(link)
            case ev.Warning():
                self.message = f"Warning: {event.message}"
            case ev.ErrorEvent():
                self.error = event.message
            case ev.Stop():
                self.stop_reason, self.phase = event.reason, None
                self.link = None  # the node has closed its connection
            case ev.Round():
                self._round(event)
            case ev.Eval():
                self.evals.append((event.round, event.eval_accuracy, event.eval_sampled_reward))
                self.last_eval_s = event.eval_s
            case ev.History():
                self._history(event)
            case ev.Relay():
                self._link(event)
            case ev.SwarmManifest(state="adopted"):  # a node that started alone follows its swarm from now on
                self.settings |= {"completions": event.completions, "max_tokens": event.max_tokens,
                                  "format_bonus": event.format_bonus}
                self.rules, self.rules_notice = event, None
            case ev.SwarmManifest():
                self.rules_notice = event
            case ev.Swarm():
                self.peers = event.peers_online
                self.leaderboard = list(event.leaderboard)
                self.rank = event.rank
                if event.you is not None:
                    self.shared_total, self.adopted_total = event.you.groups_shared, event.you.groups_adopted
                    self.relay_rounds = event.you.rounds

    def _pause_clock(self, s: ev.StateChanged) -> None:
        if s.state == "paused":
            self.paused_at = self.paused_at or s.time
        elif self.paused_at is not None:
            away = max(0.0, s.time - self.paused_at)
            self.round_t0 = None if self.round_t0 is None else self.round_t0 + away
            self.phase_t0 = None if self.phase_t0 is None else self.phase_t0 + away
            self.paused_at = None

    def _phase(self, p: ev.PhaseProgress) -> None:
        last = self.phase
        if last is None or last.round != p.round or self.round_t0 is None:
            self.round_t0, self.phase_t0, self.spent = p.time, p.time, {}
        elif last.phase != p.phase and self.phase_t0 is not None:
            self.spent[last.phase] = self.spent.get(last.phase, 0.0) + p.time - self.phase_t0
            self.phase_t0 = p.time
        self.phase = p

    def _history(self, h: ev.History) -> None:
        """The rounds before this start: charts, answers and totals rebuilt; the swarm's live state untouched."""
        self.rounds, self.evals = [], []
        self.contributions = []
        self.feed.clear()
        self.rejected_reasons = Counter()
        self.shared_total = self.adopted_total = 0
        for item in h.events:
            if isinstance(item, ev.Round):
                self._round(item, live=False)
            else:
                self.evals.append((item.round, item.eval_accuracy, item.eval_sampled_reward))
                self.last_eval_s = getattr(item, "eval_s", None) or self.last_eval_s

    def _link(self, link: ev.Relay) -> None:
        self.link = link
        self.relay_connected = link.state == "connected"
        if link.state == "connected":
            self.peers = link.peers

    def _round(self, r: ev.Round, live: bool = True) -> None:
        evaluate = r.eval_s or 0.0
        swap = r.swap_ms / 1000
        known = r.gen_s + r.score_s + r.train_s + swap + evaluate
        completions = self.settings.get("completions")
        answers = 60 * r.groups * completions / r.gen_s if completions and r.gen_s > 0 else None
        self.rounds.append(RoundPoint(
            round=r.round, reward=r.reward_mean, accuracy=r.accuracy, tokens_per_s=r.gen_tokens_per_s,
            generate_s=r.gen_s, score_s=r.score_s, train_s=r.train_s, swap_s=swap, evaluate_s=evaluate,
            other_s=max(0.0, r.round_s - known), round_s=r.round_s,
            own=r.groups, external=r.external_groups, dropped=r.groups_dropped, rejected=r.rejected_groups,
            answers_per_min=answers,
        ))
        if live:  # a past round's connection and peers are stale: only the present's count
            self.phase, self.round_t0 = None, None
            self.relay_connected = r.relay_connected
            if r.relay_connected is not None:
                self.peers = r.peers
        self.rejected_reasons.update(r.rejected_reasons)
        self.held_back = dict(r.tasks_held_back)
        if r.shared_total is not None:
            self.shared_total = r.shared_total
        if r.adopted_total is not None:
            self.adopted_total = r.adopted_total
            if r.relay_connected:  # a round the relay heard of (its report): one the relay counts
                self.contributions.append(Sample(r.time, r.adopted_total, len(self.contributions) + 1))
        self.feed.extendleft(r.rollouts)  # newest first

    # --- contribution points ---
    def points_total(self) -> int:
        """This node's points as the relay's leaderboard has them (its counts from the last swarm event),
        else from the rounds this model has seen."""
        rounds = self.relay_rounds if self.relay_rounds is not None else len(self.contributions)
        return points(self.adopted_total, rounds)

    def points_by_day(self) -> list[tuple[Any, int]]:
        """Points earned each day (date, points), from the rounds this model has seen. A history that begins
        at round 1 starts from nothing; a shortened one from its first round's totals."""
        if not self.contributions:
            return []
        first_round = next((p.round for p in self.rounds), 1)
        first = self.contributions[0]
        start = (0, 0) if first_round <= 1 else (first.groups_adopted, first.rounds)
        return points_per_day(self.contributions, start=start)

    # --- what the main screen says ---
    def headline(self, now: float | None = None) -> str:
        """The one big line on top. Round numbers are the engine's: the round in flight is the one its phase
        events name (a pause mid-round is *in* that round), else the one after the last finished."""
        of = f" of {self.round_end}" if self.round_end else ""
        flight = self.phase.round if self.phase is not None else None
        if self.state == "replay":
            return f"{STATE_WORDS['replay']} — round {self.current_round}{of}" if self.rounds else STATE_WORDS["replay"]
        if self.state == "paused":
            if flight is not None and flight > self.current_round:
                return f"Paused — in round {flight}{of}, goes on from there"
            return f"Paused — after round {self.current_round}{of}" if self.current_round else "Paused"
        if self.state not in ("running", "finishing", "stopping"):
            return STATE_WORDS.get(self.state, self.state.capitalize())
        words = "Pausing at the end of this step" if self.pausing else STATE_WORDS[self.state]
        if flight == 0:  # the practice test before any training: not part of round 1
            return f"{words} — practice test before round 1"
        n = flight if flight else self.current_round + 1
        words += f" — round {min(n, self.round_end or n)}{of}"
        progress = self.round_eta(now)
        if progress is not None and progress.fraction is not None:
            words += f", {100 * progress.fraction:.0f} %"
        return words

    def round_eta(self, now: float | None = None) -> eta.Eta | None:
        """The round in flight: share done and seconds left (None without a phase; fields None until a
        round has been measured here). The practice test before round 1 is its own progress, not a round's."""
        p = self.phase
        if p is None or self.round_t0 is None or self.phase_t0 is None or self.state not in ("running", "finishing",
                                                                                             "stopping"):
            return None  # paused: no time passes for the round (and a replay has no present)
        now = time.time() if now is None else now
        phase_elapsed, round_elapsed = max(0.0, now - self.phase_t0), max(0.0, now - self.round_t0)
        if p.round == 0:
            return eta.practice_test_eta(p.done, p.total, phase_elapsed, self._last_eval_s())
        every = int(self.settings.get("eval_every") or 0)
        return eta.round_eta(p.phase, p.done, p.total, phase_elapsed, round_elapsed, self.spent,
                             eta.expected_phases(self.rounds, self._last_eval_s()),
                             evaluates=bool(every) and p.round % every == 0)

    def _last_eval_s(self) -> float | None:
        if self.last_eval_s:
            return self.last_eval_s
        timed = [r.evaluate_s for r in self.rounds if r.evaluate_s > 0]
        return timed[-1] if timed else None

    def best_reward(self) -> float:
        """The best reward an answer can get in this run: 1 for a correct one plus the format bonus (the start
        event's settings are resolved: the bonus is a number there, 0 where there is none)."""
        return 1.0 + float(self.settings.get("format_bonus") or 0.0)

    def rounds_per_hour(self) -> float | None:
        return eta.rounds_per_hour(self.rounds)

    def swarm_card(self, now: float | None = None) -> tuple[str, str]:
        """The swarm card's figure and caption: one function of the run's state, its relay link and the peers
        online, so that no two places on the screen can disagree."""
        ever_swarm = self.swarm_configured or self.link is not None or self.relay_connected is not None
        if self.state == "replay":
            if not ever_swarm and not self.leaderboard:
                return "alone", "trained alone (no swarm)"
            return str(self.peers), f"{volunteers(self.peers)} online at the end of the run"
        if self.state in ("stopped", "crashed"):
            return "–", "not connected (stopped)"
        if not ever_swarm:
            return ("alone", "training alone (no swarm)") if self.node_id else ("–", "not connected yet")
        link = self.link
        if link is None:
            return "…", "joining the swarm"
        if link.state == "unreachable":
            return "offline", f"relay unreachable: {link.reason}; {next_try(link.retry_at, now)}"
        return str(self.peers), f"{volunteers(self.peers)} online"

    def rules_text(self) -> tuple[str, str]:
        """The Swarm tab's two lines on the swarm's rules: which this node follows (tasks, digest, signer, the keys
        its operator replaced), and a notice when the relay announces other rules or this node refused them."""
        rules = ""
        if (r := self.rules) is not None:
            signed = f", signed by key {r.signer[:12]}" if r.signer else ", unsigned"
            rules = f"Swarm {r.swarm} · tasks: {', '.join(r.mix)} · rules {r.digest[:12]}{signed}"
            if r.replaced:
                keys = ", ".join(k[:12] for k in r.replaced)
                rules += (f" (its operator replaced key{'s' if len(r.replaced) > 1 else ''} {keys} with it; rules "
                          "signed by a replaced key are refused)")
        notice = ""
        if (n := self.rules_notice) is not None and n.state == "changed":
            what = ", ".join(n.changes) or "their content"
            notice = (f"The relay now announces other rules for swarm {n.swarm} ({what} changed). This computer "
                      f"keeps the rules it joined with ({n.joined_digest[:12]}); an invite that names the new "
                      f"rules ({n.digest[:12]}) moves it to them.")
        elif n is not None:
            notice = f"This computer trains alone on its own tasks: {n.reason.rstrip('.')}."
        return rules, notice

    def accuracy_caption(self) -> tuple[str, str]:
        """The accuracy card's caption, and what its tooltip adds: the tasks drawn less because this model has
        never answered them right (they would pull the figure down and teach nothing until it does)."""
        caption = "correct in training, last 5 rounds"
        if not self.held_back:
            return caption, ""
        tasks = sorted(self.held_back)
        share = min(self.held_back.values())
        return (f"{caption}; drawn less: {', '.join(tasks)}",
                f"\n\nDrawn less for now: {', '.join(tasks)}. The swarm's rules ask for "
                f"{'this task' if len(tasks) == 1 else 'these tasks'}, but this model has not answered one of "
                f"{'its' if len(tasks) == 1 else 'their'} questions right yet, so it draws "
                f"{'it' if len(tasks) == 1 else 'them'} at {share:.0%} of the usual weight. The first right answer "
                "brings the usual weight back.")

    def swarm_line(self, now: float | None = None) -> str:
        """The swarm card in one line, for the tray: "2 volunteers online", "not connected (stopped)"."""
        value, caption = self.swarm_card(now)
        return f"{value} {caption}" if value.isdigit() else caption

    def phase_text(self) -> tuple[str, int, int]:
        """What the progress bar says, and its done / total (0/0: busy, no known end)."""
        if self.download is not None:
            d = self.download
            mb = d.done_bytes / 1e6
            of = f" of {d.total_bytes / 1e6:.0f} MB" if d.total_bytes else " MB"
            return f"Downloading {d.file}: {mb:.0f}{of}", d.done_bytes, d.total_bytes
        if self.phase is None:
            return "", 0, 0
        p = self.phase
        words = PHASE_WORDS.get(p.phase, p.phase)
        if p.phase == "evaluating":  # its own progress: a test of new questions, not training
            words = "Practice test (new questions, not trained on)" + (f": {p.done} of {p.total} answers"
                                                                        if p.total else "")
        elif p.total:
            words += f" ({p.done} of {p.total})"
        return words, p.done, p.total

    def eta_text(self, now: float | None = None) -> str:
        """The time left, in words: of the practice test while it runs first, else of the round in flight."""
        progress = self.round_eta(now)
        if progress is None:
            return ""
        if self.phase is not None and self.phase.round == 0:
            return f"{eta.duration_words(progress.remaining_s)} left" if progress.remaining_s is not None else ""
        if progress.remaining_s is None:
            return "time left: known once a round has finished on this computer"
        return f"round {100 * (progress.fraction or 0):.0f} % done, {eta.duration_words(progress.remaining_s)} left"


def volunteers(n: int) -> str:
    return "volunteer" if n == 1 else "volunteers"


def next_try(retry_at: float | None, now: float | None = None) -> str:
    """When the engine tries its relay again, in words: it retries at its next request after ``retry_at``."""
    if retry_at is None:
        return "trying again soon"
    wait = math.ceil(retry_at - (time.time() if now is None else now))
    return f"next try in {wait} s" if wait > 0 else "trying again at the next step"


_LEGACY_CONNECTED = re.compile(r"(?:re)?connected to relay (\S+), swarm .*, (\d+) peers? online")
_LEGACY_UNREACHABLE = re.compile(r"relay (\S+) unreachable \((.*)\).*; training on local groups, retrying.* in (\d+)s")


def legacy_link(status: ev.Status) -> ev.Relay | None:
    """An engine from before the ``relay`` event said its link in status lines (old event files still do):
    those lines as the event they stand for, None for any other line."""
    if m := _LEGACY_CONNECTED.fullmatch(status.message):
        return ev.Relay(state="connected", url=m[1], peers=int(m[2]), time=status.time)
    if m := _LEGACY_UNREACHABLE.fullmatch(status.message):
        reason = re.sub(r"^\[Errno -?\d+\] ", "", m[2])  # "[Errno 111] Connection refused": the words only
        return ev.Relay(state="unreachable", url=m[1], reason=reason[:1].lower() + reason[1:],
                        retry_at=status.time + int(m[3]), time=status.time)
    return None


def moving_average(values: list[float], window: int) -> list[float]:
    """Trailing mean over up to ``window`` values (shorter at the start), same length as ``values``."""
    if window < 1:
        raise ValueError("window must be >= 1")
    out, total = [], 0.0
    for i, v in enumerate(values):
        total += v
        if i >= window:
            total -= values[i - window]
        out.append(total / min(i + 1, window))
    return out
