"""``sapo-engine run``: settings -> model file -> node -> rounds, with events and clean stops."""

from __future__ import annotations

import argparse
import dataclasses
import errno
import signal
import threading
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, Sequence

from engine.config import build_config, flag_settings, load_toml
from engine.errors import SapoError
from engine.locks import holder, try_lock
from engine.run.event_log import EventLog, claim_stdout, terminal_printer
from engine.run.history import HistoryFile
from engine.run.hold import Hold, rules_of
from engine.run.throttle import Throttle
from engine.models.prepare import prepare_model
from engine.paths import prepare_data_dir
from engine.sharing.keyfile import load_or_create
from wire import events as ev
from wire.invite import InviteError, parse_invite
from wire.identity import display_name
from wire.manifest import mix_summary

if TYPE_CHECKING:  # imported where used: the model's libraries load after the settings are checked
    from engine.tasks.questions import TaskEntry
    from engine.tasks.swarm_mix import SwarmMix


def run(args: argparse.Namespace) -> int:
    events = EventLog()
    if not args.quiet:
        events.add(terminal_printer(sys.stderr))
    if args.events == "-":
        events.add_jsonl(claim_stdout())  # events only: whatever else writes to stdout goes to stderr
    elif args.events:
        path = Path(args.events)
        try:
            path.parent.mkdir(parents=True, exist_ok=True)  # as --data-dir is made
            events.add_jsonl(path)
        except OSError as exc:
            raise SapoError(f"cannot write events to {path}: {exc.strerror or exc}") from None

    try:
        try:
            return _run(args, events)
        except OSError as exc:  # a full disk is the volunteer's to fix, not a bug
            if exc.errno not in (errno.ENOSPC, errno.EDQUOT):
                raise
            raise SapoError(f"the disk is full: could not write {exc.filename or 'a file'} ({exc.strerror}); free "
                            f"some space and start again: training goes on from the last checkpoint") from exc
    except SapoError as exc:
        events.emit(ev.ErrorEvent(message=str(exc), kind="user"))  # the GUI shows this line
        raise
    except Exception as exc:
        events.emit(ev.ErrorEvent(message=f"internal error: {type(exc).__name__}: {exc}"[:300], kind="bug"))
        raise
    finally:
        events.close()


def _run(args: argparse.Namespace, events: EventLog) -> int:
    if args.rounds < 0:
        raise SapoError(f"--rounds must be >= 0, got {args.rounds}")
    file_values = load_toml(args.config) if args.config else {}
    link = getattr(args, "join", None)
    if link is not None and getattr(args, "offline", False):
        raise SapoError("--join and --offline contradict each other: an invite link is for joining a swarm")
    cfg = build_config(file_values, {**invite_settings(link), **flag_settings(args)})
    data_dir = prepare_data_dir(args.data_dir)
    # Held until this function returns (or the process ends): two nodes on one folder would overwrite each
    # other's checkpoints and adapters
    lock = try_lock(data_dir / "node.lock")
    if lock is None:
        pid = holder(data_dir / "node.lock")
        raise SapoError(f"another node{f' (process {pid})' if pid else ''} is already running on {data_dir}: "
                        f"stop it first, or give this one its own --data-dir")
    loaded = load_or_create(data_dir)  # before any download: a bad key is a one-line error, at once
    node_id = loaded.identity.node_id
    if cfg.relay:  # a bad URL is a config error even when --offline ignores it this time
        from engine.sharing.swarm_client import check_relay_urls, tls_context

        check_relay_urls(cfg.relay)
        if "wss://" in cfg.relay:
            tls_context(cfg.relay_ca_file)  # a missing or bad CA file: a one-line error now, not at the first round

    from engine.models.hardware import tune_allocator
    from engine.run.priority import apply_priority

    apply_priority(cfg.priority)  # before llama.cpp's and torch's threads start: they inherit it

    tune_allocator()  # before any torch work: keeps a training step's peak RSS ~3x lower on glibc
    model = prepare_model(cfg, events)  # task settings first: a typo should not cost a download
    cfg = model.cfg

    from engine.run.node import Node

    if loaded.note:  # said once set-up has succeeded, so that a bad setting stays a one-line error
        events.status(loaded.note)
    swarm = None
    if cfg.relay and not cfg.offline:
        from engine.sharing.swarm_client import SwarmClient

        swarm = SwarmClient(cfg.relay, cfg.swarm, loaded.identity, model.name, cfg.token, on_status=events.status,
                            ca_file=cfg.relay_ca_file, on_link=events.emit, on_manifest=events.emit,
                            ca_sha256=cfg.relay_ca_sha256)
    elif not cfg.offline:
        events.status("no relay given (--relay ws://host:port): training alone")
    mix = None
    if swarm is not None:  # the swarm's manifest, where its relay declares one (engine/run/joining.py)
        from engine.run.joining import join

        cfg, mix = join(swarm, cfg, data_dir, events)
    node = Node(cfg, model, node_id, events, data_dir, swarm, swarm_mix=mix)
    throttle = Throttle(cfg.cpu_limit, cfg.threads or 1)
    node.phases.on_step = throttle.tick  # the CPU-time limit sleeps between steps
    rules = rules_of(cfg.schedule, cfg.pause_on_battery, cfg.max_other_cpu)
    hold = Hold(rules, events.emit) if rules is not None and args.control != "stdin" else None
    stop = _StopFlag(throttle, hold.wake if hold is not None else None)
    control = None
    if args.control == "stdin":
        from engine.run.ask import Trial
        from engine.run.control import Control

        control = Control(events.emit, throttle)
        control.serve = Trial(node).answer  # "try your model": answered at the loop's pause points
        node.pause_point = control.wait_if_paused
        control.listen(sys.stdin)
    try:
        target = args.rounds or None
        events.emit(ev.Start(node_id=node_id, node_name=display_name(node_id), model=model.name,
                             model_path=str(model.path), round_start=node.round, round_end=target, threads=cfg.threads,
                             settings=_public(cfg), mix=mix_words(node.mix, mix),
                             manifest=mix.digest if mix is not None else "", task_mix=[e.dataset for e in node.mix],
                             **_placement(node.backbone.placement)))
        history = HistoryFile(node.checkpoints.root)  # the model's own past, beside its checkpoints
        events.emit(history.load(node.round))  # the rounds before this start: the app rebuilds its charts from them
        events.add(history.record)
        events.emit(ev.StateChanged(state="running", round=node.round))
        if rules is not None and hold is None:  # the app pauses and resumes by its own Preferences
            events.status("schedule, pause_on_battery and max_other_cpu (node.toml) are left to the app's "
                          "Preferences here")
        threads = cfg.threads
        while (target is None or node.round < target) and not stop.requested:
            if control is not None:
                control.wait_if_paused()
                if control.stop_requested:
                    stop.requested, stop.reason = True, "stop command"
                    break
                if control.threads:
                    node.set_threads(control.threads)
                    threads, control.threads = control.threads, None
                    throttle.set_limit(throttle.percent, threads)
            if hold is not None and hold.wait(node.round, lambda: stop.requested) and stop.requested:
                break
            metrics = node.run_round()
            if throttle.percent >= 100:  # a throttled round's time says nothing of this computer's speed
                _refine_estimate(threads, model, cfg, metrics)
            if control is not None and (target is None or node.round < target):
                control.round_done()  # a pending finish pauses here
        events.emit(ev.Stop(round=node.round, reason=stop.reason or "finished"))
    finally:
        node.close()
        lock.close()  # the next node on this folder may start
    return 0


