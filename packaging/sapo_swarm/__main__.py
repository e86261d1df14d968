"""Entry point of the packaged app: Briefcase's launcher runs ``python -m sapo_swarm`` (also ``briefcase dev``).

An installed app has no ``python`` to call: its ``sys.executable`` is Briefcase's launcher, a small
program that always runs this module and hands it its arguments. The app starts its helpers as
``sys.executable -m engine ...`` and ``sys.executable -m relay ...``, so those forms must behave
here as they do under ``python``: ``-m NAME`` runs NAME as ``__main__`` with the remaining
arguments, for the project's own modules only. Anything else starts the desktop app.
Hand-written: Briefcase offers no way to run a second module through its launcher.
"""

from __future__ import annotations

import runpy
import sys
from typing import Sequence

# The modules this project runs as programs; nothing else may be named after -m.
MODULES = ("app", "engine", "relay")


def main(argv: Sequence[str]) -> int:
    if len(argv) >= 2 and argv[1] == "-m":
        if len(argv) < 3 or argv[2] not in MODULES:
            name = argv[2] if len(argv) >= 3 else ""
            print(f"sapo-swarm: error: -m runs one of {', '.join(MODULES)}, not {name!r}", file=sys.stderr)
            return 2
        sys.argv = [argv[0], *argv[3:]]  # as under `python -m NAME`; runpy sets argv[0] to the module's path
        runpy.run_module(argv[2], run_name="__main__", alter_sys=True)
        return 0  # the module returned without SystemExit: success, as under `python -m`
    from app.main import main as app_main

    return app_main(list(argv[1:]))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
