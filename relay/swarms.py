"""``sapo-relay --swarms FILE.toml``: the swarms a relay serves, each with its manifest (``wire.manifest``).

Read and checked once, at start: any problem is one ``ValueError`` line naming the swarm and the field, and
``sapo-relay`` exits 2 before it listens. A file looks like::

    [swarms.arithmetic]
    description = "Small sums for small models"
    public = true                       # listed on GET /swarms; false: private, needs `token`
    completions = 4                     # L
    max_tokens = 96
    format_bonus = 0.1
    models = ["smollm2-135m", "gemma-3-270m"]

    [swarms.arithmetic.tasks.basic_arithmetic]
    weight = 2.0
    config = { min_terms = 2, max_terms = 2, operators = ["+", "-"] }
    ranges = { max_digits = [1, 2] }    # each node picks its own value inside

    [swarms.arithmetic.tasks.chain_sum]
    levels = [0, 2]                     # frontier levels each node moves within

Settings are checked against the size caps (``wire.task_caps``) always, and against reasoning-gym itself
(unknown datasets, settings it rejects) where it is installed; the relay-only image does not carry it, so
there the relay says so once and the nodes, which always have it, check on join. Tokens stay here: a
manifest never carries one.

With ``--manifest-key FILE`` (relay/manifest_key.py) the relay signs each manifest once at start (``sign_swarms``):
the welcome and ``GET /swarms`` carry the signer, so a node that pins it follows only rules its operator signed.
"""

from __future__ import annotations

import importlib
import re
import tomllib
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import msgspec

from wire.identity import Identity
from wire.manifest import Manifest, manifest_digest, manifest_problem, sign_manifest
from wire.protocol import KeyHandover, swarm_name_problem

MAX_SWARMS_IN_FILE = 256
_SWARM_KEYS = {"description", "public", "token", "completions", "max_tokens", "format_bonus", "models", "tasks"}


@dataclass(frozen=True)
class SwarmEntry:
    """One declared swarm: its manifest, digest, (private swarms) token and, where signed, signer and signature."""

    manifest: Manifest
    digest: str
    token: str | None = None
    signer: bytes | None = None  # the manifest key's raw public key (``sign_swarms``)
    signature: bytes | None = None
    handovers: tuple[KeyHandover, ...] = ()  # from the operator's earlier keys to ``signer`` (relay/manifest_key.py)


def load_swarms(path: Path, relay_token: str | None = None) -> tuple[dict[str, SwarmEntry], list[str]]:
    """The swarms of a manifest file, and notes to log (e.g. reasoning-gym not installed); ValueError on any problem."""
    try:
        with open(path, "rb") as fh:
            data = tomllib.load(fh)
    except FileNotFoundError:
        raise ValueError(f"--swarms {path}: file not found") from None
    except tomllib.TOMLDecodeError as exc:
        raise ValueError(f"--swarms {path}: not valid TOML ({exc})") from None
    except OSError as exc:
        raise ValueError(f"--swarms {path}: cannot read it ({exc.strerror})") from None
    unknown = set(data) - {"swarms"}
    if unknown:
        raise ValueError(f"--swarms {path}: unknown table {sorted(unknown)[0]!r} (swarms are [swarms.NAME])")
    swarms = data.get("swarms")
    if not isinstance(swarms, dict) or not swarms:
        raise ValueError(f"--swarms {path}: declares no swarm ([swarms.NAME])")
    if len(swarms) > MAX_SWARMS_IN_FILE:
        raise ValueError(f"--swarms {path}: more than {MAX_SWARMS_IN_FILE} swarms")
    rg = _reasoning_gym()
    out = {name: _entry(name, table, relay_token, rg) for name, table in swarms.items()}
    notes = [] if rg is not None else ["reasoning-gym is not installed here: swarm settings checked against the size "
                                       "caps only (each node checks them with reasoning-gym when it joins)"]
    return out, notes


def sign_swarms(swarms: dict[str, SwarmEntry], key: Identity,
                handovers: tuple[KeyHandover, ...] = ()) -> dict[str, SwarmEntry]:
    """Each swarm with its manifest signed by ``key`` (``wire.manifest.sign_manifest``), and the handovers from the
    operator's earlier keys to it: done once, at start."""
    return {name: replace(entry, signer=key.public_key, signature=sign_manifest(key, entry.manifest),
                          handovers=handovers) for name, entry in swarms.items()}


