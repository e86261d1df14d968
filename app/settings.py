"""The app's settings: what the wizard asks and the preferences dialog edits, kept as TOML.

Two files in the platform's config dir (``SAPO_CONFIG_DIR`` overrides it):
- ``node.toml``: the engine's settings (``NodeConfig`` field names, written by the engine's
  ``to_toml``: only what differs from its defaults), passed to
  ``sapo-engine run --config``, so a volunteer can also run the same node from a terminal;
- ``app.toml``: what only the app uses (idle, battery and schedule rules, swarm kind).
How many cores (``threads``) and how much of their CPU time (``cpu_limit``) are the engine's settings, in
``node.toml``, so a terminal run obeys them too.
Files are written whole to a temporary name and renamed, so a crash never leaves half a file.
"""

from __future__ import annotations

import dataclasses
import datetime as dt
import os
import tomllib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

import platformdirs
import tomli_w

from engine.config import NodeConfig, build_config, to_toml
from engine.errors import SapoError

SwarmKind = Literal["public", "private", "local", "offline"]
CPU_LIMITS = (25, 50, 75, 100)  # the tray's choices of "use at most N % of CPU time"; Preferences takes any
# No relay is assumed for "Join a swarm": the project runs no public relay yet, and a loopback default
# would have a volunteer "join" a swarm that is only ever on their own computer. The form asks instead.
RELAY_PLACEHOLDER = "wss://relay.example.org — the address from whoever runs the swarm"


def config_dir() -> Path:
    return Path(os.environ.get("SAPO_CONFIG_DIR") or platformdirs.user_config_dir("sapo-swarm", appauthor=False))


def default_data_dir() -> Path:
    """Where the engine keeps a node's data when no --data-dir is given (engine.paths, same rule)."""
    return Path(platformdirs.user_data_dir("sapo-swarm", appauthor=False))


def physical_cores() -> int:
    import psutil

    return psutil.cpu_count(logical=False) or os.cpu_count() or 1


def default_threads(physical_cores: int) -> int:
    """Half of the cores: the computer stays usable while it trains."""
    return max(1, physical_cores // 2)


def parse_hhmm(text: str, fallback: str) -> dt.time:
    try:
        return dt.datetime.strptime(text, "%H:%M").time()
    except (TypeError, ValueError):
        return dt.datetime.strptime(fallback, "%H:%M").time()


@dataclass
class AppSettings:
    setup_done: bool = False
    only_when_idle: bool = False
    idle_minutes: int = 5
    pause_on_battery: bool = True
    schedule_on: bool = False  # run only between schedule_start and schedule_end (local time, daily)
    schedule_start: str = "22:00"
    schedule_end: str = "07:00"
    busy_pause: bool = False  # pause while other programs use more than busy_percent of the CPU
    busy_percent: int = 25
    swarm_kind: SwarmKind = "offline"
    local_relay_port: int = 8765  # "a local swarm on this computer" listens here, on 127.0.0.1 only
    data_dir: str | None = None  # None: the engine's default
    start_at_login: bool = False  # in the tray, at each login (app/autostart.py keeps the desktop's entry in step)
    # --- the engine's part (NodeConfig fields) ---
    node: dict[str, Any] = field(default_factory=dict)

    @property
    def model(self) -> str | None:
        return self.node.get("model")

    def threads(self, physical_cores: int) -> int:
        """The cores the engine uses: the chosen number, else half of them."""
        return int(self.node.get("threads") or default_threads(physical_cores))

    @property
    def cpu_limit(self) -> int:
        return int(self.node.get("cpu_limit", 100))

    def schedule(self) -> tuple[dt.time, dt.time] | None:
        if not self.schedule_on:
            return None
        return parse_hhmm(self.schedule_start, "22:00"), parse_hhmm(self.schedule_end, "07:00")

    def node_config(self) -> NodeConfig:
        """The engine's settings, validated exactly as the engine will (a SapoError when wrong)."""
        return build_config(self.node, {})


def _write(path: Path, data: dict[str, Any]) -> None:
    _replace(path, tomli_w.dumps(data))


def _replace(path: Path, text: str) -> None:
    """Whole or not at all, power cut included: written aside, flushed to the disk, then renamed over."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, path)


def _clean(values: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}  # TOML has no null: absent means default


def node_path(directory: Path | None = None) -> Path:
    return (directory or config_dir()) / "node.toml"


def save(settings: AppSettings, directory: Path | None = None) -> None:
    directory = directory or config_dir()
    node = settings.node_config()  # never write a file the engine would refuse
    app = _clean({k: v for k, v in dataclasses.asdict(settings).items() if k != "node"})
    _write(directory / "app.toml", app)
    _replace(node_path(directory), to_toml(node))  # the engine's own writer: what differs from its defaults


def load(directory: Path | None = None) -> AppSettings:
    """The saved settings; defaults (setup not done) when there are none; SapoError when unreadable."""
    directory = directory or config_dir()
    values: dict[str, Any] = {}
    for name in ("app.toml", "node.toml"):
        path = directory / name
        try:
            with open(path, "rb") as fh:
                data = tomllib.load(fh)
        except FileNotFoundError:
            data = {}
        except (tomllib.TOMLDecodeError, OSError) as exc:
            raise SapoError(f"settings file {path} cannot be read ({exc}); fix or delete it") from None
        if name == "node.toml":
            values["node"] = data
        else:
            values |= data
    known = {f.name for f in dataclasses.fields(AppSettings)}
    return AppSettings(**{k: v for k, v in values.items() if k in known})  # (an old file's `power` preset: gone)
