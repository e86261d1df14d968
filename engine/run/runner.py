"""``sapo-engine run``: settings -> model file -> node -> rounds, with events and clean stops."""

from __future__ import annotations

import argparse
import dataclasses
import os
import signal
import sys
import time
from pathlib import Path
from typing import Any, Callable

from engine.config import build_config, flag_settings, load_toml, resolve_auto
from engine.errors import SapoError
from engine.run.event_log import EventLog, terminal_printer
from engine.paths import default_cache_dir, default_threads, prepare_data_dir
from engine.sharing.keyfile import load_or_create
from engine.tasks.questions import build_mix
from wire import events as ev
from wire.identity import display_name


def resolve_model_file(choice: str | None, events: EventLog | None = None) -> tuple[Path, str]:
    """The GGUF the user asked for (catalog name, path, or the best fit), downloaded if needed.

    With no choice, a recommended model that is not downloaded yet while the Hub cannot be
    reached gives way to the bundled model at once (said in a status event): a first run
    without network trains instead of failing after huggingface_hub's retries.
    """
    from engine.models.catalog import bundled_entry
    from engine.models.download import cached_path, ensure_model, hub_reachable
    from engine.models.hardware import detect, resolve_model

    resolved = resolve_model(choice, detect())
    if resolved.path is not None:
        return Path(resolved.path), resolved.name
    if resolved.how == "recommended" and cached_path(resolved.entry) is None and not hub_reachable():
        fallback = bundled_entry()
        if events is not None:
            events.status(f"{resolved.entry.display_name} is recommended for this computer but is not downloaded "
                          f"and the model hub cannot be reached: using the bundled {fallback.display_name}")
        return Path(ensure_model(fallback)), fallback.name
    progress = _download_progress(events, resolved.entry.filename) if events is not None else True
    return Path(ensure_model(resolved.entry, progress=progress)), resolved.name


DOWNLOAD_EVENT_EVERY_S = 0.25


def _download_progress(events: EventLog, filename: str) -> Callable[[int, int | None], None]:
    """A download callback that emits ``download`` events, a few per second at most."""
    last = [0.0]

    def report(done: int, total: int | None) -> None:
        now = time.monotonic()
        finished = bool(total) and done >= (total or 0)
        if finished or now - last[0] >= DOWNLOAD_EVENT_EVERY_S:
            last[0] = now
            events.emit(ev.Download(file=filename, done_bytes=done, total_bytes=total or 0, finished=finished))

    return report


def run(args: argparse.Namespace) -> int:
    events = EventLog()
    if not args.quiet:
        events.add(terminal_printer(sys.stderr))
    if args.events == "-":
        events.add_jsonl(sys.stdout)
    elif args.events:
        events.add_jsonl(Path(args.events))

    try:
        return _run(args, events)
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
    cfg = build_config(file_values, flag_settings(args))
    data_dir = prepare_data_dir(args.data_dir)
    loaded = load_or_create(data_dir)  # before any download: a bad key is a one-line error, at once
    node_id = loaded.identity.node_id
    if cfg.relay:  # a bad URL is a config error even when --offline ignores it this time
        from engine.sharing.swarm_client import check_relay_urls, tls_context

        check_relay_urls(cfg.relay)
        if "wss://" in cfg.relay:
            tls_context(cfg.relay_ca_file)  # a missing or bad CA file: a one-line error now, not at the first round
    # Task settings are checked before the model is fetched: a typo should not cost a download.
    build_mix(cfg.preset or "paper", cfg.tasks, cfg.task_weights, cfg.task_config)  # "paper" stands in for auto

    from engine.models.hardware import tune_allocator
    from engine.models.modelfile import check_lora_targets, check_tokenizer, inspect_gguf
    from engine.models.working_copy import working_gguf

    tune_allocator()  # before any torch work: keeps a training step's peak RSS ~3x lower on glibc

    source, model_name = resolve_model_file(cfg.model, events)
    info = inspect_gguf(source)
    check_tokenizer(info)
    check_lora_targets(info.architecture, cfg.lora_targets)
    cfg = resolve_auto(cfg, info.n_params, default_threads())
    threads = cfg.threads
    cache_dir = default_cache_dir()
    model_path = working_gguf(source, cfg.weights, cache_dir / "models")

    from engine.run.node import Node

    if loaded.note:  # said once set-up has succeeded, so that a bad setting stays a one-line error
        events.status(loaded.note)
    swarm = None
    if cfg.relay and not cfg.offline:
        from engine.sharing.swarm_client import SwarmClient

        swarm = SwarmClient(cfg.relay, cfg.swarm, loaded.identity, model_name, cfg.token, on_status=events.status,
                            ca_file=cfg.relay_ca_file)
    elif not cfg.offline:
        events.status("no relay given (--relay ws://host:port): training alone")
    node = Node(cfg, model_path, model_name, node_id, events, threads, data_dir, info.architecture, cache_dir, swarm)
    stop = _StopFlag()
    control = None
    if args.control == "stdin":
        from engine.run.control import Control

        control = Control(events.emit)
        node.pause_point = control.wait_if_paused
        control.listen(sys.stdin)
    try:
        target = args.rounds or None
        events.emit(ev.Start(node_id=node_id, node_name=display_name(node_id), model=model_name,
                             model_path=str(model_path), round_start=node.round, round_end=target, threads=threads,
                             settings=_public(cfg)))
        events.emit(ev.StateChanged(state="running", round=node.round))
        while (target is None or node.round < target) and not stop.requested:
            if control is not None:
                control.wait_if_paused()
                if control.stop_requested:
                    stop.requested, stop.reason = True, "stop command"
                    break
                if control.threads:
                    node.set_threads(control.threads)
                    control.threads = None
            node.run_round()
            if control is not None and (target is None or node.round < target):
                control.round_done()  # a pending finish pauses here
        events.emit(ev.Stop(round=node.round, reason=stop.reason or "finished"))
    finally:
        node.close()
    return 0


def _public(cfg: Any) -> dict[str, Any]:
    """Settings for the start event, secrets left out."""
    values = dataclasses.asdict(cfg)
    values.pop("token", None)
    values.pop("model", None)  # the start event names the resolved model instead
    return values


class _StopFlag:
    """SIGTERM/SIGINT end the run after the round in flight, so nothing is half-written."""

    def __init__(self) -> None:
        self.requested = False
        self.reason = ""
        self.signum = 0
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)

    def _on_signal(self, signum: int, frame: object) -> None:
        if self.requested:  # second signal: stop now
            raise KeyboardInterrupt
        self.requested, self.signum = True, signum
        self.reason = f"signal {signal.Signals(signum).name}"
        print(f"stopping after this round ({self.reason}); send again to stop now", file=sys.stderr, flush=True)
