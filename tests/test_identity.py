"""A node's key in its data dir: made once, kept private, migrated from old random ids."""

from __future__ import annotations

import json
import os
import stat
from pathlib import Path

import pytest

from engine.errors import SapoError
from engine.sharing.keyfile import INFO_FILE, KEY_FILE, load_or_create
from wire.identity import node_id_for

posix_only = pytest.mark.skipif(os.name != "posix", reason="file modes are POSIX")


def test_first_start_makes_a_private_key_and_later_starts_keep_it(tmp_path: Path) -> None:
    first = load_or_create(tmp_path)
    assert first.note is not None and first.identity.node_id in first.note
    again = load_or_create(tmp_path)
    assert again.note is None
    assert again.identity.node_id == first.identity.node_id == node_id_for(first.identity.public_key)
    info = json.loads((tmp_path / INFO_FILE).read_text())
    assert info == {"node_id": first.identity.node_id, "public_key": first.identity.public_key.hex()}
    if os.name == "posix":
        assert stat.S_IMODE((tmp_path / KEY_FILE).stat().st_mode) == 0o600
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".tmp")]


@posix_only
def test_key_is_private_even_with_a_lax_umask(tmp_path: Path) -> None:
    old = os.umask(0)
    try:
        load_or_create(tmp_path)
    finally:
        os.umask(old)
    assert stat.S_IMODE((tmp_path / KEY_FILE).stat().st_mode) == 0o600


@posix_only
@pytest.mark.parametrize("mode", [0o640, 0o604, 0o644])
def test_a_key_others_can_read_is_refused_with_a_clear_line(tmp_path: Path, mode: int) -> None:
    load_or_create(tmp_path)
    (tmp_path / KEY_FILE).chmod(mode)
    with pytest.raises(SapoError) as info:
        load_or_create(tmp_path)
    message = str(info.value)
    assert "\n" not in message and "chmod 600" in message and f"{mode:04o}" in message
    (tmp_path / KEY_FILE).chmod(0o600)
    load_or_create(tmp_path)  # fixed by its owner: fine again


def test_old_random_id_migrates_to_a_key_with_a_note(tmp_path: Path) -> None:
    old_id = "5a90" * 8
    (tmp_path / INFO_FILE).write_text(json.dumps({"node_id": old_id}))
    loaded = load_or_create(tmp_path)
    assert loaded.identity.node_id != old_id
    assert loaded.note is not None and old_id in loaded.note and loaded.identity.node_id in loaded.note
    assert json.loads((tmp_path / INFO_FILE).read_text())["node_id"] == loaded.identity.node_id
    assert load_or_create(tmp_path).note is None


def test_info_file_never_overrides_the_key(tmp_path: Path) -> None:
    me = load_or_create(tmp_path).identity
    (tmp_path / INFO_FILE).write_text(json.dumps({"node_id": "f" * 32}))  # someone edits the id
    assert load_or_create(tmp_path).identity.node_id == me.node_id
    assert json.loads((tmp_path / INFO_FILE).read_text())["node_id"] == me.node_id


def test_corrupt_key_is_a_clear_error(tmp_path: Path) -> None:
    key = tmp_path / KEY_FILE
    key.write_bytes(b"not a key")
    key.chmod(0o600)
    with pytest.raises(SapoError) as info:
        load_or_create(tmp_path)
    assert str(info.value) == f"node key {key} is unreadable or corrupt (not a PEM private key); delete it to start as a new node"


def test_install_gives_a_data_dir_a_chosen_identity(tmp_path: Path) -> None:
    from engine.sharing.keyfile import install
    from wire.identity import Identity

    me = Identity.from_seed(b"\x01" * 32)
    install(tmp_path, me)
    loaded = load_or_create(tmp_path)
    assert loaded.identity.node_id == me.node_id and loaded.note is None
    if os.name == "posix":
        assert stat.S_IMODE((tmp_path / KEY_FILE).stat().st_mode) == 0o600


@posix_only
def test_engine_refuses_a_readable_key_before_anything_else(tmp_path: Path) -> None:
    import subprocess
    import sys

    load_or_create(tmp_path)
    (tmp_path / KEY_FILE).chmod(0o644)
    proc = subprocess.run([sys.executable, "-m", "engine", "run", "--offline", "--model", "no-such-model",
                           "--data-dir", str(tmp_path)], capture_output=True, text=True, timeout=120)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode != 0 and len(lines) == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert lines[0].startswith("sapo-engine: error: node key") and "chmod 600" in lines[0]