def _entry(name: str, table: Any, relay_token: str | None, rg: Any) -> SwarmEntry:
    def fail(field: str, why: str) -> ValueError:
        return ValueError(f"swarm {name!r}: {field}: {why}")

    if (problem := swarm_name_problem(name)) is not None:
        raise ValueError(f"swarm {name!r}: {problem}")
    if not isinstance(table, dict):
        raise fail("table", "must be a table of settings")
    if extra := set(table) - _SWARM_KEYS:
        raise fail(sorted(extra)[0], f"unknown field (fields: {', '.join(sorted(_SWARM_KEYS))})")
    tasks = table.get("tasks")
    if not isinstance(tasks, dict) or not tasks:
        raise fail("tasks", "lists no task ([swarms.NAME.tasks.DATASET])")
    token = table.get("token")
    if token is not None and (not isinstance(token, str) or not 1 <= len(token) <= 256):
        raise fail("token", "must be text of 1..256 characters")
    public = table.get("public", True)
    if public is False and token is None and relay_token is None:
        raise fail("token", "a private swarm (public = false) needs a token (or the relay's --token)")
    raw = {k: v for k, v in table.items() if k not in ("token", "tasks")}
    raw["swarm"] = name
    raw["tasks"] = [{"dataset": dataset, **(t if isinstance(t, dict) else {"weight": t})}
                    for dataset, t in tasks.items()]
    try:
        manifest = msgspec.convert(raw, Manifest)
    except msgspec.ValidationError as exc:
        raise fail(_field(str(exc), raw), str(exc).split(" - at ")[0]) from None
    except ValueError as exc:  # __post_init__: one line naming the task
        raise fail("tasks", str(exc)) from None
    if (problem := manifest_problem(manifest)) is not None:
        raise ValueError(f"swarm {name!r}: {problem}")
    if rg is not None:
        _check_with_reasoning_gym(name, manifest, rg)
    return SwarmEntry(manifest, manifest_digest(manifest), token)


def _field(message: str, raw: dict[str, Any]) -> str:
    """``$.tasks[1].ranges`` -> ``tasks.<dataset>.ranges``: the field as the operator wrote it."""
    _, at, path = message.rpartition(" - at `$.")
    if not at:  # at the top: "Object missing required field `completions`" names no path
        missing = re.search(r"missing required field `([^`]+)`", message)
        return missing.group(1) if missing else "manifest"
    path = path.rstrip("`")
    if path.startswith("tasks[") and "]" in path:
        index, _, rest = path[6:].partition("]")
        try:
            dataset = raw["tasks"][int(index)]["dataset"]
        except (ValueError, IndexError, KeyError, TypeError):
            return path
        return f"tasks.{dataset}{rest}"
    return path or "manifest"


def _reasoning_gym() -> Any:
    """reasoning-gym where installed (not in the relay-only image: imported by name, so nothing requires it)."""
    try:
        return importlib.import_module("reasoning_gym")
    except ImportError:
        return None


def _check_with_reasoning_gym(name: str, manifest: Manifest, rg: Any) -> None:
    known = set(rg.factory.DATASETS)
    for task in manifest.tasks:
        if task.dataset not in known:
            raise ValueError(f"swarm {name!r}: tasks.{task.dataset}: unknown to reasoning-gym")
        for end in (0, 1):
            config = task.config_at({k: r[end] for k, r in task.ranges.items()})
            try:  # some settings pass the constructor and fail only when a question is made
                rg.create_dataset(task.dataset, seed=0, size=1, **config)[0]
            except Exception as exc:  # noqa: BLE001 - reasoning-gym raises assorted types
                where = "config" if not task.ranges else f"ranges at their {('low', 'high')[end]} ends"
                raise ValueError(f"swarm {name!r}: tasks.{task.dataset}.{where}: reasoning-gym rejects "
                                 f"{config}: {str(exc).splitlines()[0][:120] if str(exc) else type(exc).__name__}"
                                 ) from None
