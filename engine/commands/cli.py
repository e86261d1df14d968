"""``sapo-engine``: the headless node.

    sapo-engine run [--offline] [--rounds N] [--data-dir DIR] [--events FILE] [--config FILE] [flags]
    sapo-engine models [--json] [--measure]
    sapo-engine download MODEL [--events -]
    sapo-engine identity [--data-dir DIR] [--json]
    sapo-engine export --data-dir DIR OUT
    sapo-engine verify [settings] GROUP.json
    sapo-engine baseline [--preset P] [--tasks a,b] [--weights F,..] [--prompts P,..] [--per-task N] [--json]
    sapo-engine experiment [--quick] --out DIR [--agents N] [--rounds R] [--seeds S,..] [--configs C,..] [settings]
    sapo-engine experiment report RUN_DIR... [--plot FILE] [--seeds S,..] [--against CONFIG]

User errors print one line on stderr and exit 2; nothing else is printed as a traceback
unless it is a bug.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import NoReturn, Sequence

from engine.config import add_setting_flags
from engine.errors import SapoError
from engine.paths import path_arg, prepare_data_dir

PROG = "sapo-engine"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, not a usage dump
        raise SapoError(f"{message} (see '{self.prog} --help')")


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def _seed_list(text: str) -> set[int]:
    try:
        seeds = {int(s) for s in text.split(",") if s.strip()}
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected comma-separated whole numbers, got {text!r}") from None
    if not seeds:
        raise argparse.ArgumentTypeError("expected at least one seed")
    return seeds


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="SAPO Swarm node: RL post-training of your own model, together with a swarm.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = sub.add_parser("run", help="train this node (resumes from its last checkpoint)")
    run.add_argument("--rounds", type=_int, default=0, help="stop once this many rounds are done in total (0 = run until stopped)")
    run.add_argument("--data-dir", type=path_arg, help="where identity, checkpoints and adapters live (default: the user data dir)")
    run.add_argument("--events", help="also write events as JSON lines to this file ('-' = stdout)")
    run.add_argument("--config", type=path_arg, help="TOML settings file; flags override it")
    run.add_argument("--quiet", action="store_true", help="no progress lines on the terminal")
    run.add_argument("--control", choices=["stdin"], help="read commands (pause, resume, stop, set_threads) as JSON lines")
    run.add_argument("--join", metavar="LINK", help="join a swarm by its invite link (sapo-swarm://join?... or its https "
                                                    "form): relay, swarm, token, certificate, manifest digest; "
                                                    "flags given as well win")
    add_setting_flags(run)  # one flag per NodeConfig field, generated

    models = sub.add_parser("models", help="list the model catalog, what fits this machine, and the recommendation")
    models.add_argument("--json", action="store_true", help="one JSON object (wire/models.py) instead of a table")
    models.add_argument("--measure", action="store_true",
                        help="time the bundled model here first (once; cached) to estimate each model's round time")
    models.add_argument("--threads", type=_int, help="threads the measurement uses (default: physical cores)")

    dl = sub.add_parser("download", help="fetch a catalog model into the local cache (with --events -: progress events)")
    dl.add_argument("model", help="catalog name (see 'sapo-engine models')")
    dl.add_argument("--events", choices=["-"], help="write download events as JSON lines on stdout")

    ident = sub.add_parser("identity", help="this node's id and name (made on first use)")
    ident.add_argument("--data-dir", type=path_arg)
    ident.add_argument("--json", action="store_true", help="one JSON object (wire/models.py NodeIdentity)")

    exp = sub.add_parser("export", help="write the trained LoRA as a peft adapter and a llama.cpp GGUF adapter")
    exp.add_argument("--data-dir", type=path_arg)
    exp.add_argument("--model", help="whose LoRA, when the data dir trained several models (default: the latest trained)")
    exp.add_argument("out", type=path_arg)

    ver = sub.add_parser("verify", help="judge one group (a publish frame's group, as JSON) as this node would")
    ver.add_argument("--config", type=path_arg, help="TOML settings file; flags override it")
    add_setting_flags(ver)
    ver.add_argument("group", type=path_arg, help="a JSON file holding one wire.protocol.Group")

    base = sub.add_parser("baseline", help="where RL starts: per task, greedy and sampled accuracy of the base "
                                           "model on the held-out set (weight formats, prompt styles side by side)")
    from engine.commands.baseline import add_arguments as baseline_arguments

    baseline_arguments(base, _int)

    xp = sub.add_parser("experiment", help="N agents on this machine through a local relay: does sharing pay?")
    from engine.lab.experiment import add_arguments

    add_arguments(xp)
    add_setting_flags(xp)  # settings common to every configuration (e.g. --local 4 --external 4)
    xsub = xp.add_subparsers(dest="experiment_command", parser_class=_Parser)
    rep = xsub.add_parser("report", help="the paper-style table and reward plot of experiment runs")
    rep.add_argument("dirs", type=path_arg, nargs="+",
                     help="run directories (--out of experiment); a configuration whose settings differ from the "
                          "first run's is named by the difference, e.g. 'alone [learning_rate 0.0002]'")
    rep.add_argument("--plot", type=path_arg, help="where to write the plot (default: RUN_DIR/reward.png when the report reads one whole run; else none)")
    rep.add_argument("--window", type=int, default=5, help="moving-average window in rounds")
    rep.add_argument("--seeds", type=_seed_list, help="comma-separated seeds to report (default: all)")
    rep.add_argument("--against", metavar="CONFIG",
                     help="also pair every configuration with this one (e.g. a variant with swarm+useful+fill)")
    return p


def _models(args: argparse.Namespace) -> int:
    from engine.models.hardware import detect, format_catalog

    from engine.models.accel import describe, placement

    hw = detect()
    where = placement()  # the default settings' device and offload: auto
    if not args.json and not args.measure:
        print(format_catalog(hw))
        print(f"Every model here {describe(where)}")
        return 0
    from engine.commands.models import build_report, speed_for
    from engine.paths import default_cache_dir, default_threads
    from wire.models import encode_report

    speed = speed_for(default_cache_dir(), args.threads or default_threads(), args.measure)
    report = build_report(hw, speed, placement=where)
    if args.json:
        print(encode_report(report).decode())
    else:
        print(format_catalog(hw))
        print(f"Every model here {describe(where)}")
        print("\nExpected time of one round here (scaled from the bundled model's measured speed):")
        for m in report.models:
            print(f"  {m.name:<14} {m.round_s:>8.0f} s")
        print(f"recommended with speed weighed in: {report.recommended} ({report.reason})")
    return 0


def _download(args: argparse.Namespace) -> int:
    from engine.models.catalog import by_name
    from engine.models.download import ensure_model
    from engine.models.prepare import download_progress
    from engine.run.event_log import EventLog, claim_stdout
    from wire import events as ev

    entry = by_name(args.model)
    if entry is None:
        raise SapoError(f"unknown model {args.model!r} (`sapo-engine models` lists the catalog)")
    events = EventLog()
    if args.events == "-":
        events.add_jsonl(claim_stdout())  # events only: whatever else writes to stdout goes to stderr
    try:
        path = ensure_model(entry, progress=download_progress(events, entry.filename) if args.events else True)
    except SapoError as exc:
        events.emit(ev.ErrorEvent(message=str(exc)))
        raise
    events.emit(ev.Status(message=f"{entry.display_name} is at {path}"))
    if not args.events:
        print(path)
    return 0


def _identity(args: argparse.Namespace) -> int:
    import msgspec

    from engine.sharing.keyfile import load_or_create
    from wire.identity import display_name
    from wire.models import NodeIdentity

    node_id = load_or_create(prepare_data_dir(args.data_dir)).identity.node_id
    ident = NodeIdentity(node_id, display_name(node_id))
    print(msgspec.json.encode(ident).decode() if args.json else f"{ident.node_name} ({ident.node_id})")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    if argv is None:  # the real command line (not a test calling main): question texts must not depend on the process
        from engine.tasks.hashseed import restart_with_fixed_seed

        restart_with_fixed_seed(sys.argv[1:])
    try:
        args = build_parser().parse_args(argv)
        if args.command == "run":
            from engine.run.runner import run

            return run(args)
        if args.command == "models":
            return _models(args)
        if args.command == "download":
            return _download(args)
        if args.command == "identity":
            return _identity(args)
        if args.command == "export":
            from engine.commands.export import export

            export(prepare_data_dir(args.data_dir), args.out, args.model)
            return 0
        if args.command == "verify":
            from engine.commands.verify import verify_file

            return verify_file(args)
        if args.command == "baseline":
            from engine.commands.baseline import run as run_baseline

            return run_baseline(args)
        if args.command == "experiment":
            if args.experiment_command == "report":
                from engine.lab.report import report

                print(report(args.dirs, args.plot, args.window, args.seeds, args.against), end="")
                return 0
            from engine.lab.experiment import run as run_experiment

            return run_experiment(args)
        raise SapoError(f"unknown command {args.command!r}")
    except SapoError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
