"""Checkpoints: everything a node needs to resume, written so a kill can never corrupt one.

Layout in ``<data dir>/checkpoints/<model>/`` (each model its own folder, so a volunteer who switches
to another model and back finds the first one's training where it was)::

    round-000012/
        adapter_model.safetensors, adapter_config.json   # the LoRA, as plain peft saves it
        optimizer.pt                                      # AdamW state
        state.json                                        # round, question stream, history, config
        MANIFEST.json                                     # sha256 of every file above, written last
    LATEST                                                # name of the newest complete checkpoint
    events.jsonl, events.1.jsonl                          # the model's rounds, for the app (engine/run/history.py)

A checkpoint is built in a temporary folder, fsynced, renamed into place, and only then
named in LATEST (itself replaced atomically). A kill at any moment leaves either the old
or the new checkpoint current, never a mix; leftovers are swept on the next save. On load
every file is checked against the manifest, so a damaged checkpoint is never used: a node sets it
aside as ``damaged-round-NNNNNN/`` (kept for a look, never pruned) and resumes from the newest one
that verifies (``resume_point``), as a volunteer would expect of a failing disk or a sync tool; only
a checkpoint written by a different format is an error.
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import re
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from engine.errors import SapoError, first_line

KEEP = 2  # complete checkpoints kept; older ones are pruned
NEEDS_FREE_MB = 256  # below this much free space a failed write is read as a full disk (torch does not say ENOSPC)
LORA_FILES = ("adapter_model.safetensors", "adapter_config.json")
HISTORY_FILES = ("events.jsonl", "events.1.jsonl")  # engine/run/history.py's, kept beside a model's checkpoints
DAMAGED = "damaged-"  # prefix of a damaged checkpoint set aside: outside the round-* pattern, so never pruned


class CheckpointDamaged(SapoError):
    """A checkpoint's files no longer match its manifest (or the manifest is unreadable): damaged after it was
    written, since every write is fsynced and renamed into place."""

    def __init__(self, why: str, path: Path) -> None:
        super().__init__(f"{why}: {path}")
        self.why = why


@dataclass
class NodeState:
    round: int = 0
    stream: dict[str, Any] = field(default_factory=dict)  # engine.tasks.questions.StreamState as a dict
    extra_stream: dict[str, Any] = field(default_factory=dict)  # the same, of the "extra" lane
    history: list[dict[str, Any]] = field(default_factory=list)  # one summary per round / eval
    config: dict[str, Any] = field(default_factory=dict)
    model: str = ""
    # A followed manifest's tasks this node's model never got right (engine/tasks/held_back.py): {"digest": the
    # manifest's, "tasks": {task: Tally as a dict}}; empty without a manifest
    held_back: dict[str, Any] = field(default_factory=dict)


def lora_digest(tensors: dict[str, torch.Tensor]) -> str:
    """A short fingerprint of LoRA weights as peft saves them: shows which weights a node runs."""
    h = hashlib.sha256()
    for name in sorted(tensors):
        h.update(name.encode())
        h.update(tensors[name].detach().to(torch.float32).cpu().contiguous().numpy().tobytes())
    return h.hexdigest()[:16]


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


class CheckpointStore:
    def __init__(self, root: Path) -> None:
        self.root = root

    def latest(self) -> Path | None:
        name = self._pointer()
        if name is None:
            return None
        path = self.root / name
        if not name.startswith("round-") or not path.is_dir():
            raise SapoError(f"checkpoint pointer {self.root / 'LATEST'} names a missing checkpoint {name!r}; "
                            f"restore the folder, or move {self.root} away to start over")
        return path

    def _pointer(self) -> str | None:
        try:
            return (self.root / "LATEST").read_text().strip()
        except FileNotFoundError:
            return None

    def resume_point(self, set_aside: bool = True) -> tuple[Path | None, list[str]]:
        """The newest checkpoint that verifies, and one line for each damaged one passed over on the way.

        Candidates are the complete checkpoints up to the one LATEST names (a newer folder is a save killed
        before LATEST moved: not current), all of them if LATEST is gone. With ``set_aside`` (a node, which holds
        the data dir's lock) a damaged one is renamed ``damaged-<name>`` and LATEST is pointed at the one found;
        without it (``export``, beside a running node) nothing on disk changes. None with no lines: nothing
        to resume. A pointer to a folder that is gone, with no older one, stays an error: the volunteer may be
        about to put it back."""
        named = self._pointer()
        rounds = sorted((p for p in self.root.glob("round-*") if p.is_dir()), reverse=True)
        if named is not None and named.startswith("round-"):
            rounds = [p for p in rounds if p.name <= named]
        if named is not None and not rounds:
            self.latest()  # raises: names a folder that is gone (or was never a checkpoint)
        passed = [f"checkpoint {named}, the newest, is gone"] if named and not (self.root / named).is_dir() else []
        for path in rounds:
            try:
                self.verify(path)
            except CheckpointDamaged as exc:
                where = self._set_aside(path) if set_aside else path
                passed.append(f"{exc.why}; {'set aside as ' + where.name if set_aside else 'passed over'}")
                continue
            if set_aside and named != path.name:
                self._point_at(path.name)
            return path, passed
        if set_aside and named is not None:
            (self.root / "LATEST").unlink()  # every checkpoint was damaged: the next save starts the line again
        return None, passed

    def _set_aside(self, path: Path) -> Path:
        aside = path.with_name(DAMAGED + path.name)
        shutil.rmtree(aside, ignore_errors=True)  # the same round damaged before: one copy is enough to look at
        os.replace(path, aside)
        return aside

    def _point_at(self, name: str) -> None:
        pointer_tmp = self.root / f".LATEST.tmp{os.getpid()}"
        pointer_tmp.write_text(name + "\n")
        os.replace(pointer_tmp, self.root / "LATEST")
        _fsync_dir(self.root)

    def save(self, model: Any, optimizer: torch.optim.Optimizer, state: NodeState) -> Path:
        self.root.mkdir(parents=True, exist_ok=True)
        # A killed save's leftovers, swept first: they would otherwise hold the space this one needs. One node
        # runs on a data dir at a time (its lock, engine/run/runner.py), so none of them is being written.
        for leftover in self.root.glob(".round-*.tmp*"):
            shutil.rmtree(leftover, ignore_errors=True)
        name = f"round-{state.round:06d}"
        tmp = self.root / f".{name}.tmp{os.getpid()}"
        try:
            self._write(tmp, model, optimizer, state)
        except (OSError, RuntimeError) as exc:
            shutil.rmtree(tmp, ignore_errors=True)
            # torch.save reports a full disk as a RuntimeError ("unexpected pos"); any other is a bug
            if isinstance(exc, OSError) or self._free_mb() < NEEDS_FREE_MB:
                raise SapoError(self._write_failure(state.round, exc)) from exc
            raise
        final = self.root / name
        if final.exists():
            # Only ever a leftover of a save killed before LATEST named it; the current one is never rewritten.
            current = self.latest()
            if current is not None and current.name == name:
                raise RuntimeError(f"refusing to overwrite the current checkpoint {name}")
            shutil.rmtree(final)
        os.replace(tmp, final)
        self._point_at(name)
        self._prune(keep=name)
        return final

    @staticmethod
    def _write(tmp: Path, model: Any, optimizer: torch.optim.Optimizer, state: NodeState) -> None:
        tmp.mkdir()
        model.save_pretrained(str(tmp), save_embedding_layers=False)  # peft: adapter_model.safetensors + adapter_config.json
        (tmp / "README.md").unlink(missing_ok=True)  # peft's model-card stub: not ours to ship
        torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
        (tmp / "state.json").write_text(json.dumps(state.__dict__, default=str))
        files = sorted(p.name for p in tmp.iterdir())
        for fname in files:
            with open(tmp / fname, "rb") as fh:
                os.fsync(fh.fileno())
        manifest = {f: _sha256(tmp / f) for f in files}
        (tmp / "MANIFEST.json").write_text(json.dumps(manifest, indent=1))
        with open(tmp / "MANIFEST.json", "rb") as fh:
            os.fsync(fh.fileno())

    def _write_failure(self, round_number: int, exc: BaseException) -> str:
        """One line for a checkpoint that could not be written: what, where, and what is kept."""
        try:
            current = self.latest()
        except (OSError, SapoError):
            current = None
        kept = (f"training goes on from {current.name} when started again" if current
                else "no earlier checkpoint: training starts from the beginning when started again")
        free_mb = self._free_mb()
        full = getattr(exc, "errno", None) in (errno.ENOSPC, errno.EDQUOT) or free_mb < NEEDS_FREE_MB
        why = (f"the disk is full ({free_mb:.0f} MB free; a checkpoint takes tens of MB)" if full
               else f"{type(exc).__name__}: {first_line(exc)}")
        return f"could not save round {round_number}'s checkpoint in {self.root}: {why}; {kept}"

    def _free_mb(self) -> float:
        return shutil.disk_usage(self.root).free / 2**20

    def _prune(self, keep: str) -> None:
        complete = sorted(p for p in self.root.glob("round-*") if p.is_dir())
        for old in complete[:-KEEP]:
            if old.name != keep:
                shutil.rmtree(old, ignore_errors=True)

    @staticmethod
    def verify(path: Path) -> None:
        """Every file present and matching the manifest: else CheckpointDamaged, or a SapoError for a manifest
        of another format (a newer version's checkpoint is not damage, and is never set aside)."""
        try:
            manifest = json.loads((path / "MANIFEST.json").read_text())
        except (OSError, ValueError):
            raise CheckpointDamaged(f"checkpoint {path.name} is damaged (its manifest is missing or unreadable)",
                                    path) from None
        for fname in (*LORA_FILES, "optimizer.pt", "state.json"):
            if fname not in manifest:
                raise SapoError(f"checkpoint {path} was written in another format: its manifest lacks {fname}")
        for fname, digest in manifest.items():
            f = path / fname
            if not f.is_file() or _sha256(f) != digest:
                raise CheckpointDamaged(f"checkpoint {path.name} is damaged ({fname} is missing or does not match "
                                        f"its manifest)", path)

    def load_state(self, path: Path) -> NodeState:
        self.verify(path)
        data = json.loads((path / "state.json").read_text())
        return NodeState(**data)

    @staticmethod
    def load_weights(path: Path, model: Any, optimizer: torch.optim.Optimizer | None) -> None:
        from peft import set_peft_model_state_dict
        from safetensors.torch import load_file

        result = set_peft_model_state_dict(model, load_file(str(path / "adapter_model.safetensors")))
        unexpected = getattr(result, "unexpected_keys", [])
        if unexpected:
            raise SapoError(f"checkpoint {path} does not fit this model (LoRA settings or model changed): "
                            f"unexpected {unexpected[0]}")
        if optimizer is not None:
            try:
                optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=True))
            except (ValueError, RuntimeError) as exc:
                raise SapoError(f"checkpoint {path}: optimizer state does not fit ({exc})") from None


