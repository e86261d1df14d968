"""``sapo-engine``: the headless node.

    sapo-engine run [--offline] [--rounds N] [--data-dir DIR] [--events FILE] [--config FILE] [flags]
    sapo-engine models
    sapo-engine export --data-dir DIR OUT
    sapo-engine verify [settings] GROUP.json

User errors print one line on stderr and exit 2; nothing else is printed as a traceback
unless it is a bug.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any, NoReturn, Sequence

from engine.config import add_setting_flags
from engine.errors import SapoError
from engine.paths import prepare_data_dir

PROG = "sapo-engine"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:  # one line, not a usage dump
        raise SapoError(f"{message} (see '{self.prog} --help')")


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from None


def build_parser() -> argparse.ArgumentParser:
    p = _Parser(prog=PROG, description="SAPO Swarm node: RL post-training of your own model, together with a swarm.")
    sub = p.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = sub.add_parser("run", help="train this node (resumes from its last checkpoint)")
    run.add_argument("--rounds", type=_int, default=0, help="stop once this many rounds are done in total (0 = run until stopped)")
    run.add_argument("--data-dir", type=Path, help="where identity, checkpoints and adapters live (default: the user data dir)")
    run.add_argument("--events", help="also write events as JSON lines to this file ('-' = stdout)")
    run.add_argument("--config", type=Path, help="TOML settings file; flags override it")
    run.add_argument("--quiet", action="store_true", help="no progress lines on the terminal")
    run.add_argument("--control", choices=["stdin"], help="read commands (pause, resume, stop, set_threads) as JSON lines")
    add_setting_flags(run)  # one flag per NodeConfig field, generated

    sub.add_parser("models", help="list the model catalog, what fits this machine, and the recommendation")

    exp = sub.add_parser("export", help="write the trained LoRA as a peft adapter and a llama.cpp GGUF adapter")
    exp.add_argument("--data-dir", type=Path)
    exp.add_argument("out", type=Path)

    ver = sub.add_parser("verify", help="judge one group (a publish frame's group, as JSON) as this node would")
    ver.add_argument("--config", type=Path, help="TOML settings file; flags override it")
    add_setting_flags(ver)
    ver.add_argument("group", type=Path, help="a JSON file holding one wire.protocol.Group")
    return p


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = build_parser().parse_args(argv)
        if args.command == "run":
            from engine.runner import run

            return run(args)
        if args.command == "models":
            from engine.hardware import detect, format_catalog

            print(format_catalog(detect()))
            return 0
        if args.command == "export":
            from engine.export import export

            export(prepare_data_dir(args.data_dir), args.out)
            return 0
        if args.command == "verify":
            from engine.verify_cmd import verify_file

            return verify_file(args)
        raise SapoError(f"unknown command {args.command!r}")
    except SapoError as exc:
        print(f"{PROG}: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"{PROG}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