def invite_settings(link: str | None) -> dict[str, Any]:
    """The settings an invite link (wire/invite.py) carries; a one-line SapoError for a bad link."""
    if link is None:
        return {}
    try:
        invite = parse_invite(link)  # an empty link too: `--join "$LINK"` with LINK unset is a mistake, not "alone"
    except InviteError as exc:
        raise SapoError(f"invite link: {exc}") from None
    values: dict[str, Any] = {"relay": ",".join(invite.relays), "swarm": invite.swarm, "offline": False}
    for name, value in (("token", invite.token), ("relay_ca_sha256", invite.ca_sha256),
                        ("manifest_digest", invite.manifest_digest), ("manifest_signer", invite.manifest_signer)):
        if value is not None:
            values[name] = value
    return values


def mix_words(entries: Sequence[TaskEntry], followed: SwarmMix | None) -> list[str]:
    """The mix for the start event: a followed manifest's in its short words, else the node's own entries."""
    if followed is not None:
        return mix_summary(followed.manifest)
    return [e.dataset + (f" x{e.weight:g}" if e.weight != 1.0 else "") for e in entries]


def _refine_estimate(threads: int, model: Any, cfg: Any, metrics: dict[str, Any]) -> None:
    """Real rounds of the default size replace the models report's round-time estimate (engine/models/speed.py);
    never fatal."""
    from engine.models.speed import estimated_shape, record_round
    from engine.paths import default_cache_dir

    if not estimated_shape(cfg.completions, cfg.max_tokens, cfg.local_groups + cfg.external_groups, model.n_params):
        return
    try:
        record_round(default_cache_dir(), threads, model.name, model.n_params, metrics)
    except (OSError, ValueError, KeyError):
        pass  # an estimate is a convenience: a read-only cache dir costs nothing but a better one


def _public(cfg: Any) -> dict[str, Any]:
    """Settings for the start event, secrets left out."""
    values = dataclasses.asdict(cfg)
    values.pop("token", None)
    values.pop("model", None)  # the start event names the resolved model instead
    return values


def _placement(p: Any) -> dict[str, str]:
    """The start event's fields on where the node computes (engine.models.accel.Placement)."""
    if p is None:
        return {}
    return {"trains_on": p.trains_on, "samples_on": p.samples_on, "accel_fix": p.fix}


class _StopFlag:
    """SIGTERM/SIGINT end the run after the round in flight, so nothing is half-written."""

    def __init__(self, throttle: Throttle, wake: threading.Event | None = None) -> None:
        self._throttle = throttle
        self._wake = wake  # a wait for the computing rules (engine/run/hold.py) ends at once
        self.requested = False
        self.reason = ""
        self.signum = 0
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: object) -> None:
        if self.requested:  # second signal: stop now
            raise KeyboardInterrupt
        self.requested, self.signum = True, signum
        self._throttle.stop()  # no sleeping through the round's rest
        if self._wake is not None:
            self._wake.set()
        self.reason = f"signal {signal.Signals(signum).name}"
        print(f"stopping after this round ({self.reason}); send again to stop now", file=sys.stderr, flush=True)
