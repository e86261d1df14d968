"""Where a node keeps things, and how many threads it uses by default."""

from __future__ import annotations

import os
from pathlib import Path

from engine.errors import SapoError


def default_data_dir() -> Path:
    """Identity, checkpoints, the live adapter: the platform's user data dir."""
    import platformdirs

    return Path(platformdirs.user_data_dir("sapo-swarm", appauthor=False))


def default_cache_dir() -> Path:
    """Derived files (requantized GGUFs, dequantized torch weights): safe to delete, slow to remake."""
    import platformdirs

    return Path(os.environ.get("SAPO_CACHE_DIR") or platformdirs.user_cache_dir("sapo-swarm", appauthor=False))


def path_arg(text: str) -> Path:
    """argparse's type for a path. An empty one is refused: ``Path("")`` is the working directory, where an unset
    shell variable would put a node's identity or an experiment's records."""
    import argparse

    if not text.strip():
        raise argparse.ArgumentTypeError("expected a path, got ''")
    return Path(text)


def prepare_data_dir(path: Path | None) -> Path:
    """The data dir, created and checked writable (a one-line error otherwise)."""
    data_dir = (path or default_data_dir()).expanduser()
    try:
        data_dir.mkdir(parents=True, exist_ok=True)
        probe = data_dir / ".write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise SapoError(f"data dir {data_dir} is not writable: {exc.strerror or exc}") from None
    return data_dir


def default_threads() -> int:
    import psutil

    return psutil.cpu_count(logical=False) or os.cpu_count() or 1