def model_folder(model: str) -> str:
    """A model's checkpoint folder name: its name, with anything a file system might mind replaced."""
    return re.sub(r"[^A-Za-z0-9._-]+", "-", model).strip(".-") or "model"


def model_store(data_dir: Path, model: str) -> CheckpointStore:
    """The checkpoints of one model in a data dir (moving a data dir's checkpoints of before per-model folders
    into their model's folder first)."""
    root = data_dir / "checkpoints"
    adopt_flat_layout(root)
    return CheckpointStore(root / model_folder(model))


def model_stores(data_dir: Path) -> dict[str, CheckpointStore]:
    """Every model's checkpoints in a data dir, by folder name, newest checkpoint first."""
    root = data_dir / "checkpoints"
    adopt_flat_layout(root)
    found = [d for d in root.iterdir() if d.is_dir() and (d / "LATEST").is_file()] if root.is_dir() else []
    found.sort(key=lambda d: (d / "LATEST").stat().st_mtime_ns, reverse=True)
    return {d.name: CheckpointStore(d) for d in found}


def adopt_flat_layout(root: Path) -> None:
    """Before per-model folders one model's checkpoints lay in ``checkpoints/`` itself: move them, whole, into
    ``checkpoints/<model>/`` with two renames (checkpoints -> .checkpoints-moving -> checkpoints/<model>), so a
    kill at any moment leaves them either where they were or half-way, and the next start finishes the move."""
    moving = root.with_name(".checkpoints-moving")
    if not moving.exists():
        if not (root / "LATEST").is_file():
            return
        _model_of(root)  # an unreadable checkpoint is reported before anything moves
        for name in HISTORY_FILES:  # the data dir's round history was that model's too: it travels with them
            if (root.parent / name).is_file():
                os.replace(root.parent / name, root / name)
        os.replace(root, moving)
    model = _model_of(moving)
    root.mkdir(exist_ok=True)
    # Other models' folders beside the flat checkpoints (an older version ran on a newer data dir) go back
    # up first; every step can be repeated, so a kill anywhere is finished by the next start.
    for other in moving.iterdir():
        if other.is_dir() and not other.name.startswith(("round-", ".round-")) and not (root / other.name).exists():
            os.replace(other, root / other.name)
    os.replace(moving, root / model_folder(model))
    _fsync_dir(root)


def _model_of(flat: Path) -> str:
    store = CheckpointStore(flat)
    latest = store.latest()
    if latest is None:
        raise SapoError(f"{flat} holds no LATEST checkpoint pointer; move it away to start over")
    try:
        return str(json.loads((latest / "state.json").read_text()).get("model") or "model")
    except (OSError, ValueError, AttributeError):
        raise SapoError(f"checkpoint {latest} is incomplete or corrupt (unreadable state); "
                        f"move it away to resume from an earlier one") from None
